"""The engine end to end through the API: create, day 2, faults, destroy (SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Callable

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from backend.provisioning.worker import EngineWorker
from backend.store.engine_models import Allocation, NodeTransition
from tests.backend.engine.conftest import create, drain, get


def test_engine_create_runs_every_phase_to_running(
    admin: TestClient, make_worker: Callable[..., EngineWorker], sessions: sessionmaker[Session]
) -> None:
    cluster = create(admin)
    assert cluster["status"] == "PENDING"
    drain(make_worker(simulation_speed=5000))
    body = get(admin, cluster["id"])
    assert body["status"] == "RUNNING", body
    assert [n["name"] for n in body["nodes"]] == ["train-0", "train-1"]
    assert all(n["status"] == "RUNNING" for n in body["nodes"])
    assert all(n["role"] == "worker" and n["instance_id"] for n in body["nodes"])
    assert len({n["instance_id"] for n in body["nodes"]}) == 2
    phases = [p["phase"] for p in body["phase_history"]]
    assert phases[0] == "Admitted" and phases[-1] == "Ready"
    expected = {"ProvisioningNodes", "ProgrammingFabric", "InstallingDrivers", "RunningAcceptanceTests"}
    assert expected <= set(phases)
    with sessions() as session:
        statuses = [
            t.to_status
            for t in session.scalars(
                select(NodeTransition)
                .where(NodeTransition.node_name == "train-0")
                .order_by(NodeTransition.id)
            )
        ]
    assert statuses == ["PENDING", "PROVISIONING", "CONFIGURING", "CONTAINER_CREATING", "RUNNING"]


def test_engine_destroy_releases_everything(
    admin: TestClient, make_worker: Callable[..., EngineWorker], sessions: sessionmaker[Session]
) -> None:
    cluster = create(admin)
    worker = make_worker()
    drain(worker)
    assert admin.delete(f"/v1/clusters/{cluster['id']}").status_code in (200, 202, 204)
    drain(worker)
    assert admin.get(f"/v1/clusters/{cluster['id']}").status_code == 404
    with sessions() as session:
        assert session.scalars(select(Allocation)).all() == []
        last = session.scalars(
            select(NodeTransition.to_status)
            .where(NodeTransition.node_name == "train-1")
            .order_by(NodeTransition.id.desc())
        ).first()
    assert last == "DESTROYED"
