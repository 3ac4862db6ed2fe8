"""Faults of the modelled datacenter: boot failures replaced from the pool, rollback when they cannot
be, acceptance failures, hardware faults (XID) while running, determinism under a seed."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from backend.domain.catalog import Catalog
from backend.provisioning.driver import OperationRequest, OpKind
from backend.provisioning.drivers.simulated.datacenter import SimulatedDatacenter
from backend.provisioning.settings import EngineSettings
from backend.provisioning.worker import EngineWorker
from backend.store.engine_models import Allocation, EngineNode, NodeTransition
from tests.backend.engine.conftest import FAST, create, drain, get

FAKE_NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def fails(seed: int, rate: float, node: str, attempt: int, kind: OpKind = OpKind.NODE_BOOT) -> bool:
    sim = SimulatedDatacenter(EngineSettings(simulation_seed=seed))
    request = OperationRequest("t", kind, "train", node, attempt)
    return sim._uniform(request, "fail") < rate


def seed_where(rate: float, wanted: dict[tuple[str, int], bool], kind: OpKind = OpKind.NODE_BOOT) -> int:
    for seed in range(10_000):
        if all(fails(seed, rate, node, attempt, kind) == f for (node, attempt), f in wanted.items()):
            return seed
    raise AssertionError("no seed found")


def test_simulated_datacenter_is_deterministic_under_a_seed() -> None:
    a, b = (
        SimulatedDatacenter(EngineSettings(simulation_seed=7, simulation_boot_failure_rate=0.3))
        for _ in range(2)
    )
    request = OperationRequest("tok", OpKind.NODE_BOOT, "train", "train-3", 1)
    assert a._outcome(request, FAKE_NOW) == b._outcome(request, FAKE_NOW)
    other = SimulatedDatacenter(EngineSettings(simulation_seed=8, simulation_boot_failure_rate=0.3))
    outcomes = {
        other._outcome(OperationRequest("t", OpKind.NODE_BOOT, "c", f"c-{i}", 1), FAKE_NOW)[1]
        for i in range(50)
    }
    assert outcomes == {True, False}


def test_simulated_phase_durations_follow_the_reference_and_speed() -> None:
    slow = SimulatedDatacenter(EngineSettings(simulation_speed=1))
    fast = SimulatedDatacenter(EngineSettings(simulation_speed=600))
    request = OperationRequest("t", OpKind.NODE_BOOT, "train", "train-0", 1)
    assert 300 <= slow._duration(request) <= 720
    assert abs(fast._duration(request) * 600 - slow._duration(request)) < 1e-6


def test_engine_boot_failure_is_replaced_from_the_pool(
    admin: TestClient, make_worker: Callable[..., EngineWorker], sessions: sessionmaker[Session]
) -> None:
    seed = seed_where(0.5, {("train-0", 1): True, ("train-0", 2): False, ("train-1", 1): False})
    cluster = create(admin)
    drain(make_worker(simulation_seed=seed, simulation_boot_failure_rate=0.5))
    body = get(admin, cluster["id"])
    assert body["status"] == "RUNNING" and [n["name"] for n in body["nodes"]] == ["train-0", "train-1"]
    with sessions() as session:
        nodes = session.scalars(
            select(EngineNode).where(EngineNode.name == "train-0").order_by(EngineNode.attempt)
        ).all()
        assert [(n.attempt, n.status) for n in nodes] == [(1, "DESTROYED"), (2, "RUNNING")]
        failed = session.scalars(
            select(NodeTransition.to_status)
            .where(NodeTransition.node_id == nodes[0].id)
            .order_by(NodeTransition.id)
        ).all()
        assert failed == ["PENDING", "PROVISIONING", "FAILED", "DESTROYING", "DESTROYED"]
        assert (
            session.scalar(select(func.count()).select_from(Allocation).where(Allocation.kind == "slot")) == 2
        )


def test_engine_rolls_back_when_no_replacement_is_free(
    two_h100: Catalog,
    admin: TestClient,
    make_worker: Callable[..., EngineWorker],
    sessions: sessionmaker[Session],
) -> None:
    seed = seed_where(0.5, {("train-0", 1): False, ("train-1", 1): True})
    cluster = create(admin)
    drain(make_worker(simulation_seed=seed, simulation_boot_failure_rate=0.5))
    body = get(admin, cluster["id"])
    assert body["status"] == "FAILED"
    assert "train-1 failed" in body["status_reason"] and "no replacement" in body["status_reason"]
    assert [p["phase"] for p in body["phase_history"]][-2:] == ["RollingBack", "Failed"]
    with sessions() as session:
        assert session.scalars(select(Allocation)).all() == []
        statuses = set(session.scalars(select(EngineNode.status)))
    assert statuses == {"DESTROYED"}
    # Nothing was ever RUNNING, so nothing was ever billable.
    with sessions() as session:
        assert (
            session.scalar(
                select(func.count()).select_from(NodeTransition).where(NodeTransition.to_status == "RUNNING")
            )
            == 0
        )


def test_engine_acceptance_failure_is_replaced_and_batch_waits(
    admin: TestClient, make_worker: Callable[..., EngineWorker], sessions: sessionmaker[Session]
) -> None:
    seed = seed_where(
        0.5, {("train-0", 1): False, ("train-1", 1): True, ("train-1", 2): False}, OpKind.ACCEPTANCE
    )
    cluster = create(admin)
    drain(make_worker(simulation_seed=seed, simulation_acceptance_failure_rate=0.5, simulation_speed=5000))
    assert get(admin, cluster["id"])["status"] == "RUNNING"
    with sessions() as session:
        running = session.scalars(select(NodeTransition).where(NodeTransition.to_status == "RUNNING")).all()
        replaced = session.scalars(
            select(EngineNode).where(EngineNode.name == "train-1", EngineNode.attempt == 1)
        ).one()
    # All or nothing: train-0 started only after its batch passed acceptance (after train-1's failure).
    failed_at = next(t for t in _transitions(sessions, replaced.id) if t.to_status == "FAILED").at
    assert all(t.at >= failed_at for t in running)
    assert replaced.status == "DESTROYED"


def _transitions(sessions: sessionmaker[Session], node_id: str) -> list[NodeTransition]:
    with sessions() as session:
        return list(session.scalars(select(NodeTransition).where(NodeTransition.node_id == node_id)))


def test_engine_hardware_fault_fails_node_and_cluster(
    admin: TestClient, make_worker: Callable[..., EngineWorker]
) -> None:
    cluster = create(admin)
    drain(make_worker(simulation_xid_rate=1.0, simulation_xid_window_seconds=1.0))
    body = get(admin, cluster["id"])
    assert body["status"] == "FAILED"
    assert "XID" in body["status_reason"]
    assert body["phase"] == "Degraded"
    assert {n["status"] for n in body["nodes"]} == {"FAILED"}
    assert all("XID" in n["status_reason"] for n in body["nodes"])
    # The user recovers by deleting; everything is released.
    assert admin.delete(f"/v1/clusters/{cluster['id']}").status_code in (200, 202, 204)
    drain(make_worker(**FAST))
    assert admin.get(f"/v1/clusters/{cluster['id']}").status_code == 404


def test_engine_delete_of_a_rolled_back_cluster_finishes_at_once(
    two_h100: Catalog, admin: TestClient, make_worker: Callable[..., EngineWorker]
) -> None:
    seed = seed_where(0.5, {("train-0", 1): False, ("train-1", 1): True})
    cluster = create(admin)
    drain(make_worker(simulation_seed=seed, simulation_boot_failure_rate=0.5))
    assert get(admin, cluster["id"])["status"] == "FAILED"
    assert admin.delete(f"/v1/clusters/{cluster['id']}").status_code in (200, 202)
    assert admin.get(f"/v1/clusters/{cluster['id']}").status_code == 404
    # The capacity it held is free again for a new cluster.
    assert (
        admin.post(
            "/v1/clusters",
            json={"name": "again", "region": "us-east-1", "instance_type": "8xH100", "node_count": 2},
        ).status_code
        == 201
    )
