"""Day-2 node repair: an XID on one node of a running cluster is repaired in place with node_repair =
auto (same hostname and address, new instance, the other nodes untouched, metering exact), stays failed
with manual until a `replace`, and automatic repairs per node per day are bounded."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from backend.billing.compute_meter import load_cluster_usage
from backend.domain.catalog import Catalog, default_catalog
from backend.domain.clock import ManualClock
from backend.provisioning.driver import OperationRequest, OpKind
from backend.provisioning.drivers.simulated.datacenter import SimulatedDatacenter
from backend.provisioning.engine import InsufficientCapacity, pause_cluster
from backend.provisioning.node_actions import NodeStateConflict, request_node_action
from backend.provisioning.settings import EngineSettings
from backend.provisioning.worker import EngineWorker
from backend.store.engine_models import EngineNode, NodeTransition, SimulatedOperation
from backend.store.models import Cluster
from tests.backend.engine.conftest import create, drain, get

XID_RATE = 0.5
# At speed 1e9 a fault comes u * 2 s (of the engine's clock) after the watch starts: u >= 0.75 puts it
# well past the poll interval, so a drain returns before it and the test moves the clock past it.
XID_WINDOW = 2e9
NODES = [f"train-{i}" for i in range(4)]


def _draw(seed: int, node: str, attempt: int, purpose: str) -> float:
    sim = SimulatedDatacenter(EngineSettings(simulation_seed=seed))
    return sim._uniform(OperationRequest("t", OpKind.HEALTH_WATCH, "train", node, attempt), purpose)


def _seed_failing_once(victim: str, nodes: list[str] = NODES) -> int:
    """A seed under which only `victim`'s first machine has an XID (late in the window), its
    replacements none."""
    for seed in range(20_000):
        first = [_draw(seed, n, 1, "fault") < XID_RATE for n in nodes]
        if first != [n == victim for n in nodes] or _draw(seed, victim, 1, "when") < 0.75:
            continue
        if all(_draw(seed, victim, attempt, "fault") >= XID_RATE for attempt in (2, 3)):
            return seed
    raise AssertionError("no seed found")


def _worker(make_worker: Callable[..., EngineWorker], seed: int, **extra: Any) -> EngineWorker:
    return make_worker(simulation_seed=seed, simulation_xid_rate=XID_RATE,
                       simulation_xid_window_seconds=XID_WINDOW, **extra)


def _bring_up_then_fault(admin: TestClient, make_worker: Callable[..., EngineWorker], seed: int,
                         node_count: int = 4, **spec: Any) -> tuple[dict[str, Any], EngineWorker]:
    cluster = create(admin, node_count=node_count, **spec)
    worker = _worker(make_worker, seed)
    drain(worker)
    body = get(admin, cluster["id"])
    assert (body["status"], body["phase"]) == ("RUNNING", "Ready")  # the fault is still to come
    assert isinstance(worker.clock, ManualClock)
    worker.clock.advance(seconds=2.05)  # past the fault
    return body, worker


def _transitions(session: Session, node_id: str) -> list[NodeTransition]:
    query = select(NodeTransition).where(NodeTransition.node_id == node_id).order_by(NodeTransition.id)
    return list(session.scalars(query))


def test_engine_repair_auto_replaces_a_failed_node_in_place(
    admin: TestClient, make_worker: Callable[..., EngineWorker], sessions: sessionmaker[Session]
) -> None:
    seed = _seed_failing_once("train-1")
    before, _ = _bring_up_then_fault(admin, make_worker, seed)
    assert before["node_repair"] == "auto"
    # The repair at a speed where its bring-up takes a second or so: watch it pass by.
    repairing = _worker(make_worker, seed, simulation_speed=1000, engine_poll_seconds=5.0)
    repairing.run_once()
    during = get(admin, before["id"])
    assert (during["status"], during["phase"]) == ("RUNNING", "Repairing")
    drain(repairing)
    after = get(admin, before["id"])
    assert (after["status"], after["phase"], after["status_reason"]) == ("RUNNING", "Ready", None)
    phases = [p["phase"] for p in after["phase_history"]]
    assert phases[-2:] == ["Repairing", "Ready"]
    old = {n["name"]: n for n in before["nodes"]}
    new = {n["name"]: n for n in after["nodes"]}
    assert list(new) == NODES and {n["status"] for n in new.values()} == {"RUNNING"}
    assert new["train-1"]["instance_id"] != old["train-1"]["instance_id"]
    assert new["train-1"]["private_ip"] == old["train-1"]["private_ip"]
    # Same fabric position: the same scalable unit, so the same leaves.
    assert new["train-1"]["network"]["scalable_unit"] == old["train-1"]["network"]["scalable_unit"]
    for name in ("train-0", "train-2", "train-3"):
        assert new[name]["instance_id"] == old[name]["instance_id"]

    with sessions() as session:
        failed = session.get(EngineNode, old["train-1"]["instance_id"])
        assert failed is not None and failed.status == "DESTROYED"
        watch = session.get(SimulatedOperation, failed.watch_token)
        assert watch is not None and watch.reason is not None and "XID" in watch.reason
        assert watch.ready_at is not None
        history = [(t.from_status, t.to_status) for t in _transitions(session, failed.id)]
        assert history[-4:] == [("CONTAINER_CREATING", "RUNNING"), ("RUNNING", "FAILED"),
                                ("FAILED", "DESTROYING"), ("DESTROYING", "DESTROYED")]
        fault = next(t for t in _transitions(session, failed.id) if t.to_status == "FAILED")
        # Metered exactly: the failed machine stops at the fault, not when a pass saw it.
        assert fault.at.replace(tzinfo=None) == watch.ready_at.replace(tzinfo=None)
        for name in ("train-0", "train-2", "train-3"):  # never left RUNNING
            statuses = [t.to_status for t in _transitions(session, old[name]["instance_id"])]
            assert statuses[-1] == "RUNNING" and statuses.count("RUNNING") == 1
        replacement = session.get(EngineNode, new["train-1"]["instance_id"])
        assert replacement is not None and replacement.repair_of == failed.id
        started = next(t.at for t in _transitions(session, replacement.id) if t.to_status == "RUNNING")
        project_id = session.get(Cluster, before["id"]).project_id  # type: ignore[union-attr]
        usage = next(u for u in load_cluster_usage(session, project_id=project_id)
                     if u.cluster_id == before["id"])
    by_node = {i.node_id: i for i in usage.intervals}
    assert len(usage.intervals) == 5  # four machines from the start, one from the repair
    ended = by_node[failed.id].end
    assert ended is not None and ended.replace(tzinfo=None) == fault.at.replace(microsecond=0, tzinfo=None)
    assert by_node[replacement.id].start.replace(tzinfo=None) == started.replace(microsecond=0, tzinfo=None)
    assert by_node[replacement.id].end is None


def test_engine_repair_manual_leaves_the_node_failed_until_replace(
    admin: TestClient, make_worker: Callable[..., EngineWorker], sessions: sessionmaker[Session]
) -> None:
    seed = _seed_failing_once("train-2")
    before, worker = _bring_up_then_fault(admin, make_worker, seed, node_repair="manual")
    drain(worker)
    body = get(admin, before["id"])
    assert (body["status"], body["phase"]) == ("RUNNING", "Degraded")
    assert body["status_reason"].startswith("node train-2: hardware fault: XID")
    assert [n["status"] for n in body["nodes"]] == ["RUNNING", "RUNNING", "FAILED", "RUNNING"]
    drain(worker)  # nothing happens by itself
    assert get(admin, before["id"])["nodes"][2]["instance_id"] == before["nodes"][2]["instance_id"]

    with sessions.begin() as session:
        cluster = session.get(Cluster, before["id"])
        assert cluster is not None
        request_node_action(session, default_catalog(), cluster, "train-2", "replace", now=worker.clock.now())
    drain(worker)
    after = get(admin, before["id"])
    assert (after["status"], after["phase"], after["status_reason"]) == ("RUNNING", "Ready", None)
    assert after["nodes"][2]["name"] == "train-2"
    assert after["nodes"][2]["instance_id"] != before["nodes"][2]["instance_id"]
    assert [n["instance_id"] for n in after["nodes"][:2]] == [n["instance_id"] for n in before["nodes"][:2]]


def test_engine_repair_switching_to_auto_repairs_a_failed_node(
    admin: TestClient, make_worker: Callable[..., EngineWorker]
) -> None:
    seed = _seed_failing_once("train-0")
    before, worker = _bring_up_then_fault(admin, make_worker, seed, node_repair="manual")
    drain(worker)
    assert get(admin, before["id"])["phase"] == "Degraded"
    response = admin.patch(f"/v1/clusters/{before['id']}", json={"node_repair": "auto"})
    assert response.status_code == 200, response.text
    assert response.json()["node_repair"] == "auto"
    drain(worker)
    after = get(admin, before["id"])
    assert (after["status"], after["phase"]) == ("RUNNING", "Ready")
    assert after["nodes"][0]["instance_id"] != before["nodes"][0]["instance_id"]


def test_engine_repair_budget_per_node_per_day_stops_a_looping_pool(
    admin: TestClient, make_worker: Callable[..., EngineWorker]
) -> None:
    cluster = create(admin, node_count=2)
    drain(make_worker(simulation_xid_rate=1.0, simulation_xid_window_seconds=1.0,
                      engine_max_repairs_per_node_per_day=2))
    body = get(admin, cluster["id"])
    # Every machine fails: each node was replaced twice, then left failed with the reason.
    assert (body["status"], body["phase"]) == ("FAILED", "Degraded")
    for node in body["nodes"]:
        assert node["status"] == "FAILED"
        assert "automatic repair stopped: 2 replacements" in node["status_reason"]


def test_engine_repair_without_a_free_node_leaves_it_failed_with_the_reason(
    two_h100: Catalog, admin: TestClient, make_worker: Callable[..., EngineWorker],
    sessions: sessionmaker[Session]
) -> None:
    seed = _seed_failing_once("train-0", NODES[:2])
    before, worker = _bring_up_then_fault(admin, make_worker, seed, node_count=2)
    drain(worker)
    body = get(admin, before["id"])
    assert (body["status"], body["phase"]) == ("RUNNING", "Degraded")
    assert "no replacement node free on ib-east-a" in body["nodes"][0]["status_reason"]
    assert body["nodes"][0]["instance_id"] == before["nodes"][0]["instance_id"]
    with sessions.begin() as session:
        cluster = session.get(Cluster, before["id"])
        assert cluster is not None
        try:
            request_node_action(session, two_h100, cluster, "train-0", "replace", now=worker.clock.now())
            raise AssertionError("a replace without capacity was accepted")
        except InsufficientCapacity as error:
            assert "no 8xH100 node is free on ib-east-a" in error.detail


def test_engine_node_actions_refuse_what_the_state_forbids(
    admin: TestClient, make_worker: Callable[..., EngineWorker], sessions: sessionmaker[Session],
    clock: ManualClock
) -> None:
    cluster = create(admin, node_count=2)
    with sessions.begin() as session:  # still coming up
        row = session.get(Cluster, cluster["id"])
        assert row is not None
        try:
            request_node_action(session, default_catalog(), row, "train-0", "restart", now=clock.now())
            raise AssertionError("restart of a node coming up was accepted")
        except NodeStateConflict as error:
            assert "RUNNING or FAILED" in error.detail
    drain(make_worker())
    with sessions.begin() as session:
        row = session.get(Cluster, cluster["id"])
        assert row is not None
        request_node_action(session, default_catalog(), row, "train-1", "restart", now=clock.now())
        try:
            request_node_action(session, default_catalog(), row, "train-1", "replace", now=clock.now())
            raise AssertionError("a second action was accepted")
        except NodeStateConflict as error:
            assert "pending restart" in error.detail
    restarting = make_worker(simulation_speed=1000, engine_poll_seconds=5.0)
    restarting.run_once()
    body = get(admin, cluster["id"])
    assert (body["status"], body["phase"]) == ("RUNNING", "Repairing")
    assert [n["status"] for n in body["nodes"]] == ["RUNNING", "CONFIGURING"]
    drain(restarting)
    body = get(admin, cluster["id"])
    assert (body["status"], body["phase"]) == ("RUNNING", "Ready")
    assert [n["status"] for n in body["nodes"]] == ["RUNNING", "RUNNING"]
    with sessions.begin() as session:
        pause_cluster(session, cluster["id"], "credits exhausted")
        row = session.get(Cluster, cluster["id"])
        assert row is not None
        try:
            request_node_action(session, default_catalog(), row, "train-1", "drain", now=clock.now())
            raise AssertionError("an action on a paused cluster was accepted")
        except NodeStateConflict as error:
            assert "paused" in error.detail
