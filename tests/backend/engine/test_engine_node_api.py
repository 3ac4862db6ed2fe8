"""Day-2 API: `GET .../nodes` (health, orchestrator state, GPU readings and XID events in the node
agent's shape), node actions and `restart_workers` (admin, audited, idempotent, 409 with a reason)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from backend.node_agent.nvidia import GpuReading
from backend.node_agent.xid import XidEvent
from backend.provisioning import node_views
from backend.provisioning.driver import NodeTelemetry
from backend.provisioning.drivers.simulated.datacenter import SimulatedDatacenter
from backend.provisioning.settings import EngineSettings
from backend.provisioning.worker import EngineWorker
from backend.store.engine_models import EngineNode, SimulatedOperation, Step
from backend.store.models import Cluster
from tests.backend.engine.conftest import create, drain, get
from tests.backend.engine.test_engine_repair import _bring_up_then_fault, _seed_failing_once

GPU_FIELDS = {f.name for f in dataclasses.fields(GpuReading)}
XID_FIELDS = {f.name for f in dataclasses.fields(XidEvent)}


def test_nodes_api_reports_gpus_in_the_node_agent_shape(
    admin: TestClient, member: TestClient, make_worker: Callable[..., EngineWorker]
) -> None:
    cluster = create(admin, node_count=2)
    drain(make_worker())
    response = member.get(f"/v1/clusters/{cluster['id']}/nodes")  # members may read
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["counts"] == {"healthy": 2, "degraded": 0, "unreachable": 0, "failed": 0, "repairing": 0}
    first = body["items"][0]
    assert (first["name"], first["role"], first["status"], first["health"]) == (
        "train-0", "worker", "RUNNING", "healthy")
    assert first["orchestrator_state"] in ("IDLE", "ALLOCATED", "MIXED")
    assert first["instance_id"] == get(admin, cluster["id"])["nodes"][0]["instance_id"]
    assert len(first["gpus"]) == 8 and set(first["gpus"][0]) == GPU_FIELDS
    for gpu in first["gpus"]:
        assert gpu["name"] == "NVIDIA H100 80GB HBM3" and gpu["memory_total_mib"] == 81559
        assert 0 <= gpu["utilization_pct"] <= 100 and 0 <= gpu["memory_used_mib"] <= 81559
        assert 25 <= gpu["temperature_c"] <= 80 and 0 < gpu["power_draw_w"] <= gpu["power_limit_w"]
    assert first["xid_events"] == [] and first["gpus_unavailable_reason"] is None


def test_nodes_telemetry_is_reproducible_from_the_seed(
    admin: TestClient, make_worker: Callable[..., EngineWorker], sessions: sessionmaker[Session]
) -> None:
    cluster = create(admin, node_count=2)
    drain(make_worker())
    start = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)  # after the nodes' first slot (idle: no job yet)
    # Twelve hours of 15-minute slots: over four (as before) the seeded workload was once idle throughout.
    moments = [start + dt.timedelta(minutes=15 * i) for i in range(48)]
    with sessions() as session:
        row = session.get(Cluster, cluster["id"])
        assert row is not None

        def readings(seed: int) -> list[list[Any]]:
            driver = SimulatedDatacenter(EngineSettings(simulation_seed=seed))
            return [[v["gpus"] for v in node_views.node_views(session, driver, row, now)] for now in moments]

        assert readings(4) == readings(4)
        assert readings(4) != readings(5)
        # The modelled workload is busy most of the time and idle some of it.
        utilisation = {gpu["utilization_pct"] > 0 for per_node in readings(4) for node in per_node
                       for gpu in node}
        assert utilisation == {True, False}


def test_nodes_xid_shows_as_events_before_the_node_fails(
    admin: TestClient, make_worker: Callable[..., EngineWorker], sessions: sessionmaker[Session]
) -> None:
    seed = _seed_failing_once("train-1")
    before, worker = _bring_up_then_fault(admin, make_worker, seed, node_repair="manual")
    with sessions() as session:
        row = session.get(Cluster, before["id"])
        node = session.scalars(select(EngineNode).where(EngineNode.name == "train-1")).one()
        watch = session.get(SimulatedOperation, node.watch_token)
        assert row is not None and watch is not None and watch.ready_at is not None
        started = watch.submitted_at.replace(tzinfo=dt.UTC)
        fault = watch.ready_at.replace(tzinfo=dt.UTC)
        driver = SimulatedDatacenter(EngineSettings())
        early = node_views.node_views(session, driver, row, started + (fault - started) / 2)[1]
        warned = node_views.node_views(session, driver, row, fault - dt.timedelta(microseconds=1))[1]
    # Half way: nothing yet. Just before the fault: the warning XID on the faulty GPU, node degraded.
    assert (early["health"], early["xid_events"]) == ("healthy", [])
    assert warned["health"] == "degraded" and warned["status"] == "RUNNING"
    assert [e["code"] for e in warned["xid_events"]] != [] and set(warned["xid_events"][0]) == XID_FIELDS
    drain(worker)  # the fault: manual repair leaves the node failed
    failed = admin.get(f"/v1/clusters/{before['id']}/nodes", params={"health": "failed"}).json()
    assert [n["name"] for n in failed["items"]] == ["train-1"]
    assert failed["items"][0]["orchestrator_state"] == "DOWN"
    fatal = failed["items"][0]["xid_events"][-1]
    assert f"XID {fatal['code']}" in failed["items"][0]["status_reason"]
    assert failed["counts"]["failed"] == 1 and failed["counts"]["healthy"] + failed["counts"]["degraded"] == 3
    xid = admin.get(f"/v1/clusters/{before['id']}/nodes", params={"health": "xid"}).json()
    assert [n["name"] for n in xid["items"]] == ["train-1"]
    assert admin.get(f"/v1/clusters/{before['id']}/nodes", params={"health": "sick"}).status_code == 422


def test_node_action_replace_is_idempotent_audited_and_repairs_the_node(
    admin: TestClient, member: TestClient, make_worker: Callable[..., EngineWorker]
) -> None:
    seed = _seed_failing_once("train-3")
    before, worker = _bring_up_then_fault(admin, make_worker, seed, node_repair="manual")
    drain(worker)
    url = f"/v1/clusters/{before['id']}/nodes/train-3/actions"
    assert member.post(url, json={"action": "replace"}).status_code == 403
    bad = admin.post(url, json={"action": "reboot"})
    assert bad.status_code == 422
    key = {"Idempotency-Key": "replace-train-3"}
    first = admin.post(url, json={"action": "replace"}, headers=key)
    assert first.status_code == 202, first.text
    assert first.json()["node"]["health"] == "repairing"
    again = admin.post(url, json={"action": "replace"}, headers=key)
    assert (again.status_code, again.json()) == (202, first.json())
    assert again.headers["Idempotent-Replayed"] == "true"
    conflict = admin.post(url, json={"action": "replace"})  # a new request while one is pending
    assert conflict.status_code == 409 and conflict.json()["code"] == "node_state_conflict"
    assert "pending replace" in conflict.json()["detail"]
    drain(worker)
    after = get(admin, before["id"])
    assert (after["status"], after["phase"]) == ("RUNNING", "Ready")
    assert after["nodes"][3]["instance_id"] != before["nodes"][3]["instance_id"]
    events = admin.get("/v1/audit-events").json()["items"]
    assert [e["action"] for e in events].count("cluster.node_replace") == 1
    assert admin.post(f"/v1/clusters/{before['id']}/nodes/train-9/actions",
                      json={"action": "drain"}).status_code == 404


def test_node_action_drain_and_resume_change_the_orchestrator_view(
    admin: TestClient, make_worker: Callable[..., EngineWorker]
) -> None:
    cluster = create(admin, node_count=2)
    url = f"/v1/clusters/{cluster['id']}/nodes/train-0/actions"
    early = admin.post(url, json={"action": "drain"})
    assert early.status_code == 409 and "only a RUNNING node" in early.json()["detail"]
    drain(make_worker())
    drained = admin.post(url, json={"action": "drain"})
    assert drained.status_code == 202 and drained.json()["node"]["orchestrator_state"] == "DRAIN"
    assert drained.json()["node"]["drained"] is True
    resumed = admin.post(url, json={"action": "resume"})
    assert resumed.status_code == 202 and resumed.json()["node"]["orchestrator_state"] != "DRAIN"


def test_node_action_drain_and_resume_reach_the_driver(
    admin: TestClient, make_worker: Callable[..., EngineWorker], sessions: sessionmaker[Session]
) -> None:
    cluster = create(admin, node_count=2)
    worker = make_worker()
    drain(worker)
    url = f"/v1/clusters/{cluster['id']}/nodes/train-1/actions"

    def carried() -> list[tuple[str, str | None]]:
        with sessions() as session:
            steps = session.scalars(select(Step).where(Step.cluster_id == cluster["id"],
                                                       Step.kind.in_(("node_drain", "node_resume")))
                                    .order_by(Step.submitted_at))
            return [(step.kind, step.outcome) for step in steps]

    assert admin.post(url, json={"action": "drain"}).status_code == 202
    assert admin.post(url, json={"action": "resume"}).status_code == 202  # before the engine saw the drain
    drain(worker)
    assert carried() == []  # nothing to carry: the node is back where the driver has it
    assert admin.post(url, json={"action": "drain"}).status_code == 202
    drain(worker)
    assert carried() == [("node_drain", "succeeded")]
    with sessions() as session:
        node = session.scalars(select(EngineNode).where(EngineNode.active_name == "train-1",
                                                        EngineNode.cluster_id == cluster["id"])).one()
        assert node.drained and node.applied_config["drained"] is True and node.op_token is None
    assert admin.post(url, json={"action": "resume"}).status_code == 202
    drain(worker)
    assert carried() == [("node_drain", "succeeded"), ("node_resume", "succeeded")]
    assert get(admin, cluster["id"])["phase"] == "Ready"


def test_cluster_action_restart_workers_restarts_the_nodes_with_xid_errors(
    admin: TestClient, make_worker: Callable[..., EngineWorker]
) -> None:
    cluster = create(admin, node_count=2, node_repair="manual")
    drain(make_worker(simulation_xid_rate=1.0, simulation_xid_window_seconds=1.0))
    assert get(admin, cluster["id"])["status"] == "FAILED"  # every node lost
    url = f"/v1/clusters/{cluster['id']}/actions"
    assert admin.post(url, json={"action": "reboot_all"}).status_code == 422
    response = admin.post(url, json={"action": "restart_workers"})
    assert response.status_code == 202, response.text
    assert response.json() == {"action": "restart_workers", "nodes": ["train-0", "train-1"]}
    drain(make_worker(engine_poll_seconds=5.0))  # rebooted, now without faults
    body = get(admin, cluster["id"])
    assert (body["status"], body["phase"]) == ("RUNNING", "Ready")
    # A restart keeps the machines.
    assert [n["instance_id"] for n in body["nodes"]] == [n["instance_id"] for n in cluster["nodes"]]
    again = admin.post(url, json={"action": "restart_workers"})
    assert again.status_code == 202 and again.json()["nodes"] == []


def test_nodes_health_degraded_from_readings_ecc_heat_and_missing_gpus() -> None:
    now = dt.datetime(2026, 11, 26, 12, 0, tzinfo=dt.UTC)
    node = EngineNode(stage="ready", status="RUNNING", pending_action=None, repair_of=None)

    def reading(**gpu: Any) -> NodeTelemetry:
        base = {f.name: 0 for f in dataclasses.fields(GpuReading)} | {
            "uuid": "GPU-1", "name": "NVIDIA H200", "pci_bus_id": "00000000:18:00.0", "temperature_c": 40,
            "memory_total_mib": 143771, "utilization_pct": 50, "retired_pages": None}
        return NodeTelemetry(read_at=now.isoformat(), gpus=[GpuReading(**(base | gpu))],
                             gpus_unavailable_reason=None, xid_events=[])

    assert node_views.health(node, reading(), now) == "healthy"
    assert node_views.health_reason(node, reading(), now) is None
    for gpu, why in (({"ecc_volatile_uncorrected": 1}, "uncorrectable ECC"), ({"temperature_c": 91}, "91 C"),
                     ({"memory_total_mib": None, "utilization_pct": None}, "no reading")):
        assert node_views.health(node, reading(**gpu), now) == "degraded"
        assert why in (node_views.health_reason(node, reading(**gpu), now) or "")
    old_xid = XidEvent(79, "00000000:18:00.0", 0, "GPU has fallen off the bus", True, "",
                       (now - dt.timedelta(hours=2)).isoformat())
    stale = dataclasses.replace(reading(), xid_events=[old_xid])
    assert node_views.health(node, stale, now) == "healthy"  # an XID over an hour old no longer counts
    assert node_views.health(node, dataclasses.replace(stale, xid_events=[dataclasses.replace(
        old_xid, logged_at=now.isoformat())]), now) == "degraded"
