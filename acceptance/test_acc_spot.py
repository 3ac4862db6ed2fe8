"""gpucloud_gpu_cluster with capacity_type = "spot_with_fallback" against the real backend and Terraform:
a pool whose spot share (2 of 8 nodes) is short of the 3 nodes asked for, so an on-demand node stands in
from the create; a seeded preemption of a spot node then brings another on-demand stand-in. Apply
succeeds, `nodes[*].capacity_type` says which capacity each node runs on, and the plan once the stand-in
runs is empty (the nodes changing is not drift on any configured attribute)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from acceptance.backend import Backend, running_backend
from acceptance.cluster_backend import FAST_ENGINE, kill
from acceptance.gpucloud_steps import GpuCloudTerraform, gpucloud_tf, values
from acceptance.harness import wait_until
from backend.domain.catalog import _builtin_catalog, catalog_to_dict
from backend.provisioning.drivers.simulated.datacenter import SimulatedDatacenter
from backend.provisioning.settings import EngineSettings

__all__ = ["gpucloud_tf"]

SPOT_ENGINE = {
    **FAST_ENGINE,
    "GPUCLOUD_SIMULATION_SPOT_PREEMPTION_RATE": "0.5",
    "GPUCLOUD_SIMULATION_SPOT_PREEMPTION_WINDOW_SECONDS": "600",  # within ~0.5 s at 1500 x
    "GPUCLOUD_SIMULATION_SPOT_RECLAIM_SECONDS": "3600000",  # spot stays short for the rest of the test
}


def spot_seed() -> str:
    """A seed under which the market reclaims spotty-0 and not spotty-1 (the run replays identically)."""
    at = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    settings = {k.removeprefix("GPUCLOUD_").lower(): v for k, v in SPOT_ENGINE.items()}
    for seed in range(1000):
        market = SimulatedDatacenter(EngineSettings(**{**settings, "simulation_seed": seed}))  # type: ignore[arg-type]
        if (market.spot_preemption("spotty", "spotty-0", 1, at) is not None
                and market.spot_preemption("spotty", "spotty-1", 1, at) is None):
            return str(seed)
    raise AssertionError("no seed found")


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    directory = tmp_path_factory.mktemp("backend")
    catalog = catalog_to_dict(_builtin_catalog())
    for fabric in catalog["fabrics"]:
        if fabric["name"] == "ib-east-a":
            fabric["pools"] = {"8xH100": 8}  # 25 % spot share: 2 spot nodes
    catalog_file = Path(directory) / "catalog.json"
    catalog_file.write_text(json.dumps(catalog))
    with pytest.MonkeyPatch.context() as patch:
        for name, value in {**SPOT_ENGINE, "GPUCLOUD_SIMULATION_SEED": spot_seed(),
                            "GPUCLOUD_CATALOG_FILE": str(catalog_file)}.items():
            patch.setenv(name, value)
        with running_backend(directory) as server:
            try:
                yield server
            finally:
                kill(server)


SPOT_CLUSTER = """
resource "gpucloud_gpu_cluster" "spotty" {
  name          = "spotty"
  region        = "us-east-1"
  instance_type = "8xH100"
  node_count    = 3
  capacity_type = "spot_with_fallback"
}
"""


def running_nodes(backend: Backend, cluster_id: str) -> dict[str, str]:
    """The running nodes' capacity, once the cluster has settled (every node RUNNING, the cluster too: the
    stand-in joining reconfigures the others, and a plan during that waits for the cluster instead)."""
    body = backend.client.get_cluster(cluster_id)
    if body["status"] != "RUNNING" or any(n["status"] != "RUNNING" for n in body["nodes"]):
        return {}
    return {n["name"]: n["capacity_type"] for n in body["nodes"]}


def test_acc_spot_cluster_with_fallback_plans_clean_through_a_preemption(
    gpucloud_tf: GpuCloudTerraform, backend: Backend
) -> None:
    tf = gpucloud_tf(SPOT_CLUSTER)
    # At 1500 x the seeded preemption may come before the first plan: a plan made while the engine brings
    # up a stand-in shows an in-place update that waits for it (as for any cluster still converging), so
    # the plan is checked once the stand-in runs.
    tf.plan("-out=spot.tfplan")
    (change,) = tf.show_json("spot.tfplan")["resource_changes"]
    tf.apply(plan_file="spot.tfplan")
    state = values(tf, "gpucloud_gpu_cluster.spotty")
    assert state["capacity_type"] == "spot_with_fallback"
    # Issue 27: the plan priced spot at on-demand (95.76); it is the API's estimate, the spot rate the
    # meter charges (3 x 8 x 1.596), and the cluster's own figure.
    spec = {k: state[k] for k in ("region", "instance_type", "node_count", "capacity_type")}
    estimate = backend.client.estimate_price(spec)
    planned = Decimal(str(change["change"]["after"]["estimated_hourly_cost_usd"]))
    assert planned == Decimal(estimate["hourly_usd"]) == Decimal("38.304"), (planned, estimate)
    assert Decimal(estimate["gpu_hour_usd"]) == Decimal("1.596")
    assert Decimal(estimate["max_hourly_usd"]) == Decimal("95.76")
    assert Decimal(str(state["estimated_hourly_cost_usd"])) == planned
    assert Decimal(str(backend.client.get_cluster(state["id"])["estimated_hourly_cost_usd"])) == planned
    kinds = sorted(n["capacity_type"] for n in state["nodes"])
    assert kinds in (["on_demand", "spot", "spot"], ["on_demand", "on_demand", "spot"]), state["nodes"]

    # spotty-0 is reclaimed (notice, then preemption); spot stays short, an on-demand node stands in.
    expected = {"spotty-1": "spot", "spotty-2": "on_demand", "spotty-3": "on_demand"}
    wait_until(lambda: running_nodes(backend, state["id"]) == expected,
               lambda: str(running_nodes(backend, state["id"])), interval=0.5)
    tf.assert_plan_empty()
    tf.apply()  # records the refreshed nodes
    refreshed = values(tf, "gpucloud_gpu_cluster.spotty")
    assert {n["name"]: n["capacity_type"] for n in refreshed["nodes"]} == expected
    tf.destroy()
