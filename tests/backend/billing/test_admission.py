"""Admission of a prepaid project: exhausted, creates, scale-ups and volume creates/resizes answer 402
`credits_exhausted` with the balance and how to add credits; nothing is stored; a top-up lifts it. With
credits left, anything whose up-front part (a reservation, a reserved term, the first billing slice of a
create or scale-up) the balance does not cover answers 402 `insufficient_credits` naming both. Postpaid
projects (the default; credits never change the mode) are never refused."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from backend.billing.account import set_billing_mode
from backend.settings import Settings
from backend.store.billing_models import BillingAccount, LedgerEntry
from backend.store.db import make_engine, make_session_factory
from backend.store.models import Cluster, Volume
from tests.backend.billing.test_worked_example import GUIDE
from tests.backend.conftest import Tenant

CLUSTER = {"name": "train", "region": "us-east-1", "instance_type": "8xH100", "node_count": 2}
VOLUME = {"name": "data", "region": "us-east-1", "size_tib": 2}


@pytest.fixture
def sessions(settings: Settings) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(settings)
    yield make_session_factory(engine, write=True)
    engine.dispose()


def make_prepaid(sessions: sessionmaker[Session], project_id: str) -> None:
    with sessions.begin() as session:
        set_billing_mode(session, project_id=project_id, mode="prepaid", now=datetime.now(UTC))


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
    make_prepaid(sessions, tenant.project_id)
    assert admin.post("/v1/billing/credits", json={"amount_usd": "100"}).status_code == 201
    cluster = admin.post("/v1/clusters", json=CLUSTER).json()
    volume = admin.post("/v1/volumes", json=VOLUME).json()
    spend(sessions, tenant.project_id, 100_990_000)  # balance -0.99

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
    make_prepaid(sessions, tenant.project_id)
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


def test_admission_of_a_prepaid_project_refuses_what_the_balance_does_not_cover(
    admin: TestClient, tenant: Tenant, sessions: sessionmaker[Session]
) -> None:
    # The review: 20.30 USD left admitted a 90-day 8xB200 reservation of 95,472 USD up front.
    make_prepaid(sessions, tenant.project_id)
    assert admin.post("/v1/billing/credits", json={"amount_usd": "20.30"}).status_code == 201
    booking = {"name": "big", "region": "us-west-2", "instance_type": "8xB200", "node_count": 2,
               "duration_days": 90}
    refused = admin.post("/v1/reservations", json=booking)
    body = refused.json()
    assert refused.status_code == 402 and body["code"] == "insufficient_credits", body
    assert body["balance_usd"] == "20.300000" and body["charge_usd"] == "190944.000000"
    assert "190944.000000 USD up front" in body["detail"] and "balance 20.300000 USD" in body["detail"]
    # The first billing slice of an on-demand create: 2 x 8xH100 for an hour, 63.84 USD.
    refused = admin.post("/v1/clusters", json=CLUSTER)
    assert refused.status_code == 402 and refused.json()["charge_usd"] == "63.840000"
    # A reserved term's up-front charge: 16 GPUs x 3.591 (10 % off) x 24 h = 1,378.944 USD.
    reserved = {**CLUSTER, "billing": {"type": "reserved", "duration_days": 1}}
    refused = admin.post("/v1/clusters", json=reserved)
    assert refused.status_code == 402 and refused.json()["charge_usd"] == "1378.944000"
    assert count(sessions, Cluster) == 0

    assert admin.post("/v1/billing/credits", json={"amount_usd": "50"}).status_code == 201  # 70.30 left
    one_node = {**CLUSTER, "node_count": 1, "orchestrator": "slurm"}  # 31.92 USD an hour
    cluster = admin.post("/v1/clusters", json=one_node)
    assert cluster.status_code == 201, cluster.json()
    # Scaling up: the added nodes' first hour. 3 more (95.76) exceed 70.30; 2 more (63.84) fit.
    scale = admin.patch(f"/v1/clusters/{cluster.json()['id']}", json={"node_count": 4})
    assert scale.status_code == 402 and scale.json()["field"] == "node_count", scale.json()
    assert scale.json()["charge_usd"] == "95.760000" and scale.json()["balance_usd"] == "70.300000"
    assert admin.patch(f"/v1/clusters/{cluster.json()['id']}", json={"node_count": 3}).status_code == 200
    # docs/billing.md shows this very example.
    guide = GUIDE.read_text()
    for figure in ("**190,944.00**", "**63.84**", "**1,378.944**", "**95.76**", "balance 20.30 USD"):
        assert figure in guide, figure


def test_admission_counts_up_front_charges_admitted_but_not_taken_yet(
    admin: TestClient, tenant: Tenant, sessions: sessionmaker[Session]
) -> None:
    # A reservation starting later is charged when it starts: two bookings must not share one balance.
    make_prepaid(sessions, tenant.project_id)
    assert admin.post("/v1/billing/credits", json={"amount_usd": "1000"}).status_code == 201
    booking = {"name": "a", "region": "us-east-1", "instance_type": "8xH100", "node_count": 1,
               "duration_days": 1, "starts_at": "2030-01-01T00:00:00Z"}
    first = admin.post("/v1/reservations", json=booking)  # 8 GPUs x 3.591 x 24 h = 689.472 USD
    assert first.status_code == 201, first.json()
    second = admin.post("/v1/reservations", json={**booking, "name": "b"})
    body = second.json()
    assert second.status_code == 402 and body["code"] == "insufficient_credits", body
    assert body["balance_usd"] == "1000.000000" and body["committed_usd"] == "689.472000"
    assert "689.472000 USD is committed" in body["detail"]


def test_a_postpaid_project_is_never_refused_up_front(admin: TestClient, tenant: Tenant) -> None:
    # Credits on a postpaid project reduce its invoice; they never make it prepaid.
    assert admin.post("/v1/billing/credits", json={"amount_usd": "0.01"}).status_code == 201
    assert admin.get("/v1/billing/balance").json()["billing_mode"] == "postpaid"
    assert admin.post("/v1/clusters", json=CLUSTER).status_code == 201
    booking = {"name": "big", "region": "us-west-2", "instance_type": "8xB200", "node_count": 2,
               "duration_days": 90}
    assert admin.post("/v1/reservations", json=booking).status_code == 201
