"""Time to live: the engine deletes a cluster at expires_at (ttl) or after idle_teardown_minutes without
a Slurm job (the simulated workload's queue), and deletion_protection keeps it with one audit event and a
warning on the cluster. The engine and the app run on one manual clock."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from backend.domain.clock import ManualClock
from backend.provisioning.driver import NodeRun
from backend.provisioning.drivers.simulated import workload as sim_workload
from backend.provisioning.state import aware
from backend.provisioning.worker import EngineWorker
from backend.store.engine_models import NodeTransition, PhaseRecord, WorkItem
from backend.store.models import AuditEvent, Cluster
from tests.backend.engine.conftest import cluster_body, create, drain, get


def on_the_apps_time(monkeypatch: pytest.MonkeyPatch, clock: ManualClock, start: dt.datetime) -> None:
    """Set `clock` to `start` and make the app's cluster writes (created_at, expiry, the engine wake-ups
    they request) read it too: the app has no injected clock yet, so its time sources are patched."""
    clock.set(start)
    for where in ("backend.provisioning.engine", "backend.services.clusters"):
        monkeypatch.setattr(f"{where}.utcnow", clock.now)


def settle(worker: EngineWorker) -> None:
    """`drain` on a clock the app shares (no catching up with the wall clock)."""
    drain(worker, catch_up_with_wall=False)


def near(moment: dt.datetime, expected: dt.datetime) -> bool:
    """Within the second after `expected` (drain moves the clock on while the passes run)."""
    return expected <= moment < expected + dt.timedelta(seconds=1)


def due_at(sessions: sessionmaker[Session], cluster_id: str) -> dt.datetime | None:
    with sessions() as session:
        item = session.get(WorkItem, cluster_id)
        assert item is not None
        return aware(item.due_at)


def actions(sessions: sessionmaker[Session], cluster_id: str) -> list[str]:
    with sessions() as session:
        query = select(AuditEvent.action).where(AuditEvent.resource_id == cluster_id).order_by(AuditEvent.id)
        return [
            a
            for a in session.scalars(query)
            if a.startswith("cluster.") and a != "cluster.create" and a != "cluster.update"
        ]


def phases(sessions: sessionmaker[Session], cluster_id: str) -> list[str]:
    with sessions() as session:
        query = select(PhaseRecord.phase).where(PhaseRecord.cluster_id == cluster_id).order_by(PhaseRecord.id)
        return list(session.scalars(query))


def first_destroying(sessions: sessionmaker[Session], cluster_id: str) -> dt.datetime:
    with sessions() as session:
        query = (
            select(NodeTransition.at)
            .where(NodeTransition.cluster_id == cluster_id, NodeTransition.to_status == "DESTROYING")
            .order_by(NodeTransition.at)
        )
        moment = aware(session.scalars(query).first())
        assert moment is not None
        return moment


def test_engine_ttl_deletes_the_cluster_at_expires_at(
    admin: TestClient,
    make_worker: Callable[..., EngineWorker],
    sessions: sessionmaker[Session],
    monkeypatch: pytest.MonkeyPatch,
    clock: ManualClock,
) -> None:
    cluster = create(admin, ttl="2h")
    created = dt.datetime.fromisoformat(cluster["created_at"])
    expires_at = dt.datetime.fromisoformat(cluster["expires_at"])
    assert (cluster["ttl"], expires_at) == (
        "2h",
        (created + dt.timedelta(hours=2)).replace(microsecond=0),
    )  # whole seconds
    on_the_apps_time(monkeypatch, clock, created)
    worker = make_worker()
    settle(worker)
    assert get(admin, cluster["id"])["status"] == "RUNNING"
    assert due_at(sessions, cluster["id"]) == expires_at  # the worker wakes exactly then

    clock.set(expires_at - dt.timedelta(seconds=1))
    settle(worker)
    assert get(admin, cluster["id"])["status"] == "RUNNING"

    clock.set(expires_at)
    settle(worker)
    assert admin.get(f"/v1/clusters/{cluster['id']}").status_code == 404
    assert near(first_destroying(sessions, cluster["id"]), expires_at)
    assert actions(sessions, cluster["id"]) == ["cluster.expired"]
    assert "Expired" in phases(sessions, cluster["id"])


def test_engine_ttl_expiry_blocked_by_deletion_protection_once_with_a_warning(
    admin: TestClient,
    make_worker: Callable[..., EngineWorker],
    sessions: sessionmaker[Session],
    monkeypatch: pytest.MonkeyPatch,
    clock: ManualClock,
) -> None:
    expires_at = dt.datetime.now(dt.UTC).replace(microsecond=0) + dt.timedelta(hours=1)
    cluster = create(
        admin, expires_at=expires_at.isoformat().replace("+00:00", "Z"), deletion_protection=True
    )
    assert (cluster["ttl"], cluster["expires_at"], cluster["warnings"]) == (
        None,
        expires_at.isoformat().replace("+00:00", "Z"),
        [],
    )
    on_the_apps_time(monkeypatch, clock, expires_at - dt.timedelta(hours=1))
    worker = make_worker()
    settle(worker)
    clock.set(expires_at + dt.timedelta(minutes=1))
    settle(worker)
    body = get(admin, cluster["id"])
    assert body["status"] == "RUNNING"
    assert len(body["warnings"]) == 1 and "deletion_protection is on" in body["warnings"][0]
    assert actions(sessions, cluster["id"]) == ["cluster.expiry_blocked"]
    # More passes (a label change wakes the cluster) raise no second event.
    assert admin.patch(f"/v1/clusters/{cluster['id']}", json={"labels": {"a": "b"}}).status_code == 200
    settle(worker)
    assert actions(sessions, cluster["id"]) == ["cluster.expiry_blocked"]
    assert phases(sessions, cluster["id"]).count("ExpiryBlocked") == 1
    # Lifting the protection lets the expiry happen at once.
    assert (
        admin.patch(f"/v1/clusters/{cluster['id']}", json={"deletion_protection": False}).status_code == 200
    )
    settle(worker)
    assert admin.get(f"/v1/clusters/{cluster['id']}").status_code == 404
    assert actions(sessions, cluster["id"]) == ["cluster.expiry_blocked", "cluster.expired"]


def _idle_teardown_moment(name: str, node: NodeRun, minutes: int, until: dt.datetime) -> dt.datetime | None:
    """From the simulated workload alone: the first minute with no running or pending job at least
    `minutes` after the last job ended (or the node came up)."""
    assert node.up_since is not None
    moment = node.up_since
    while moment <= until:
        jobs = sim_workload.jobs(0, name, [node], moment)
        if not any(j.state in ("RUNNING", "PENDING") for j in jobs):
            idle_since = max([node.up_since, *(j.ended_at for j in jobs if j.ended_at is not None)])
            if moment - idle_since >= dt.timedelta(minutes=minutes):
                return idle_since + dt.timedelta(minutes=minutes)
        moment += dt.timedelta(minutes=1)
    return None


def test_engine_idle_teardown_deletes_a_slurm_cluster_after_its_queue_stays_empty(
    admin: TestClient,
    make_worker: Callable[..., EngineWorker],
    sessions: sessionmaker[Session],
    monkeypatch: pytest.MonkeyPatch,
    clock: ManualClock,
) -> None:
    start = dt.datetime(2026, 3, 3, 1, 0, tzinfo=dt.UTC)  # busy for its first hour in the model
    on_the_apps_time(monkeypatch, clock, start)
    cluster = create(admin, node_count=1, orchestrator="slurm", idle_teardown_minutes=10)
    assert cluster["idle_teardown_minutes"] == 10
    worker = make_worker(idle_check_seconds=60)
    settle(worker)
    assert get(admin, cluster["id"])["status"] == "RUNNING"
    node = NodeRun(
        name="train-0", index=0, attempt=1, gpu_count=8, up_since=start, failed_at=None, drained=False
    )
    expected = _idle_teardown_moment("train", node, 10, start + dt.timedelta(days=2))
    assert expected is not None and expected > start + dt.timedelta(minutes=30)  # it was busy first
    for _ in range(2000):  # follow the engine's own wake-ups
        if admin.get(f"/v1/clusters/{cluster['id']}").status_code == 404:
            break
        due = due_at(sessions, cluster["id"])
        assert due is not None and due <= expected, (due, expected)
        clock.set(due)
        settle(worker)
    assert near(first_destroying(sessions, cluster["id"]), expected)
    with sessions() as session:
        row = session.get(Cluster, cluster["id"])
        assert row is not None and row.deletion_requested_at is not None
        assert near(aware(row.deletion_requested_at) or start, expected)
    assert actions(sessions, cluster["id"]) == ["cluster.expired"]


def test_api_cluster_lifetime_updates_and_bad_input_name_the_field(admin: TestClient) -> None:
    cluster = create(admin, ttl="8h")
    created = dt.datetime.fromisoformat(cluster["created_at"])
    path = f"/v1/clusters/{cluster['id']}"
    # A new ttl counts from the creation; an expires_at replaces the ttl; null clears the expiry.
    body = admin.patch(path, json={"ttl": "1d12h"}).json()
    assert (body["ttl"], dt.datetime.fromisoformat(body["expires_at"])) == (
        "1d12h",
        (created + dt.timedelta(hours=36)).replace(microsecond=0),
    )
    later = (created + dt.timedelta(days=3)).replace(microsecond=0)
    body = admin.patch(path, json={"expires_at": later.isoformat()}).json()
    assert (body["ttl"], dt.datetime.fromisoformat(body["expires_at"])) == (None, later)
    body = admin.patch(path, json={"expires_at": None}).json()
    assert (body["ttl"], body["expires_at"]) == (None, None)

    past = (dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)).isoformat()
    bad = [
        ({"ttl": "8h", "expires_at": later.isoformat()}, "ttl", "not both"),
        ({"ttl": "8 hours"}, "ttl", "String should match pattern"),
        ({"ttl": "30s"}, "ttl", "between 1 minute and 365 days"),
        ({"ttl": "400d"}, "ttl", "between 1 minute and 365 days"),
        ({"expires_at": past}, "expires_at", "has passed"),
        ({"expires_at": "2027-01-01T00:00:00"}, "expires_at", "time zone"),
        ({"expires_at": 1893456000}, "expires_at", "RFC 3339"),
        ({"idle_teardown_minutes": 0}, "idle_teardown_minutes", "greater than or equal to 1"),
    ]
    for extra, field, words in bad:
        response = admin.post("/v1/clusters", json={**cluster_body(name="other"), **extra})
        assert response.status_code == 422, (extra, response.text)
        errors = response.json()["errors"]
        assert errors[0]["field"] == field and words in errors[0]["message"], (extra, errors)
    response = admin.post(
        "/v1/clusters", json={**cluster_body(name="one", node_count=1), "idle_teardown_minutes": 30}
    )
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "idle_teardown_minutes"
    assert "orchestrator = slurm" in response.json()["errors"][0]["message"]
