"""Data sources against the real backend: catalog (regions, instance types) and lookups by id or name."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

from acceptance.backend import Backend
from acceptance.gpucloud_steps import (
    GpuCloudTerraform,
    apply_and_check,
    backend,
    gpucloud_tf,
    new_public_key,
    plan_error,
)

__all__ = ["backend", "gpucloud_tf"]  # fixtures used by the tests below

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "terraform"
EXAMPLE_FILES = [
    EXAMPLES / "resources" / "gpucloud_ssh_key" / "resource.tf",
    EXAMPLES / "resources" / "gpucloud_shared_volume" / "resource.tf",
    *(
        EXAMPLES / "data-sources" / name / "data-source.tf"
        for name in (
            "gpucloud_regions",
            "gpucloud_instance_types",
            "gpucloud_ssh_key",
            "gpucloud_shared_volume",
            "gpucloud_quota",
        )
    ),
]


def outputs(tf: object) -> dict[str, object]:
    return {name: o["value"] for name, o in tf.output_json().items()}  # type: ignore[attr-defined]


def test_acc_data_sources_catalog(gpucloud_tf: GpuCloudTerraform, backend: Backend) -> None:
    tf = gpucloud_tf(
        """
        data "gpucloud_regions" "all" {}

        data "gpucloud_instance_types" "all" {}

        data "gpucloud_instance_types" "h100_east" {
          region   = "us-east-1"
          gpu      = "h100"
          min_gpus = 8
        }

        output "regions" { value = data.gpucloud_regions.all.regions[*].name }
        output "fabrics" { value = data.gpucloud_regions.all.regions[0].fabrics[*].kind }
        output "storage_price" { value = data.gpucloud_regions.all.regions[0].storage_usd_per_tib_hour }
        output "all_types" { value = data.gpucloud_instance_types.all.instance_types[*].name }
        output "h100_east" { value = data.gpucloud_instance_types.h100_east.instance_types }
        """
    )
    apply_and_check(tf)
    out = outputs(tf)
    api_regions = backend.client.list_regions()
    assert out["regions"] == [r["name"] for r in api_regions]
    assert set(out["fabrics"]) == {"infiniband", "efa", "ethernet"}  # type: ignore[arg-type]
    assert Decimal(str(out["storage_price"])) == Decimal(api_regions[0]["storage_usd_per_tib_hour"])
    assert out["all_types"] == [t["name"] for t in backend.client.list_instance_types()]
    h100 = {t["name"]: t for t in out["h100_east"]}  # type: ignore[attr-defined]
    assert sorted(h100) == ["8xH100", "8xH100-EFA"]  # 1xH100 has one GPU; H200/B200 are other GPUs
    ib = h100["8xH100"]
    assert Decimal(str(ib["on_demand_usd_per_gpu_hour"])) == Decimal("3.99")
    assert [a["region"] for a in ib["availability"]] == ["us-east-1"]
    assert ib["available_nodes"] == sum(a["available_nodes"] for a in ib["availability"]) > 0
    assert ib["reserved"][0]["min_duration_days"] >= 1

    tf.write_main('data "gpucloud_instance_types" "x" { region = "atlantis" }')
    output = plan_error(tf)
    assert "Unknown Region" in output and '"atlantis"' in output and 'region = "atlantis"' in output


def test_acc_data_sources_lookups_by_id_and_name(gpucloud_tf: GpuCloudTerraform, backend: Backend) -> None:
    key = backend.client.create_ssh_key(
        name="lookup-key", public_key=new_public_key(), idempotency_key="ds-k"
    )
    volume = backend.client.create_volume(
        name="lookup-vol", region="us-east-1", size_tib=3, idempotency_key="ds-v"
    )
    tf = gpucloud_tf(
        f"""
        data "gpucloud_ssh_key" "by_name" {{ name = "lookup-key" }}
        data "gpucloud_ssh_key" "by_id" {{ id = "{key["id"]}" }}
        data "gpucloud_shared_volume" "by_name" {{ name = "lookup-vol" }}
        data "gpucloud_shared_volume" "by_id" {{ id = "{volume["id"]}" }}

        output "key_by_name" {{ value = data.gpucloud_ssh_key.by_name }}
        output "key_by_id" {{ value = data.gpucloud_ssh_key.by_id }}
        output "vol_by_name" {{ value = data.gpucloud_shared_volume.by_name }}
        output "vol_by_id" {{ value = data.gpucloud_shared_volume.by_id }}
        """
    )
    apply_and_check(tf)
    out = outputs(tf)
    assert out["key_by_name"] == out["key_by_id"]
    assert out["key_by_id"]["fingerprint"] == key["fingerprint"]  # type: ignore[index]
    assert out["key_by_id"]["public_key"] == key["public_key"]  # type: ignore[index]
    assert out["vol_by_name"] == out["vol_by_id"]
    assert out["vol_by_id"]["size_tib"] == 3 and out["vol_by_id"]["mount_path"] == volume["mount_path"]  # type: ignore[index]

    cases = {
        'data "gpucloud_ssh_key" "x" { name = "no-such-key" }': 'No SSH key named "no-such-key"',
        'data "gpucloud_ssh_key" "x" {}': "Set id or name",
        'data "gpucloud_ssh_key" "x" {\n id = "a"\n name = "b"\n}': "Set either id or name, not both",
        'data "gpucloud_shared_volume" "x" { id = "vol_doesnotexist" }': 'No shared volume with id "vol_',
    }
    for config, message in cases.items():
        tf.write_main(config)
        assert message in plan_error(tf), config

    backend.client.create_volume(name="lookup-vol", region="us-west-2", size_tib=1, idempotency_key="ds-v2")
    tf.write_main('data "gpucloud_shared_volume" "x" { name = "lookup-vol" }')
    assert "2 shared volumes are named" in plan_error(tf)


def test_acc_examples_of_ssh_key_volume_and_data_sources_plan(
    gpucloud_tf: GpuCloudTerraform, backend: Backend, tmp_path: Path
) -> None:
    """The examples shown in the docs plan cleanly against a real backend."""
    backend.client.create_ssh_key(name="ops-team", public_key=new_public_key(), idempotency_key="ex-k")
    backend.client.create_volume(name="datasets", region="us-east-1", size_tib=1, idempotency_key="ex-v")
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519.pub").write_text(new_public_key() + "\n")
    tf = gpucloud_tf("")
    tf.env["HOME"] = str(home)
    for example in EXAMPLE_FILES:
        tf.write(f"{example.parent.parent.name}-{example.parent.name}.tf", example.read_text())
    result = tf.plan("-detailed-exitcode")
    assert result.returncode == 2 and "2 to add, 0 to change, 0 to destroy" in result.output
    assert "h100_prices" in result.output and "ops_key_id" in result.output


def test_acc_provider_missing_or_rejected_key_is_reported_at_the_provider_block(
    gpucloud_tf: GpuCloudTerraform,
) -> None:
    tf = gpucloud_tf('data "gpucloud_regions" "all" {}')
    rejected = tf.run("plan", check=False, env={"GPUCLOUD_API_KEY": "gpc_not_a_real_key"})
    text = " ".join(rejected.output.split())
    assert rejected.returncode == 1 and "Invalid API Key" in text and "rejected the API key" in text
    assert 'provider "gpucloud"' in text  # Terraform points at the provider block

    del tf.env["GPUCLOUD_API_KEY"]
    missing = tf.plan(check=False)
    text = " ".join(missing.output.split())
    assert missing.returncode == 1 and "Missing API Key" in text and "GPUCLOUD_API_KEY" in text
    assert 'provider "gpucloud"' in text
