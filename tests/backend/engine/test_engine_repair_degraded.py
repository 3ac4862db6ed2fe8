"""Day-2 repair of degraded nodes (running, with readings that say a GPU or a link is failing): with
node_repair = auto the node is drained and replaced in place like a failed one (same hostname, address
and fabric position, new instance, the others untouched), within the daily budget; with manual it keeps
running and the cluster shows RUNNING / Degraded until a node action.

The driver is the simulated datacenter whose telemetry reports an NVLink link down on the chosen nodes'
machines (the readings a real agent sends, `backend/node_agent/links.py`); the engine's metrics sampler
(`collect_metrics`) reads it as it does every 10 s."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from backend.domain.catalog import Catalog, default_catalog
from backend.domain.clock import ManualClock
from backend.node_agent.links import LinkReading, NvLinkGpu
from backend.provisioning.driver import NodeTelemetry, TelemetryTarget
from backend.provisioning.drivers.simulated.datacenter import SimulatedDatacenter
from backend.provisioning.node_actions import request_node_action
from backend.provisioning.settings import EngineSettings
from backend.provisioning.worker import EngineWorker
from backend.store.engine_models import EngineNode, NodeTransition
from backend.store.models import Cluster
from tests.backend.engine.conftest import FAST, create, drain, get

NVLINK_DOWN = LinkReading(nvlink=(NvLinkGpu(3, 18, 17, (5,)),), nvlink_unavailable_reason=None,
                          infiniband=(), infiniband_unavailable_reason="not modelled")
WHY = "GPU 3: NVLink link 5 down"


class FlakyLinks(SimulatedDatacenter):
    """The simulated datacenter, with an NVLink link down on the machines named in `broken`
    ((node name, attempt): 1 is the first machine, 2 its first replacement ...)."""

    def __init__(self, settings: EngineSettings, broken: set[tuple[str, int]]) -> None:
        super().__init__(settings)
        self.broken = broken

    def nodes_telemetry(self, session: Session, targets: Sequence[TelemetryTarget], now: dt.datetime
                        ) -> list[NodeTelemetry]:
        readings = super().nodes_telemetry(session, targets, now)
        return [dataclasses.replace(r, links=NVLINK_DOWN) if (t.node_name, t.attempt) in self.broken else r
                for t, r in zip(targets, readings, strict=True)]


def _worker(sessions: sessionmaker[Session], clock: ManualClock, broken: set[tuple[str, int]], **extra: Any
            ) -> EngineWorker:
    settings = EngineSettings(**{**FAST, **extra})
    return EngineWorker(sessions, settings, driver=FlakyLinks(settings, broken), clock=clock)


def _statuses(session: Session, node_id: str) -> list[str]:
    query = (select(NodeTransition.to_status).where(NodeTransition.node_id == node_id)
             .order_by(NodeTransition.id))
    return list(session.scalars(query))


def test_engine_repair_auto_drains_and_replaces_a_degraded_node_in_place(
    admin: TestClient, sessions: sessionmaker[Session], clock: ManualClock
) -> None:
    before = create(admin, node_count=4)
    worker = _worker(sessions, clock, {("train-1", 1)})
    drain(worker)
    assert get(admin, before["id"])["phase"] == "Ready"
    before = get(admin, before["id"])
    assert worker.collect_metrics() == 4  # the sampler reads the link down on train-1
    repairing = _worker(sessions, clock, {("train-1", 1)}, simulation_speed=1000, engine_poll_seconds=5.0)
    repairing.run_once()
    during = get(admin, before["id"])
    assert (during["status"], during["phase"]) == ("RUNNING", "Repairing")
    drain(repairing)
    after = get(admin, before["id"])
    assert (after["status"], after["phase"], after["status_reason"]) == ("RUNNING", "Ready", None)
    old = {n["name"]: n for n in before["nodes"]}
    new = {n["name"]: n for n in after["nodes"]}
    assert [n["health"] for n in after["nodes"]] == ["healthy"] * 4
    assert new["train-1"]["instance_id"] != old["train-1"]["instance_id"]
    assert new["train-1"]["private_ip"] == old["train-1"]["private_ip"]
    assert new["train-1"]["network"]["scalable_unit"] == old["train-1"]["network"]["scalable_unit"]
    for name in ("train-0", "train-2", "train-3"):
        assert new[name]["instance_id"] == old[name]["instance_id"]
    with sessions() as session:
        degraded = session.get(EngineNode, old["train-1"]["instance_id"])
        assert degraded is not None and degraded.drained and degraded.status == "DESTROYED"
        # Drained and released while it still ran: it never failed, it is not metered past the release.
        assert _statuses(session, degraded.id)[-3:] == ["RUNNING", "DESTROYING", "DESTROYED"]
        release = session.scalars(select(NodeTransition).where(
            NodeTransition.node_id == degraded.id, NodeTransition.to_status == "DESTROYING")).one()
        assert release.reason == f"replaced while degraded ({WHY}; node_repair = auto)"
        for name in ("train-0", "train-2", "train-3"):  # never left RUNNING
            assert _statuses(session, old[name]["instance_id"]).count("RUNNING") == 1
        replacement = session.get(EngineNode, new["train-1"]["instance_id"])
        assert replacement is not None and replacement.repair_of == degraded.id
        assert replacement.degraded_reason is None and not replacement.drained
    assert repairing.collect_metrics() == 4  # the new machine's links are up: nothing more to do
    assert drain(repairing) == 0


def test_engine_repair_manual_keeps_a_degraded_node_running_until_an_action(
    admin: TestClient, sessions: sessionmaker[Session], clock: ManualClock
) -> None:
    before = create(admin, node_count=2, node_repair="manual")
    broken = {("train-0", 1)}
    worker = _worker(sessions, clock, broken)
    drain(worker)
    worker.collect_metrics()
    drain(worker)
    body = get(admin, before["id"])
    assert (body["status"], body["phase"]) == ("RUNNING", "Degraded")
    assert body["status_reason"] == f"node train-0: degraded: {WHY}"
    assert [(n["status"], n["health"]) for n in body["nodes"]] == [("RUNNING", "degraded"),
                                                                    ("RUNNING", "healthy")]
    nodes = admin.get(f"/v1/clusters/{before['id']}/nodes").json()
    assert nodes["items"][0]["health_reason"] == WHY and nodes["counts"]["degraded"] == 1
    worker.collect_metrics()
    drain(worker)  # nothing happens by itself
    assert get(admin, before["id"])["nodes"][0]["instance_id"] == before["nodes"][0]["instance_id"]

    with sessions.begin() as session:
        cluster = session.get(Cluster, before["id"])
        assert cluster is not None
        request_node_action(session, default_catalog(), cluster, "train-0", "replace", now=clock.now())
    drain(worker)
    after = get(admin, before["id"])
    assert (after["status"], after["phase"], after["status_reason"]) == ("RUNNING", "Ready", None)
    assert after["nodes"][0]["instance_id"] != before["nodes"][0]["instance_id"]
    assert [n["health"] for n in after["nodes"]] == ["healthy", "healthy"]


def test_engine_repair_manual_degraded_node_recovers_when_its_readings_do(
    admin: TestClient, sessions: sessionmaker[Session], clock: ManualClock
) -> None:
    before = create(admin, node_count=2, node_repair="manual")
    broken = {("train-1", 1)}
    worker = _worker(sessions, clock, broken)
    drain(worker)
    worker.collect_metrics()
    drain(worker)
    assert get(admin, before["id"])["phase"] == "Degraded"
    broken.clear()  # the link trained up again
    worker.collect_metrics()
    drain(worker)
    body = get(admin, before["id"])
    assert (body["status"], body["phase"], body["status_reason"]) == ("RUNNING", "Ready", None)
    assert [n["instance_id"] for n in body["nodes"]] == [n["instance_id"] for n in before["nodes"]]


def test_engine_repair_degraded_node_past_its_daily_budget_stays_with_the_reason(
    admin: TestClient, sessions: sessionmaker[Session], clock: ManualClock
) -> None:
    before = create(admin, node_count=2)
    broken = {("train-0", attempt) for attempt in range(1, 5)}  # a bad pool: every machine is degraded
    worker = _worker(sessions, clock, broken, engine_max_repairs_per_node_per_day=1)
    drain(worker)
    worker.collect_metrics()
    drain(worker)  # first repair
    replaced = get(admin, before["id"])
    assert replaced["nodes"][0]["instance_id"] != before["nodes"][0]["instance_id"]
    worker.collect_metrics()
    drain(worker)
    body = get(admin, before["id"])
    assert (body["status"], body["phase"]) == ("RUNNING", "Degraded")
    assert body["nodes"][0]["instance_id"] == replaced["nodes"][0]["instance_id"]  # no second repair
    assert body["nodes"][0]["status"] == "RUNNING"
    assert body["nodes"][0]["status_reason"] == (
        f"degraded: {WHY}; automatic repair stopped: 1 replacements of train-0 in the last 24 h "
        "(GPUCLOUD_ENGINE_MAX_REPAIRS_PER_NODE_PER_DAY)")
    assert body["status_reason"] == f"node train-0: {body['nodes'][0]['status_reason']}"


def test_engine_repair_degraded_node_without_a_spare_keeps_serving_undrained(
    two_h100: Catalog, admin: TestClient, sessions: sessionmaker[Session], clock: ManualClock
) -> None:
    before = create(admin, node_count=2)
    worker = _worker(sessions, clock, {("train-1", 1)})
    worker.catalog = two_h100
    drain(worker)
    worker.collect_metrics()
    drain(worker)
    body = get(admin, before["id"])
    assert (body["status"], body["phase"]) == ("RUNNING", "Degraded")
    assert body["nodes"][1]["status"] == "RUNNING"
    assert body["nodes"][1]["instance_id"] == before["nodes"][1]["instance_id"]
    assert "no replacement node free on ib-east-a" in body["nodes"][1]["status_reason"]
    with sessions() as session:
        node = session.get(EngineNode, before["nodes"][1]["instance_id"])
        assert node is not None and not node.drained
