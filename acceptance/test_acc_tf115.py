"""What Terraform 1.12+ users expect of gpucloud, on Terraform 1.15 against the real backend: import
blocks by resource identity with generated configuration, `terraform query` (list resources with
filters) whose `-generate-config-out` brings hand-made objects under Terraform, and node actions
invoked with `terraform apply -invoke`; and the money plans of issue 27 (spot at the rate charged, a
reservation's up-front charge at plan, renames and autoscaling ranges in place). (Terraform 1.11 runs
every other module with the same installed provider.)"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest

from acceptance.backend import Backend
from acceptance.cluster_backend import fast_backend
from acceptance.gpucloud_steps import GpuCloudTerraform, gpucloud_tf, new_public_key, values
from acceptance.harness import Terraform
from acceptance.workflow_steps import eventually

__all__ = ["gpucloud_tf"]  # fixture used by the tests below


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    with fast_backend(tmp_path_factory.mktemp("backend")) as server:
        yield server


def made_by_hand(backend: Backend, prefix: str) -> dict[str, str]:
    """One object of each type made outside Terraform (the console, the CLI): type -> API id."""
    key = backend.client.create_ssh_key(
        name=f"{prefix}-key", public_key=new_public_key() + "\n", idempotency_key=f"{prefix}-key"
    )
    volume = backend.client.create_volume(
        name=f"{prefix}-data", region="us-east-1", size_tib=2, idempotency_key=f"{prefix}-vol"
    )
    cluster = backend.client.create_cluster(
        {"name": f"{prefix}-train", "region": "us-east-1", "instance_type": "8xH100", "node_count": 2,
         "labels": {"team": "ml"}, "ssh_key_ids": [key["id"]], "volume_ids": [volume["id"]]},
        idempotency_key=f"{prefix}-cls",
    )
    assert eventually(lambda: backend.client.get_cluster(cluster["id"])["status"] == "RUNNING")
    return {"gpucloud_ssh_key": key["id"], "gpucloud_shared_volume": volume["id"],
            "gpucloud_gpu_cluster": cluster["id"]}


def test_acc_identity_import_blocks_generate_config_for_every_resource(
    gpucloud_tf: GpuCloudTerraform, backend: Backend
) -> None:
    ids = made_by_hand(backend, "adopt")
    blocks = "".join(
        f'import {{\n  to = {type_name}.adopted\n  identity = {{ id = "{object_id}" }}\n}}\n'
        for type_name, object_id in ids.items()
    )
    tf = gpucloud_tf(blocks, version="1.15")
    plan = tf.plan("-generate-config-out=generated.tf")
    assert "Plan: 3 to import, 0 to add, 0 to change, 0 to destroy." in plan.stdout
    generated = " ".join((tf.workdir / "generated.tf").read_text().split())
    assert 'name = "adopt-key"' in generated and 'size_tib = 2' in generated
    assert 'instance_type = "8xH100"' in generated

    tf.apply()
    tf.assert_plan_empty()
    resources = {r["address"]: r for r in tf.show_json()["values"]["root_module"]["resources"]}
    for type_name, object_id in ids.items():
        adopted = resources[f"{type_name}.adopted"]
        assert adopted["values"]["id"] == object_id
        assert (adopted["identity"], adopted["identity_schema_version"]) == ({"id": object_id}, 0)


QUERY = """
list "gpucloud_gpu_cluster" "ml" {
  provider = gpucloud
  config {
    region      = "us-east-1"
    name_prefix = "found-"
    labels      = { team = "ml" }
    status      = "RUNNING"
  }
}

list "gpucloud_shared_volume" "data" {
  provider = gpucloud
  config {
    name_prefix = "found-"
  }
}

list "gpucloud_ssh_key" "keys" {
  provider = gpucloud
  config {
    name_prefix = "found-"
  }
}
"""


def test_acc_query_finds_hand_made_objects_and_generates_their_config(
    gpucloud_tf: GpuCloudTerraform, backend: Backend
) -> None:
    ids = made_by_hand(backend, "found")
    other = backend.client.create_cluster(  # another team's: the labels filter leaves it out
        {"name": "found-web", "region": "us-east-1", "instance_type": "8xH100", "node_count": 1,
         "labels": {"team": "web"}},
        idempotency_key="found-web",
    )
    tf = gpucloud_tf("", version="1.15")
    tf.write("find.tfquery.hcl", QUERY)
    listed = [line.split() for line in tf.run("query").stdout.splitlines() if line.startswith("list.")]
    assert sorted(listed) == sorted([
        ["list.gpucloud_gpu_cluster.ml", f"id={ids['gpucloud_gpu_cluster']}", "found-train"],
        ["list.gpucloud_shared_volume.data", f"id={ids['gpucloud_shared_volume']}", "found-data"],
        ["list.gpucloud_ssh_key.keys", f"id={ids['gpucloud_ssh_key']}", "found-key"],
    ])
    assert other["id"] not in str(listed)

    tf.run("query", "-generate-config-out=found.tf")
    generated = " ".join((tf.workdir / "found.tf").read_text().split())
    assert generated.count("import {") == 3 and 'labels = { team = "ml" }' in generated
    plan = tf.plan()
    assert "Plan: 3 to import, 0 to add, 0 to change, 0 to destroy." in plan.stdout
    tf.apply()
    tf.assert_plan_empty()
    adopted = {r["type"]: r["identity"] for r in tf.show_json()["values"]["root_module"]["resources"]}
    assert adopted == {type_name: {"id": object_id} for type_name, object_id in ids.items()}


def test_acc_cluster_node_action_invoked_restarts_the_node(
    gpucloud_tf: GpuCloudTerraform, backend: Backend
) -> None:
    cluster = backend.client.create_cluster(
        {"name": "act-train", "region": "us-east-1", "instance_type": "8xH100", "node_count": 1},
        idempotency_key="act-train",
    )
    assert eventually(lambda: backend.client.get_cluster(cluster["id"])["status"] == "RUNNING")
    (node,) = backend.client.list_cluster_nodes(cluster["id"])["items"]
    tf = gpucloud_tf(f"""
action "gpucloud_cluster_node_action" "reboot" {{
  config {{
    cluster_id = "{cluster['id']}"
    node       = "{node['name']}"
    action     = "restart"
  }}
}}
""", version="1.15")
    invoked = tf.apply("-invoke=action.gpucloud_cluster_node_action.reboot")
    shown = [line.split(": ", 1)[1] for line in invoked.stdout.splitlines()
             if line.startswith("Action action.gpucloud_cluster_node_action.reboot (triggered by CLI): ")]
    assert shown[0].startswith(f"restart of {node['name']} accepted; {node['name']} is RUNNING, restart "
                               "pending"), shown
    # The node's status reason is its last history event: the restart it just finished.
    assert shown[-2:] == [f"{node['name']} is RUNNING (restarted: machine {node['instance_id']} is back), "
                          f"machine {node['instance_id']}", f"{node['name']} is RUNNING again"], shown
    assert "Actions: 1 invoked." in invoked.stdout
    events = backend.client.request(
        "GET", "/v1/audit-events", params={"action": "cluster.node_restart", "resource_id": cluster["id"]}
    ).body["items"]
    assert len(events) == 1, events
    (after,) = backend.client.list_cluster_nodes(cluster["id"])["items"]
    assert after["status"] == "RUNNING" and after["pending_action"] is None


MONEY = """
resource "gpucloud_reservation" "week" {
  name          = "%s"
  region        = "us-east-1"
  instance_type = "8xH100"
  node_count    = 1
  duration_days = 7
}

resource "gpucloud_gpu_cluster" "elastic" {
  name          = "elastic"
  region        = "us-east-1"
  instance_type = "8xH100"
  autoscaling = {
    min_nodes = 1
    max_nodes = %d
  }
}
"""
SPOT = """
resource "gpucloud_gpu_cluster" "spot" {
  name          = "spot"
  region        = "us-east-1"
  instance_type = "8xH100"
  capacity_type = "spot"
}
"""


def saved_plan(tf: Terraform) -> dict[str, dict[str, Any]]:
    """`plan -out=money.tfplan`: each resource's planned change (actions, before, after, after_unknown)."""
    tf.plan("-out=money.tfplan")
    return {c["address"]: c["change"] for c in tf.show_json("money.tfplan")["resource_changes"]}


def changed(change: dict[str, Any]) -> set[str]:
    after_unknown = {k for k, v in change["after_unknown"].items() if v}
    return {k for k in change["after"] if change["after"][k] != change["before"][k]} | after_unknown


def test_acc_tf115_money_plans_show_what_is_charged_and_keep_the_rest(
    gpucloud_tf: GpuCloudTerraform, backend: Backend
) -> None:
    # Issue 27 on Terraform 1.15: spot planned at the rate charged, the reservation's up-front charge
    # known at plan, a rename in place, an autoscaling range change planning only `autoscaling`, and the
    # forfeit warning when destroying a reservation with days left.
    spot = gpucloud_tf(SPOT, version="1.15")
    planned_spot = saved_plan(spot)["gpucloud_gpu_cluster.spot"]["after"]["estimated_hourly_cost_usd"]
    estimate = backend.client.estimate_price(
        {"region": "us-east-1", "instance_type": "8xH100", "node_count": 1, "capacity_type": "spot"})
    assert Decimal(str(planned_spot)) == Decimal(estimate["hourly_usd"]) == Decimal("12.768")

    tf = gpucloud_tf(MONEY % ("week", 2), version="1.15")
    booking = saved_plan(tf)["gpucloud_reservation.week"]
    upfront = Decimal(str(booking["after"]["upfront_cost_usd"]))
    tf.apply(plan_file="money.tfplan")
    tf.assert_plan_empty()
    reservation = backend.client.get_reservation(values(tf, "gpucloud_reservation.week")["id"])
    assert upfront == Decimal(reservation["upfront_usd"]) == Decimal("4558.176")

    tf.write_main(MONEY % ("week renamed", 3))
    changes = saved_plan(tf)
    assert changes["gpucloud_reservation.week"]["actions"] == ["update"]
    assert changed(changes["gpucloud_reservation.week"]) == {"name"}
    assert changed(changes["gpucloud_gpu_cluster.elastic"]) == {"autoscaling"}
    tf.apply(plan_file="money.tfplan")
    tf.assert_plan_empty()
    assert values(tf, "gpucloud_reservation.week")["id"] == reservation["id"]

    output = " ".join(tf.plan("-destroy").output.split())
    assert f"Destroying reservation {reservation['id']} ends its reserved term early" in output, output
    tf.destroy()
