"""gpucloud_shared_volume against the real backend, real provider launch path and Terraform 1.11."""

from __future__ import annotations

import json
from decimal import Decimal

from acceptance.backend import Backend, LosingProxy
from acceptance.gpucloud_steps import (
    PROVIDER_BLOCK,
    GpuCloudTerraform,
    apply_and_check,
    backend,
    gpucloud_tf,
    import_verify,
    plan_error,
    plan_text,
    values,
)

__all__ = ["backend", "gpucloud_tf"]  # fixtures used by the tests below

ADDRESS = "gpucloud_shared_volume.data"


def volume_config(name: str = "datasets", region: str = "us-east-1", size: object = 2) -> str:
    return f"""
    resource "gpucloud_shared_volume" "data" {{
      name     = "{name}"
      region   = "{region}"
      size_tib = {size}
    }}
    """


def planned_cost(tf_plan_json: dict[str, object]) -> object:
    (change,) = tf_plan_json["resource_changes"]  # type: ignore[misc]
    return change["change"]["after"]["estimated_hourly_cost_usd"]


def test_acc_shared_volume_lifecycle(gpucloud_tf: GpuCloudTerraform, backend: Backend) -> None:
    tf = gpucloud_tf(volume_config())
    # The cost is known at plan time.
    tf.plan("-out=create.tfplan")
    price = Decimal(backend.client.list_regions()[0]["storage_usd_per_tib_hour"])
    assert Decimal(str(planned_cost(tf.show_json("create.tfplan")))) == price * 2
    tf.apply(plan_file="create.tfplan")
    tf.assert_plan_empty()
    state = values(tf, ADDRESS)
    remote = backend.client.get_volume(state["id"])
    assert remote["size_tib"] == 2 and remote["region"] == "us-east-1"
    assert state["status"] == "available" and state["mount_path"] == f"/mnt/shared/{state['id']}"
    assert state["attached_cluster_ids"] == []

    import_verify(tf, ADDRESS)

    # Rename and grow: in place, same id, the new cost shown in the plan.
    tf.write_main(volume_config(name="datasets-v2", size=5))
    code, output = plan_text(tf)
    assert code == 2 and "1 to change, 0 to destroy" in output and "2 -> 5" in output
    apply_and_check(tf)
    grown = values(tf, ADDRESS)
    assert grown["id"] == state["id"] and Decimal(str(grown["estimated_hourly_cost_usd"])) == price * 5
    assert backend.client.get_volume(state["id"])["size_tib"] == 5

    # Shrinking is a plan-time error that says why, and changes nothing.
    tf.write_main(volume_config(name="datasets-v2", size=3))
    output = plan_error(tf)
    assert "Shared Volume Cannot Shrink" in output and "would lose data" in output
    assert "size_tib = 3" in output  # Terraform points at the attribute
    assert backend.client.get_volume(state["id"])["size_tib"] == 5

    # Another region: replaced (and then a smaller size is fine).
    tf.write_main(volume_config(name="datasets-v2", region="us-west-2", size=1))
    code, output = plan_text(tf)
    assert code == 2 and "must be replaced" in output
    apply_and_check(tf)
    moved = values(tf, ADDRESS)
    assert moved["id"] != state["id"] and moved["region"] == "us-west-2"
    assert state["id"] not in {v["id"] for v in backend.client.list_volumes()}

    tf.destroy()
    assert moved["id"] not in {v["id"] for v in backend.client.list_volumes()}


def test_acc_shared_volume_disappears_and_drift(gpucloud_tf: GpuCloudTerraform, backend: Backend) -> None:
    tf = gpucloud_tf(volume_config(name="drifty", size=1))
    apply_and_check(tf)
    volume_id = values(tf, ADDRESS)["id"]

    backend.client.update_volume(volume_id, name="renamed-by-hand")  # drift
    code, output = plan_text(tf)
    assert code == 2 and '"renamed-by-hand" -> "drifty"' in output
    apply_and_check(tf)

    # An update planned without refresh carries the ETag of the last read: a change made in between is
    # not overwritten blindly (If-Match fails), and a normal apply then converges.
    backend.client.update_volume(volume_id, name="changed-meanwhile")
    tf.write_main(volume_config(name="drifty", size=2))
    stale = tf.apply("-refresh=false", check=False)
    assert stale.returncode == 1 and "changed outside Terraform" in " ".join(stale.output.split())
    assert backend.client.get_volume(volume_id)["size_tib"] == 1
    apply_and_check(tf)
    assert backend.client.get_volume(volume_id)["name"] == "drifty"

    backend.client.update_volume(volume_id, size_tib=4)  # grown out of band: config now asks to shrink
    output = plan_error(tf)
    assert "Shared Volume Cannot Shrink" in output and "has 4 TiB" in output
    tf.write_main(volume_config(name="drifty", size=4))
    apply_and_check(tf)  # nothing to change: the apply only records the refreshed size

    backend.client.delete_volume(volume_id)  # disappears
    code, output = plan_text(tf)
    assert code == 2 and "will be created" in output
    apply_and_check(tf)
    assert values(tf, ADDRESS)["id"] != volume_id
    tf.destroy()
    assert backend.client.list_volumes(name="drifty") == []


def test_acc_shared_volume_invalid_configurations_fail_at_plan(gpucloud_tf: GpuCloudTerraform) -> None:
    tf = gpucloud_tf(volume_config(region="mars-1"))
    output = plan_error(tf)
    assert "Unknown Region" in output and '"mars-1"' in output and "us-east-1" in output
    assert 'region = "mars-1"' in output  # Terraform points at the attribute

    cases = {
        volume_config(size=0): "Attribute size_tib value must be between 1 and 10000",
        volume_config(size=1.5): "Attribute size_tib must be a whole number",
        volume_config(name=" padded"): "Attribute name must be 1-128 printable characters",
        volume_config(region="US East"): "Attribute region must be a region name",
    }
    for config, message in cases.items():
        tf.write_main(config)
        assert message in plan_error(tf), config


def test_acc_shared_volume_unknown_values_are_not_rejected(gpucloud_tf: GpuCloudTerraform) -> None:
    tf = gpucloud_tf(
        """
        resource "terraform_data" "size" {
          input = 1
        }
        resource "gpucloud_shared_volume" "data" {
          name     = "from-unknown"
          region   = "eu-north-1"
          size_tib = terraform_data.size.output
        }
        """
    )
    tf.plan("-out=p.tfplan")
    plan = tf.show_json("p.tfplan")
    after = {c["address"]: c["change"]["after_unknown"] for c in plan["resource_changes"]}
    assert after[ADDRESS].get("estimated_hourly_cost_usd") is True, json.dumps(after)
    apply_and_check(tf)
    tf.destroy()


def test_acc_shared_volume_provider_config_unknown_at_plan(
    gpucloud_tf: GpuCloudTerraform, backend: Backend
) -> None:
    """The provider block depends on a value known only after apply: plan works without the API, and the
    apply configures the provider once the value is known."""
    tf = gpucloud_tf(volume_config(name="late-config", size=1))
    tf.write(
        "provider.tf",
        f"""
        terraform {{
          required_providers {{
            gpucloud = {{ source = "gpucloud/gpucloud" }}
          }}
        }}

        resource "terraform_data" "endpoint" {{
          input = "{backend.url}"
        }}

        provider "gpucloud" {{
          endpoint = terraform_data.endpoint.output
        }}
        """,
    )
    tf.plan("-out=p.tfplan")
    planned = tf.show_json("p.tfplan")
    (volume,) = [c for c in planned["resource_changes"] if c["address"] == ADDRESS]
    assert volume["change"]["after_unknown"]["estimated_hourly_cost_usd"] is True
    tf.apply(plan_file="p.tfplan")
    tf.assert_plan_empty()
    volume_id = values(tf, ADDRESS)["id"]
    assert backend.client.get_volume(volume_id)["name"] == "late-config"
    tf.destroy()
    assert volume_id not in {v["id"] for v in backend.client.list_volumes()}


def test_acc_shared_volume_import_of_missing_id_fails_clearly(gpucloud_tf: GpuCloudTerraform) -> None:
    tf = gpucloud_tf(volume_config())
    result = tf.import_(ADDRESS, "vol_01hzy3m1q8r2t6v9w4x5y7z0ab", check=False)
    assert result.returncode == 1 and "Cannot import non-existent remote object" in result.output


def test_acc_shared_volume_import_block_generates_config_that_plans_clean(
    gpucloud_tf: GpuCloudTerraform, backend: Backend
) -> None:
    existing = backend.client.create_volume(
        name="generated", region="eu-north-1", size_tib=2, idempotency_key="g"
    )
    tf = gpucloud_tf(f'import {{\n  to = {ADDRESS}\n  id = "{existing["id"]}"\n}}\n')
    tf.plan("-generate-config-out=generated.tf")
    generated = " ".join((tf.workdir / "generated.tf").read_text().split())
    assert (
        'region = "eu-north-1"' in generated and "size_tib = 2" in generated and "mount_path" not in generated
    )
    tf.apply()
    tf.assert_plan_empty()
    tf.destroy()
    assert existing["id"] not in {v["id"] for v in backend.client.list_volumes()}


def test_acc_shared_volume_lost_create_answer_leaves_no_duplicate(
    gpucloud_tf: GpuCloudTerraform, backend: Backend
) -> None:
    """The backend creates the volume but its answer is lost (every retry too): the apply fails with the
    resource tainted; the next apply deletes what the lost create made and creates one volume."""
    proxy = LosingProxy(backend.url)
    try:
        tf = gpucloud_tf(volume_config(name="lost-answer", size=1))
        tf.write(
            "provider.tf",
            PROVIDER_BLOCK.replace('provider "gpucloud" {}', 'provider "gpucloud" {\n  max_retries = 1\n}'),
        )
        tf.env["GPUCLOUD_ENDPOINT"] = proxy.url
        proxy.lose = ("POST", "/v1/volumes")
        failed = tf.apply(check=False)
        assert failed.returncode == 1 and "may have happened" in " ".join(failed.output.split())
        assert [status for _m, _p, status in proxy.lost] == [201, 201]  # created once, then replayed
        (first,) = backend.client.list_volumes(name="lost-answer")
        (resource,) = tf.show_json()["values"]["root_module"]["resources"]
        assert resource["tainted"] is True and resource["values"]["id"].startswith("unconfirmed-create:")

        proxy.lose = None
        code, output = plan_text(tf)
        assert code == 2 and "is tainted, so must be replaced" in output
        apply_and_check(tf)
        (only,) = backend.client.list_volumes(name="lost-answer")
        assert only["id"] != first["id"] and values(tf, ADDRESS)["id"] == only["id"]
        tf.destroy()
        assert backend.client.list_volumes(name="lost-answer") == []
    finally:
        proxy.close()
