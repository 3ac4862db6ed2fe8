"""Billing against the real engine: clusters created through the API, provisioned and torn down by the
engine worker; the meter reads the transitions the engine wrote, and expiry acts through the engine."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from backend.billing.account import set_billing_mode
from backend.billing.compute_meter import load_cluster_usage
from backend.billing.meter import to_second
from backend.billing.pricing_catalog import default_price_book
from backend.billing.service import run_metering
from backend.billing.settings import BillingSettings
from backend.domain.clock import ManualClock, ensure_utc
from backend.provisioning.settings import EngineSettings
from backend.provisioning.worker import EngineWorker
from backend.settings import Settings
from backend.store.billing_models import LedgerEntry, Reservation, SettledCluster, UsageRecord
from backend.store.db import make_engine, make_session_factory
from backend.store.engine_models import EngineCluster, NodeTransition, PhaseRecord
from tests.backend.conftest import Tenant
from tests.backend.engine.conftest import FAST, create, drain, get

SETTINGS = BillingSettings(settle_seconds=60)


@pytest.fixture
def sessions(settings: Settings) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(settings)
    yield make_session_factory(engine, write=True)
    engine.dispose()


@pytest.fixture
def worker(sessions: sessionmaker[Session]) -> EngineWorker:
    return EngineWorker(sessions, EngineSettings(**FAST))  # type: ignore[arg-type]


def meter(sessions: sessionmaker[Session], clock: ManualClock) -> None:
    run_metering(sessions=sessions, clock=clock, settings=SETTINGS, prices=default_price_book())


def test_on_demand_cluster_is_metered_from_running_to_destroying(
    admin: TestClient, tenant: Tenant, sessions: sessionmaker[Session], worker: EngineWorker
) -> None:
    cluster = create(admin, node_count=2)
    drain(worker)
    assert get(admin, cluster["id"])["status"] == "RUNNING"
    assert admin.delete(f"/v1/clusters/{cluster['id']}").status_code in (200, 202, 204)
    drain(worker)

    with sessions() as session:
        history = session.scalars(
            select(NodeTransition)
            .where(NodeTransition.cluster_id == cluster["id"])
            .order_by(NodeTransition.id)
        ).all()
        running = {t.node_id: to_second(ensure_utc(t.at)) for t in history if t.to_status == "RUNNING"}
        destroying = {t.node_id: to_second(ensure_utc(t.at)) for t in history if t.to_status == "DESTROYING"}
        last = max(ensure_utc(t.at) for t in history)
    assert set(running) == set(destroying) and len(running) == 2

    meter(sessions, ManualClock(last + timedelta(minutes=2)))
    with sessions() as session:
        records = session.scalars(select(UsageRecord).where(UsageRecord.cluster_id == cluster["id"])).all()
    for node_id, started in running.items():
        seconds = sum(r.seconds for r in records if r.resource_id == node_id)
        assert seconds == int((destroying[node_id] - started).total_seconds())
    assert all(r.kind == "compute_on_demand" and r.unit_price_usd == Decimal("3.99") for r in records)
    with sessions() as session:  # torn down and fully charged: later passes skip its history
        assert session.get(SettledCluster, cluster["id"]) is not None
        assert load_cluster_usage(session, project_id=tenant.project_id) == []


def test_reserved_cluster_term_starts_at_first_running_and_expiry_decommissions_through_the_engine(
    admin: TestClient, sessions: sessionmaker[Session], worker: EngineWorker
) -> None:
    cluster = create(admin, node_count=1, billing={"type": "reserved", "duration_days": 1})
    drain(worker)
    assert get(admin, cluster["id"])["status"] == "RUNNING"
    with sessions() as session:
        state = session.get(EngineCluster, cluster["id"])
        assert state is not None and state.first_ready_at is not None
        first_ready = to_second(ensure_utc(state.first_ready_at))

    clock = ManualClock(first_ready + timedelta(minutes=1))
    meter(sessions, clock)
    with sessions() as session:
        reservation = session.get(Reservation, cluster["id"])
        assert reservation is not None
        assert ensure_utc(reservation.term_start) == first_ready
        assert reservation.upfront_micros == 689_472_000

    clock.set(first_ready + timedelta(days=1, seconds=30))
    meter(sessions, clock)
    drain(worker)
    with sessions() as session:
        statuses = [
            t.to_status
            for t in session.scalars(
                select(NodeTransition)
                .where(NodeTransition.cluster_id == cluster["id"])
                .order_by(NodeTransition.id)
            )
        ]
        phases = list(
            session.scalars(select(PhaseRecord.phase).where(PhaseRecord.cluster_id == cluster["id"]))
        )
    assert statuses[-1] == "DESTROYED"  # the engine tore the cluster down at the end of its term
    assert "ReservedTermStarted" in phases and "Decommissioning" in phases
    assert admin.get(f"/v1/clusters/{cluster['id']}").status_code == 404
    meter(sessions, clock)
    with sessions() as session:
        charged = sum(
            r.amount_micros
            for r in session.scalars(select(UsageRecord).where(UsageRecord.cluster_id == cluster["id"]))
        )
    assert charged == 689_472_000  # the term, and nothing on-demand


def prepaid_with_a_cent_left(admin: TestClient, sessions: sessionmaker[Session], project_id: str,
                             node_count: int) -> dict[str, Any]:
    """A prepaid project whose create was covered (100 USD) and that then spent all but 0.01 USD."""
    with sessions.begin() as session:
        set_billing_mode(session, project_id=project_id, mode="prepaid", now=datetime.now(UTC))
    assert admin.post("/v1/billing/credits", json={"amount_usd": "100"}).status_code == 201
    cluster = create(admin, node_count=node_count)
    with sessions.begin() as session:
        session.add(LedgerEntry(idempotency_key="test-spend", project_id=project_id, entry_type="charge",
                                amount_micros=-99_990_000, description="usage", actor="billing",
                                created_at=datetime.now(UTC)))
    return cluster


def test_credits_run_out_pause_then_decommission_through_the_engine_visible_in_the_api(
    admin: TestClient, tenant: Tenant, sessions: sessionmaker[Session], worker: EngineWorker
) -> None:
    cluster = prepaid_with_a_cent_left(admin, sessions, tenant.project_id, node_count=2)
    drain(worker)
    assert get(admin, cluster["id"])["status"] == "RUNNING"
    settings = BillingSettings(settle_seconds=60, decommission_after_hours=0.5)
    clock = ManualClock(datetime.now(UTC) + timedelta(minutes=2))  # two minutes of 16 GPUs: > 0.01 USD
    result = run_metering(sessions=sessions, clock=clock, settings=settings, prices=default_price_book())
    assert result.clusters_paused == 1
    paused = get(admin, cluster["id"])
    assert "Paused" in [p["phase"] for p in paused["phase_history"]]
    balance = admin.get("/v1/billing/balance").json()
    assert balance["exhausted"] is True and balance["on_demand_paused"] is True

    clock.advance(minutes=31)
    result = run_metering(sessions=sessions, clock=clock, settings=settings, prices=default_price_book())
    assert result.clusters_decommissioned == 1
    drain(worker)
    assert admin.get(f"/v1/clusters/{cluster['id']}").status_code == 404  # torn down by the engine
    actions = [e["action"] for e in admin.get("/v1/audit-events", params={"page_size": 200}).json()["items"]]
    assert {
        "billing.credits_exhausted",
        "cluster.paused_for_credits",
        "cluster.decommissioned_for_credits",
    } <= set(actions)


def test_credit_pause_powers_nodes_off_so_the_meter_stops_and_a_top_up_powers_them_on(
    admin: TestClient, tenant: Tenant, sessions: sessionmaker[Session], worker: EngineWorker
) -> None:
    cluster = prepaid_with_a_cent_left(admin, sessions, tenant.project_id, node_count=2)
    drain(worker)
    clock = ManualClock(datetime.now(UTC) + timedelta(minutes=2))
    assert run_metering(sessions=sessions, clock=clock, settings=SETTINGS, prices=default_price_book()
                        ).clusters_paused == 1
    drain(worker)
    body = get(admin, cluster["id"])
    assert body["status"] == "PAUSED" and [n["status"] for n in body["nodes"]] == ["PAUSED", "PAUSED"]
    with sessions() as session:  # powered off: no node has an open metered interval
        (usage,) = load_cluster_usage(session, project_id=tenant.project_id)
        paused_at = max(i.end for i in usage.intervals if i.end is not None)
        assert len(usage.intervals) == 2 and all(i.end is not None for i in usage.intervals)

    assert admin.post("/v1/billing/credits", json={"amount_usd": "100"}).status_code == 201
    clock.advance(minutes=1)
    assert run_metering(sessions=sessions, clock=clock, settings=SETTINGS, prices=default_price_book()
                        ).clusters_resumed == 1
    drain(worker)
    body = get(admin, cluster["id"])
    assert body["status"] == "RUNNING" and [n["status"] for n in body["nodes"]] == ["RUNNING", "RUNNING"]
    with sessions() as session:  # powered on: metered again from the new RUNNING
        (usage,) = load_cluster_usage(session, project_id=tenant.project_id)
        reopened = [i for i in usage.intervals if i.end is None]
        assert len(reopened) == 2 and all(i.start >= paused_at for i in reopened)
