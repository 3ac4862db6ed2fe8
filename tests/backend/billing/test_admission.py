"""Admission of an exhausted prepaid project: creates, scale-ups and volume creates/resizes answer 402
`credits_exhausted` with the balance and how to add credits; nothing is stored; a top-up lifts it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from backend.settings import Settings
from backend.store.billing_models import BillingAccount, LedgerEntry
from backend.store.db import make_engine, make_session_factory
from backend.store.models import Cluster, Volume
from tests.backend.conftest import Tenant

CLUSTER = {"name": "train", "region": "us-east-1", "instance_type": "8xH100", "node_count": 2}
VOLUME = {"name": "data", "region": "us-east-1", "size_tib": 2}


@pytest.fixture
def sessions(settings: Settings) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(settings)
    yield make_session_factory(engine, write=True)
    engine.dispose()


def spend(sessions: sessionmaker[Session], project_id: str, micros: int) -> None:
    """Debit the project as the metering job would (a charge entry)."""
    with sessions.begin() as session:
        count = session.scalar(select(func.count()).select_from(LedgerEntry)) or 0
        session.add(LedgerEntry(idempotency_key=f"test-charge-{count}", project_id=project_id,
                                entry_type="charge", amount_micros=-micros, description="usage",
                                actor="billing", created_at=datetime.now(UTC)))


def assert_refused(response: object, field: str | None) -> None:
    body = response.json()  # type: ignore[attr-defined]
    assert response.status_code == 402, body  # type: ignore[attr-defined]
    assert body["code"] == "credits_exhausted" and body.get("field") == field
    assert body["balance_usd"] == "-0.990000" and body["add_credits"] == "POST /v1/billing/credits"
    assert "POST /v1/billing/credits" in body["detail"] and "-0.990000 USD" in body["detail"]


def count(sessions: sessionmaker[Session], model: type[Cluster] | type[Volume]) -> int:
    with sessions() as session:
        return session.scalar(select(func.count()).select_from(model)) or 0


def test_admission_refuses_creates_and_growth_of_an_exhausted_prepaid_project_with_402(
    admin: TestClient, tenant: Tenant, sessions: sessionmaker[Session]
) -> None:
    assert admin.post("/v1/billing/credits", json={"amount_usd": "0.01"}).status_code == 201
    cluster = admin.post("/v1/clusters", json=CLUSTER).json()
    volume = admin.post("/v1/volumes", json=VOLUME).json()
    spend(sessions, tenant.project_id, 1_000_000)  # balance -0.99

    assert_refused(admin.post("/v1/clusters", json={**CLUSTER, "name": "more"}), None)
    assert_refused(admin.patch(f"/v1/clusters/{cluster['id']}", json={"node_count": 3}), "node_count")
    assert_refused(admin.post("/v1/volumes", json={**VOLUME, "name": "more"}), None)
    assert_refused(admin.patch(f"/v1/volumes/{volume['id']}", json={"size_tib": 3}), "size_tib")
    assert count(sessions, Cluster) == 1 and count(sessions, Volume) == 1  # nothing stored
    assert admin.get(f"/v1/clusters/{cluster['id']}").json()["node_count"] == 2
    assert admin.get(f"/v1/volumes/{volume['id']}").json()["size_tib"] == 2
    # What frees or costs nothing still goes through.
    assert admin.patch(f"/v1/clusters/{cluster['id']}", json={"node_count": 1}).status_code == 200
    assert admin.patch(f"/v1/clusters/{cluster['id']}", json={"labels": {"team": "ml"}}).status_code == 200
    assert admin.patch(f"/v1/volumes/{volume['id']}", json={"name": "renamed"}).status_code == 200

    assert admin.post("/v1/billing/credits", json={"amount_usd": "100"}).status_code == 201
    assert admin.post("/v1/clusters", json={**CLUSTER, "name": "more"}).status_code == 201
    assert admin.patch(f"/v1/volumes/{volume['id']}", json={"size_tib": 3}).status_code == 200


def test_admission_refuses_a_project_the_meter_judged_exhausted_until_credits_are_added(
    admin: TestClient, tenant: Tenant, sessions: sessionmaker[Session]
) -> None:
    assert admin.post("/v1/billing/credits", json={"amount_usd": "1"}).status_code == 201
    with sessions.begin() as session:  # usage accrued but not charged yet exceeds the 1.00 left
        account = session.get(BillingAccount, tenant.project_id)
        assert account is not None
        account.exhausted_since = datetime.now(UTC)
    response = admin.post("/v1/volumes", json=VOLUME)
    assert response.status_code == 402 and response.json()["balance_usd"] == "1.000000"
    assert response.json()["exhausted_since"] is not None
    assert admin.post("/v1/billing/credits", json={"amount_usd": "5"}).status_code == 201
    assert admin.post("/v1/volumes", json=VOLUME).status_code == 201


def test_admission_never_refuses_a_postpaid_project(admin: TestClient) -> None:
    assert admin.post("/v1/clusters", json=CLUSTER).status_code == 201
    assert admin.post("/v1/volumes", json=VOLUME).status_code == 201
