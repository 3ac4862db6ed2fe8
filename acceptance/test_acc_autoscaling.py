"""An autoscaled gpucloud_gpu_cluster against the real backend: node_count is the engine's, so a plan after
the autoscaler moved it is empty (no drift), a wider range plans only `autoscaling`, and a narrower range
moves it into the range."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from acceptance.backend import Backend
from acceptance.cluster_backend import fast_backend
from acceptance.gpucloud_steps import GpuCloudTerraform, apply_and_check, gpucloud_tf, plan_text, values
from acceptance.harness import wait_until
from backend.domain.clock import utcnow
from backend.provisioning import autoscaler
from backend.runtime import build_runtime
from backend.settings import Settings
from backend.store.models import Cluster

__all__ = ["gpucloud_tf"]

AUTOSCALED = """
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


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    with fast_backend(tmp_path_factory.mktemp("backend")) as server:
        yield server


def scale_from_engine(backend: Backend, cluster_id: str, node_count: int) -> None:
    """The engine's autoscaler decision, carried out on the backend's store (its worker does the rest)."""
    members = [n["name"] for n in backend.client.get_cluster(cluster_id)["nodes"]]  # before the lock
    runtime = build_runtime(Settings(data_dir=backend.data_dir))  # wires quota admission in, as a worker's
    try:
        with runtime.write_sessions() as session:
            cluster = session.get(Cluster, cluster_id)
            assert cluster is not None
            decision = autoscaler.Decision(node_count, (), "acceptance: jobs pending for lack of nodes")
            assert autoscaler.apply(session, runtime.catalog, cluster, decision, members=members,
                                    now=utcnow())
            session.commit()
    finally:
        runtime.close()


def planned_change(tf: Any, address: str) -> dict[str, Any]:
    """The change `plan -out` records for `address` (actions, before, after, after_unknown)."""
    tf.plan("-out=change.tfplan")
    for change in tf.show_json("change.tfplan")["resource_changes"]:
        if change["address"] == address:
            found: dict[str, Any] = change["change"]
            return found
    raise AssertionError(f"{address} has no planned change")


def any_unknown(marks: Any) -> bool:
    """Whether a plan's `after_unknown` marks anything unknown (it mirrors the value: true at unknowns)."""
    if isinstance(marks, dict):
        return any(any_unknown(v) for v in marks.values())
    if isinstance(marks, list):
        return any(any_unknown(v) for v in marks)
    return marks is True


def test_acc_autoscaling_cluster_whose_node_count_moves_plans_clean(
    gpucloud_tf: GpuCloudTerraform, backend: Backend
) -> None:
    tf = gpucloud_tf(AUTOSCALED % 3)
    apply_and_check(tf)
    state = values(tf, "gpucloud_gpu_cluster.elastic")
    assert (state["node_count"], state["orchestrator"]) == (1, "slurm")
    assert state["autoscaling"] == {"min_nodes": 1, "max_nodes": 3, "scale_down_idle_minutes": 10}

    scale_from_engine(backend, state["id"], 3)

    def grown() -> bool:
        remote = backend.client.get_cluster(state["id"])
        return remote["status"] == "RUNNING" and [n["status"] for n in remote["nodes"]] == ["RUNNING"] * 3

    wait_until(grown, lambda: f"the cluster did not grow: {backend.client.get_cluster(state['id'])}",
               interval=0.5)
    code, output = plan_text(tf)
    assert code == 0 and "No changes" in output, output

    # Issue 27: a wider range that leaves node_count where it is plans only `autoscaling` (node_count,
    # nodes, login, slurm and num_gpus were planned unknown, every node shown as `- {...} -> null`).
    tf.write_main(AUTOSCALED % 4)
    change = planned_change(tf, "gpucloud_gpu_cluster.elastic")
    changed = {k for k in change["after"] if change["after"][k] != change["before"][k]}
    assert change["actions"] == ["update"] and changed == {"autoscaling"}, changed
    assert not any_unknown(change["after_unknown"]), change["after_unknown"]
    tf.apply(plan_file="change.tfplan")
    tf.assert_plan_empty()

    # A narrower range moves node_count into it (the API's PATCH carries no node_count).
    tf.write_main(AUTOSCALED % 2)
    apply_and_check(tf)
    assert values(tf, "gpucloud_gpu_cluster.elastic")["node_count"] == 2
    assert len(backend.client.get_cluster(state["id"])["nodes"]) == 2
    tf.destroy()
