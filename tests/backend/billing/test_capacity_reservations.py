"""Capacity reservations apart from clusters, against the real engine and meter (SQLite and PostgreSQL):
clusters draw from a reservation and give their nodes back when they go, the term is charged once up
front however many clusters use it, on-demand creates cannot take its capacity, and concurrent draws
never exceed it."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import inspect, select
from sqlalchemy.orm import Session, sessionmaker

from backend.billing.ledger import balance_micros
from backend.billing.pricing_catalog import default_price_book
from backend.billing.service import run_metering
from backend.billing.settings import BillingSettings
from backend.domain.catalog import Catalog
from backend.domain.clock import ManualClock
from backend.domain.errors import Conflict
from backend.provisioning import capacity
from backend.provisioning.engine import InsufficientCapacity, request_reconcile
from backend.provisioning.settings import EngineSettings
from backend.provisioning.worker import EngineWorker
from backend.services import reservations
from backend.settings import Settings
from backend.store.billing_models import UsageRecord
from backend.store.db import make_engine, make_session_factory
from backend.store.engine_models import Allocation
from backend.store.models import Cluster
from tests.backend.billing.test_worked_example import GUIDE
from tests.backend.conftest import Tenant
from tests.backend.engine.conftest import FAST, create, drain, get, install_catalog
from tests.backend.engine.test_engine_address_migration import migrate

# docs/billing.md, "Capacity reservations": 2 x 8xH100 for 1 day at 3.99 x (1 - 0.10) per GPU-hour.
UPFRONT_USD = "1378.944000"
UPFRONT_MICROS = 1_378_944_000
_ids = itertools.count()


@pytest.fixture
def sessions(settings: Settings) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(settings)
    yield make_session_factory(engine, write=True)
    engine.dispose()


@pytest.fixture
def four_h100(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Catalog:
    return install_catalog(monkeypatch, tmp_path, {"8xH100": 4})


def _book(admin: TestClient, **overrides: Any) -> dict[str, Any]:
    body = {"name": "block", "region": "us-east-1", "instance_type": "8xH100", "node_count": 2,
            "duration_days": 1, **overrides}
    response = admin.post("/v1/reservations", json=body)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def _meter(sessions: sessionmaker[Session], moment: datetime) -> None:
    run_metering(sessions=sessions, clock=ManualClock(moment), settings=BillingSettings(settle_seconds=60),
                 prices=default_price_book())


def test_reservation_draw_and_return_with_one_upfront_charge(
    four_h100: Catalog, admin: TestClient, tenant: Tenant, sessions: sessionmaker[Session]
) -> None:
    worker = EngineWorker(sessions, EngineSettings(**FAST), catalog=four_h100)  # type: ignore[arg-type]
    block = _book(admin)
    assert (block["fabric"], block["status"], block["free_nodes"], block["upfront_usd"]) == (
        "ib-east-a", "active", 2, UPFRONT_USD)
    assert block["gpu_hour_usd"] == "3.591"
    # The pool has 4 nodes; 2 are held: an on-demand create of 3 is refused, naming node_count.
    refused = admin.post("/v1/clusters", json={"name": "od", "region": "us-east-1", "instance_type": "8xH100",
                                               "node_count": 3})
    assert refused.status_code == 409 and refused.json()["field"] == "node_count", refused.text
    mismatch = admin.post("/v1/clusters", json={"name": "x", "region": "us-west-2", "instance_type": "8xH100",
                                                "reservation_id": block["id"]})
    assert mismatch.status_code == 422 and "region" in mismatch.text, mismatch.text

    first = create(admin, name="first", node_count=2, reservation_id=block["id"])
    drain(worker)
    assert get(admin, first["id"])["status"] == "RUNNING"
    assert get(admin, first["id"])["estimated_hourly_cost_usd"] == 0
    assert admin.get(f"/v1/reservations/{block['id']}").json()["free_nodes"] == 0
    over = admin.post("/v1/clusters", json={"name": "over", "region": "us-east-1", "instance_type": "8xH100",
                                            "reservation_id": block["id"]})
    assert over.status_code == 409 and over.json()["code"] == "reservation_exhausted", over.text
    in_use = admin.delete(f"/v1/reservations/{block['id']}")
    assert in_use.status_code == 409 and in_use.json()["code"] == "reservation_in_use"

    # Replace the cluster: its nodes go back to the reservation, the next one draws them.
    assert admin.delete(f"/v1/clusters/{first['id']}").status_code == 202
    drain(worker)
    assert admin.get(f"/v1/reservations/{block['id']}").json()["free_nodes"] == 2
    second = create(admin, name="second", node_count=2, reservation_id=block["id"])
    drain(worker)
    assert get(admin, second["id"])["status"] == "RUNNING"
    with sessions() as session:
        assert capacity.mismatches(session) == []

    later = datetime.now(UTC) + timedelta(hours=3)
    for _ in range(2):  # a second pass charges nothing more
        _meter(sessions, later)
    with sessions() as session:
        records = session.scalars(
            select(UsageRecord).where(UsageRecord.project_id == tenant.project_id)
        ).all()
        charged = -balance_micros(session, tenant.project_id)
    upfront = [r for r in records if r.kind == "reservation"]
    assert [(r.resource_id, r.amount_micros) for r in upfront] == [(block["id"], UPFRONT_MICROS)]
    nodes = [r for r in records if r.kind != "reservation"]
    # (the first cluster's nodes may have run for less than a second at simulated speed: no line)
    assert second["id"] in {r.cluster_id for r in nodes} <= {first["id"], second["id"]}
    assert {(r.kind, r.amount_micros) for r in nodes} == {("compute_reserved", 0)}  # prepaid
    assert charged == UPFRONT_MICROS
    assert admin.get(f"/v1/reservations/{block['id']}").json()["charged_at"] is not None


def _admit(sessions: sessionmaker[Session], catalog: Catalog, project_id: str, reservation_id: str | None
           ) -> str:
    """A 1-node cluster created as the API does (row and admission in one transaction)."""
    now = datetime.now(UTC)
    cluster_id = f"cls_reservations{next(_ids):014d}"
    with sessions.begin() as session:
        session.add(Cluster(
            id=cluster_id, project_id=project_id, name=f"c{cluster_id[-6:]}", region="us-east-1",
            instance_type="8xH100", node_count=1, orchestrator="none", interconnect="infiniband",
            billing_type="on_demand", reservation_id=reservation_id, labels={}, deletion_protection=False,
            status="PENDING", generation=1, created_at=now, updated_at=now,
        ))
        session.flush()
        request_reconcile(session, cluster_id, catalog=catalog)
    return cluster_id


def test_reservation_concurrent_draws_never_exceed_it(
    four_h100: Catalog, tenant: Tenant, sessions: sessionmaker[Session]
) -> None:
    with sessions.begin() as session:
        block = reservations.book_reservation(
            session=session, catalog=four_h100, project_id=tenant.project_id, now=datetime.now(UTC),
            spec=reservations.ReservationSpec("block", "us-east-1", "8xH100", 3, 1, None)).id
    outcomes: list[str] = []
    errors: list[BaseException] = []

    def create(reservation_id: str | None) -> None:
        try:
            _admit(sessions, four_h100, tenant.project_id, reservation_id)
            outcomes.append("drawn" if reservation_id else "on_demand")
        except (Conflict, InsufficientCapacity) as error:
            outcomes.append(error.code)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=create, args=(ref,)) for ref in [block] * 5 + [None] * 3]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    # 3 reserved nodes for 5 drawers; 1 node left for 3 on-demand creators.
    assert sorted(outcomes) == sorted(["drawn"] * 3 + ["reservation_exhausted"] * 2
                                      + ["on_demand"] + ["insufficient_capacity"] * 2)
    with sessions() as session:
        slots = list(session.scalars(select(Allocation.value).where(Allocation.kind == "slot")))
        assert len(slots) == len(set(slots)) == 4
        assert capacity.mismatches(session) == []


def test_reservation_guide_shows_the_numbers_the_tests_check() -> None:
    prices = default_price_book()
    rate = prices.on_demand_gpu_hour("8xH100", "us-east-1") * (1 - prices.reserved_discount("8xH100", 1))
    on_demand_day = prices.on_demand_gpu_hour("8xH100", "us-east-1") * 16 * 24
    text = GUIDE.read_text(encoding="utf-8")
    section = text[text.index("## Capacity reservations"):text.index("## Storage")]
    assert rate == Decimal("3.591") and rate * 16 * 24 == Decimal(UPFRONT_USD)
    upfront = Decimal(UPFRONT_USD).normalize()
    for shown in (f"**{rate.normalize()}**", f"**{upfront:,}**", f"**{on_demand_day:,.2f}**"):
        assert shown in section, f"docs/billing.md does not show {shown}"


def test_reservation_migration_downgrades_and_upgrades(settings: Settings) -> None:
    migrate(settings, "0012_allocation_counters", down=True)
    engine = make_engine(settings)
    try:
        assert "capacity_reservations" not in inspect(engine).get_table_names()
        assert "reservation_id" not in {c["name"] for c in inspect(engine).get_columns("clusters")}
    finally:
        engine.dispose()
    migrate(settings, "head")
    engine = make_engine(settings)
    try:
        assert "capacity_reservations" in inspect(engine).get_table_names()
        assert "reservation_id" in {c["name"] for c in inspect(engine).get_columns("clusters")}
    finally:
        engine.dispose()


def test_reservation_bad_input_names_the_field(admin: TestClient) -> None:
    for overrides, field in (
        ({"region": "mars-1"}, "region"),
        ({"instance_type": "8xH100-EFA", "region": "eu-north-1"}, "instance_type"),
        ({"duration_days": 91}, "duration_days"),
        ({"starts_at": "2020-01-01T00:00:00Z"}, "starts_at"),
        ({"node_count": 100_000}, "node_count"),
    ):
        body = {"name": "b", "region": "us-east-1", "instance_type": "8xH100", "node_count": 1,
                "duration_days": 1, **overrides}
        response = admin.post("/v1/reservations", json=body)
        assert response.status_code == 422, (overrides, response.text)
        problem = response.json()
        named = {problem.get("field"), *(e.get("field") for e in problem.get("errors", []))}
        assert field in named, (overrides, response.text)
    # Single-node shapes are reserved by the node: one per single-node cluster.
    assert _book(admin, instance_type="1xH100", node_count=2, starts_at="2030-01-01T00:00:00Z")["status"] == (
        "scheduled")
