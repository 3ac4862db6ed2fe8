"""The Registry docs (docs/index.md, resources/, data-sources/, ephemeral-resources/, list-resources/,
actions/)
are generated from the schemas of every registered type: this fails when any page is stale or missing
(regenerate with `make generate`) and when any attribute or block lacks a description."""

from collections.abc import Iterator
from pathlib import Path

from provider.framework.docs import generate, stale
from provider.framework.schema import Block, NestedAttribute, Schema
from provider.resources.provider import (
    ACTIONS,
    DATA_SOURCES,
    EPHEMERAL_RESOURCES,
    LIST_RESOURCES,
    RESOURCES,
    GpuCloudProvider,
)

ROOT = Path(__file__).resolve().parents[3]


def _pages() -> dict[str, str]:
    return generate(GpuCloudProvider(), ROOT / "examples" / "terraform")


def test_docs_of_every_registered_type_are_fresh() -> None:
    pages = _pages()
    # One page for the provider and one per registered type.
    kinds = (RESOURCES, DATA_SOURCES, EPHEMERAL_RESOURCES, LIST_RESOURCES, ACTIONS)
    assert len(pages) == 1 + sum(len(kind) for kind in kinds)
    outdated = stale(pages, ROOT / "docs")
    assert outdated == [], f"stale docs {outdated}: run make generate (scripts/generate.sh docs)"


def test_docs_show_the_examples() -> None:
    pages = _pages()
    assert "terraform import gpucloud_ssh_key." in pages["resources/ssh_key.md"]
    assert "terraform import gpucloud_gpu_cluster." in pages["resources/gpu_cluster.md"]
    assert 'data "gpucloud_instance_types"' in pages["data-sources/instance_types.md"]
    assert 'ephemeral "gpucloud_cluster_credentials"' in pages["ephemeral-resources/cluster_credentials.md"]
    assert 'list "gpucloud_gpu_cluster"' in pages["list-resources/gpu_cluster.md"]
    assert "-invoke=action.gpucloud_cluster_node_action." in pages["actions/cluster_node_action.md"]
    assert "identity = {" in pages["resources/shared_volume.md"]


def _undescribed(node: Schema | Block | NestedAttribute, prefix: str = "") -> Iterator[str]:
    for name, attribute in node.attributes.items():
        if not attribute.description.strip():
            yield prefix + name
        if isinstance(attribute, NestedAttribute):
            yield from _undescribed(attribute, f"{prefix}{name}.")
    for name, block in node.blocks.items():
        if not block.description.strip():
            yield prefix + name
        yield from _undescribed(block, f"{prefix}{name}.")


def test_every_attribute_and_block_is_described() -> None:
    schemas = {"provider": GpuCloudProvider.schema}
    for kind in (*RESOURCES, *DATA_SOURCES, *EPHEMERAL_RESOURCES, *LIST_RESOURCES, *ACTIONS):
        schemas[kind.__name__] = kind.schema
    for owner, schema in schemas.items():
        assert schema.description, owner
        assert list(_undescribed(schema)) == [], owner
