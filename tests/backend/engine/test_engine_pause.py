"""A real pause: a paused cluster's running nodes are powered off through the driver (node status PAUSED,
slots kept), and resuming powers them on again."""

from __future__ import annotations

from collections.abc import Callable

from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from backend.domain.clock import ManualClock
from backend.provisioning.engine import pause_cluster, resume_cluster
from backend.provisioning.worker import EngineWorker
from backend.store.engine_models import Allocation, Step
from tests.backend.engine.conftest import catch_up, create, drain, get
from tests.backend.engine.test_engine_day2 import statuses_of


def steps(sessions: sessionmaker[Session], cluster_id: str, kind: str) -> list[str | None]:
    with sessions() as session:
        return list(
            session.scalars(select(Step.outcome).where(Step.cluster_id == cluster_id, Step.kind == kind))
        )


def slots(sessions: sessionmaker[Session], cluster_id: str) -> int:
    with sessions() as session:
        query = select(func.count()).where(Allocation.cluster_id == cluster_id, Allocation.kind == "slot")
        return session.scalar(query) or 0


def test_engine_pause_powers_nodes_off_through_the_driver_and_resume_powers_them_on(
    admin: TestClient, make_worker: Callable[..., EngineWorker], sessions: sessionmaker[Session],
    clock: ManualClock
) -> None:
    cluster = create(admin, node_count=2)
    worker = make_worker()
    drain(worker)
    assert get(admin, cluster["id"])["status"] == "RUNNING"

    with sessions.begin() as session:
        pause_cluster(session, cluster["id"], "credits exhausted")
    drain(worker)
    body = get(admin, cluster["id"])
    assert (body["status"], body["phase"], body["status_reason"]) == ("PAUSED", "Paused", "credits exhausted")
    assert [(n["status"], n["status_reason"]) for n in body["nodes"]] == [("PAUSED", "credits exhausted")] * 2
    assert steps(sessions, cluster["id"], "node_power_off") == ["succeeded", "succeeded"]
    assert slots(sessions, cluster["id"]) == 2  # the capacity stays the cluster's
    assert statuses_of(sessions, "train-0")[-2:] == ["RUNNING", "PAUSED"]  # the meter stops here

    with sessions.begin() as session:
        resume_cluster(session, cluster["id"], "credits added")
    booting = make_worker(simulation_speed=100_000)  # power-on takes milliseconds, drain never stops early
    catch_up(clock)  # the resume's wake-up is on the wall clock
    booting.run_once()
    body = get(admin, cluster["id"])
    assert (body["status"], body["phase"]) == ("CONFIGURING", "Resuming")
    drain(booting)
    body = get(admin, cluster["id"])
    assert (body["status"], body["phase"], body["status_reason"]) == ("RUNNING", "Ready", None)
    assert [n["status"] for n in body["nodes"]] == ["RUNNING", "RUNNING"]
    assert steps(sessions, cluster["id"], "node_power_on") == ["succeeded", "succeeded"]
    assert statuses_of(sessions, "train-0")[-3:] == ["PAUSED", "CONFIGURING", "RUNNING"]
    # Powered on, the nodes are watched for hardware faults again.
    assert len(steps(sessions, cluster["id"], "health_watch")) == 4


def test_engine_delete_of_a_paused_cluster_releases_its_powered_off_nodes(
    admin: TestClient, make_worker: Callable[..., EngineWorker], sessions: sessionmaker[Session]
) -> None:
    cluster = create(admin, node_count=2)
    worker = make_worker()
    drain(worker)
    with sessions.begin() as session:
        pause_cluster(session, cluster["id"], "credits exhausted")
    drain(worker)
    assert admin.delete(f"/v1/clusters/{cluster['id']}").status_code == 202
    drain(worker)
    assert admin.get(f"/v1/clusters/{cluster['id']}").status_code == 404
    assert statuses_of(sessions, "train-1")[-3:] == ["PAUSED", "DESTROYING", "DESTROYED"]
    assert slots(sessions, cluster["id"]) == 0
