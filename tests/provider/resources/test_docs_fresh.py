"""The Registry docs of the SSH key, shared volume, catalog data sources and provider page are generated
from the schemas: this fails when they are stale (regenerate with `make generate`)."""

from pathlib import Path

from provider.framework import Schema
from provider.framework.docs import generate, stale
from provider.framework.schema import NestedAttribute
from provider.resources.data_sources import (
    InstanceTypesDataSource,
    RegionsDataSource,
    SharedVolumeDataSource,
    SshKeyDataSource,
)
from provider.resources.provider import GpuCloudProvider
from provider.resources.shared_volume import SharedVolumeResource
from provider.resources.ssh_key import SshKeyResource

ROOT = Path(__file__).resolve().parents[3]
PAGES = [
    "index.md",
    "resources/ssh_key.md",
    "resources/shared_volume.md",
    "data-sources/regions.md",
    "data-sources/instance_types.md",
    "data-sources/ssh_key.md",
    "data-sources/shared_volume.md",
]


def test_docs_of_ssh_key_shared_volume_and_data_sources_are_fresh():
    pages = generate(GpuCloudProvider(), ROOT / "examples" / "terraform")
    outdated = stale({page: pages[page] for page in PAGES}, ROOT / "docs")
    assert outdated == [], f"stale docs {outdated}: run make generate (scripts/generate.sh docs)"


def test_docs_show_the_examples():
    pages = generate(GpuCloudProvider(), ROOT / "examples" / "terraform")
    assert "terraform import gpucloud_ssh_key." in pages["resources/ssh_key.md"]
    assert 'data "gpucloud_instance_types"' in pages["data-sources/instance_types.md"]


def undescribed(node, prefix=""):
    for name, attribute in node.attributes.items():
        if not attribute.description.strip():
            yield prefix + name
        if isinstance(attribute, NestedAttribute):
            yield from undescribed(attribute, f"{prefix}{name}.")


def test_every_attribute_is_described():
    schemas: list[Schema] = [
        GpuCloudProvider.schema,
        SshKeyResource.schema,
        SharedVolumeResource.schema,
        RegionsDataSource.schema,
        InstanceTypesDataSource.schema,
        SshKeyDataSource.schema,
        SharedVolumeDataSource.schema,
    ]
    for schema in schemas:
        assert schema.description
        assert list(undescribed(schema)) == []
