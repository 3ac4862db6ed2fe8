"""gpucloud_gpu_cluster on day 2, against the real backend with the simulated driver and a high XID rate:
a 4-node cluster stays RUNNING while failed nodes are repaired in place (node_repair = "auto") and every
`terraform plan` meanwhile is empty (a repaired node's new instance_id is refreshed, never drift); with
node_repair = "manual" a failed node stays failed (the plan is still empty, with a warning naming it)
until the `replace` node action through the API brings the cluster back."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from acceptance.backend import Backend
from acceptance.cluster_backend import fast_backend, restart
from acceptance.gpucloud_steps import GpuCloudTerraform, gpucloud_tf, plan_text, values
from acceptance.harness import WAIT_CEILING_S, Terraform

__all__ = ["gpucloud_tf"]

# Half the nodes suffer a GPU fault (XID) within a few seconds of running (6000 simulated seconds at
# speed 1500: at most 4 s), after the cluster is up; the seed makes it the same run every time.
XID_ENGINE = {"GPUCLOUD_SIMULATION_XID_RATE": "0.5", "GPUCLOUD_SIMULATION_XID_WINDOW_SECONDS": "6000"}
SETTLE_SECONDS = WAIT_CEILING_S  # a ceiling for each wait below: only a stuck engine reaches it


def config(name: str, node_repair: str) -> str:
    return f"""
resource "gpucloud_gpu_cluster" "{name}" {{
  name          = "{name}"
  region        = "us-east-1"
  instance_type = "8xH100"
  node_count    = 4
  node_repair   = "{node_repair}"
}}
"""


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    with fast_backend(tmp_path_factory.mktemp("backend")) as server:
        restart(server, XID_ENGINE)  # fast_backend turns faults off
        yield server


def machines(cluster: dict[str, Any]) -> dict[str, str]:
    return {n["name"]: n["instance_id"] for n in cluster["nodes"]}


def summary(cluster: dict[str, Any]) -> str:
    nodes = ", ".join(f"{n['name']} {n['instance_id']} {n['status']}" for n in cluster["nodes"])
    return f"{cluster['status']}/{cluster['phase']}: {nodes}"


def assert_plan_empty(tf: Terraform) -> str:
    code, output = plan_text(tf)
    assert code == 0 and "No changes." in output, output
    return output


def test_acc_gpu_cluster_auto_repair_keeps_running_and_plans_stay_empty(
    gpucloud_tf: GpuCloudTerraform, backend: Backend
) -> None:
    tf = gpucloud_tf(config("repaired", "auto"))
    tf.apply()
    created = values(tf, "gpucloud_gpu_cluster.repaired")
    assert created["status"] == "RUNNING" and len(created["nodes"]) == 4
    before = {n["name"]: n["instance_id"] for n in created["nodes"]}
    # Plan while the engine replaces failed nodes: never a change, and the cluster never leaves RUNNING.
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        assert_plan_empty(tf)
        cluster = backend.client.get_cluster(created["id"])
        assert cluster["status"] == "RUNNING", summary(cluster)
        repaired = {k for k, v in machines(cluster).items() if before.get(k) != v}
        if repaired and cluster["phase"] == "Ready":
            break
        assert time.monotonic() < deadline, f"no repair finished in {SETTLE_SECONDS:g}s: {summary(cluster)}"
    # Refreshed: same hostnames, the repaired ones on new machines, all healthy; still nothing to plan.
    tf.run("apply", "-refresh-only", "-auto-approve")
    after = values(tf, "gpucloud_gpu_cluster.repaired")
    assert [n["name"] for n in after["nodes"]] == sorted(before)
    assert {n["name"] for n in after["nodes"] if n["instance_id"] != before[n["name"]]} >= repaired
    assert {n["health"] for n in after["nodes"]} == {"healthy"}
    assert after["status"] == "RUNNING" and after["id"] == created["id"]
    assert_plan_empty(tf)
    tf.destroy()


def test_acc_gpu_cluster_manual_repair_waits_for_the_node_action(
    gpucloud_tf: GpuCloudTerraform, backend: Backend
) -> None:
    tf = gpucloud_tf(config("manual", "manual"))
    tf.apply()
    created = values(tf, "gpucloud_gpu_cluster.manual")
    cluster_id = created["id"]
    deadline = time.monotonic() + SETTLE_SECONDS
    cluster = backend.client.get_cluster(cluster_id)
    while not any(n["status"] == "FAILED" for n in cluster["nodes"]):
        assert time.monotonic() < deadline, f"no node failed in {SETTLE_SECONDS:g}s: {summary(cluster)}"
        time.sleep(0.2)
        cluster = backend.client.get_cluster(cluster_id)
    # Left failed: the cluster runs on (Degraded), the plan is empty and names the failed node.
    assert cluster["status"] == "RUNNING" and cluster["phase"] == "Degraded", summary(cluster)
    failed = [n["name"] for n in cluster["nodes"] if n["status"] == "FAILED"]
    output = assert_plan_empty(tf)
    assert "Cluster Has Failed Nodes" in output and failed[0] in output, output
    tf.run("apply", "-refresh-only", "-auto-approve")
    health = {n["name"]: n["health"] for n in values(tf, "gpucloud_gpu_cluster.manual")["nodes"]}
    assert health[failed[0]] == "failed", health

    # The node action replaces each failed node in place (a replacement may fault too: replace it too).
    deadline = time.monotonic() + SETTLE_SECONDS  # a wait of its own, after the plans and apply above
    while not (cluster["phase"] == "Ready" and all(n["status"] == "RUNNING" for n in cluster["nodes"])):
        assert time.monotonic() < deadline, f"not back in {SETTLE_SECONDS:g}s: {summary(cluster)}"
        for node in cluster["nodes"]:
            if node["status"] == "FAILED":
                # One key per failed machine: asking again while the engine picks it up is a replay.
                backend.client.request("POST", f"/v1/clusters/{cluster_id}/nodes/{node['name']}/actions",
                                       json={"action": "replace"}, idempotency_key=node["instance_id"])
        time.sleep(0.3)
        cluster = backend.client.get_cluster(cluster_id)
    assert cluster["status"] == "RUNNING", summary(cluster)
    tf.run("apply", "-refresh-only", "-auto-approve")
    back = values(tf, "gpucloud_gpu_cluster.manual")
    assert {n["health"] for n in back["nodes"]} == {"healthy"}
    assert {n["name"]: n["instance_id"] for n in back["nodes"]}[failed[0]] != machines(created)[failed[0]]
    assert_plan_empty(tf)
    tf.destroy()
