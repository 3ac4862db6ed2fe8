"""The billing HTTP API: credits (admin), balance, usage (filterable, paginated), invoices, estimates."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from fastapi.testclient import TestClient

from backend.billing.cli import add_subcommands
from backend.billing.settings import BillingSettings
from backend.runtime import build_runtime
from backend.settings import Settings
from backend.store.db import make_engine, make_session_factory
from tests.backend.billing.conftest import BillingWorld, at
from tests.backend.conftest import Tenant


@pytest.fixture
def billing_world(settings: Settings) -> Iterator[BillingWorld]:
    engine = make_engine(settings)
    yield BillingWorld(make_session_factory(engine, write=True), BillingSettings(settle_seconds=60))
    engine.dispose()


def test_admin_adds_credits_and_the_balance_shows_them(admin: TestClient, member: TestClient) -> None:
    response = admin.post(
        "/v1/billing/credits",
        json={"amount_usd": "500.25", "description": "pilot"},
        headers={"Idempotency-Key": "grant-1"},
    )
    assert response.status_code == 201, response.text
    assert response.json()["amount_usd"] == "500.250000"
    assert response.json()["balance_usd"] == "500.250000"
    replay = admin.post(
        "/v1/billing/credits",
        json={"amount_usd": "500.25", "description": "pilot"},
        headers={"Idempotency-Key": "grant-1"},
    )
    assert replay.status_code == 201 and replay.headers.get("Idempotent-Replayed") == "true"
    balance = member.get("/v1/billing/balance").json()
    # A grant never makes a project prepaid: the mode is the operator's (set-billing-mode).
    assert balance["balance_usd"] == "500.250000" and balance["prepaid"] is False
    assert balance["billing_mode"] == "postpaid"
    assert balance["exhausted"] is False and balance["volume_data_deadline"] is None
    assert member.post("/v1/billing/credits", json={"amount_usd": "1"}).status_code == 403
    audit = admin.get("/v1/audit-events", params={"action": "billing.credits_added"}).json()["items"]
    assert len(audit) == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"amount_usd": "0"}, "amount_usd"),
        ({"amount_usd": "1.0000001"}, "amount_usd"),
        ({"amount_usd": "10", "colour": "red"}, "colour"),
        ({}, "amount_usd"),
    ],
)
def test_bad_credit_grants_name_the_field(admin: TestClient, body: dict[str, str], field: str) -> None:
    response = admin.post("/v1/billing/credits", json=body)
    assert response.status_code == 422
    assert field in response.text
    assert admin.get("/v1/billing/balance").json()["granted_usd"] == "0.000000"


def test_usage_lists_line_items_with_filters_and_pages(
    admin: TestClient, tenant: Tenant, billing_world: BillingWorld
) -> None:
    cluster = billing_world.cluster(
        tenant.project_id, instance_type="8xH100", region="us-east-1", node_count=2
    )
    billing_world.nodes(cluster, ["n0", "n1"], "RUNNING", at("10:00:00"))
    billing_world.nodes(cluster, ["n0", "n1"], "DESTROYING", at("12:30:00"))
    billing_world.volume(tenant.project_id, region="us-east-1", size_tib=2, created=at("10:00:00"))
    billing_world.run(at("13:00:00"))

    compute = admin.get(
        "/v1/billing/usage", params={"kind": "compute_on_demand", "cluster_id": cluster}
    ).json()
    assert len(compute["items"]) == 6  # 2 nodes x (2 whole hours + a half hour)
    assert sum(Decimal(i["amount_usd"]) for i in compute["items"]) == Decimal("2") * Decimal(
        "31.92"
    ) * Decimal("2.5")
    first = compute["items"][0]
    assert first["unit_price_usd"] == "3.990000" and first["units"] == "8" and first["seconds"] == 3600

    windowed = admin.get(
        "/v1/billing/usage",
        params={"kind": "compute_on_demand", "start": "2026-03-02T12:00:00Z", "end": "2026-03-02T13:00:00Z"},
    ).json()
    assert len(windowed["items"]) == 2
    storage = admin.get("/v1/billing/usage", params={"kind": "storage"}).json()["items"]
    assert sum(Decimal(i["amount_usd"]) for i in storage) == Decimal("0.1122") * 2 * 2  # 2 TiB for 2 h

    seen, token = [], None
    while True:
        params: dict[str, str | int] = {"page_size": 4}
        if token:
            params["page_token"] = token
        page = admin.get("/v1/billing/usage", params=params).json()
        seen += [i["id"] for i in page["items"]]
        token = page["next_page_token"]
        if token is None:
            break
    assert len(seen) == len(set(seen)) == 8
    assert admin.get("/v1/billing/usage", params={"page_token": "garbage"}).status_code == 400
    assert admin.get("/v1/billing/usage", params={"kind": "beer"}).status_code == 422


def test_invoices_summarise_closed_months_and_the_open_one(
    admin: TestClient, tenant: Tenant, billing_world: BillingWorld
) -> None:
    cluster = billing_world.cluster(
        tenant.project_id, instance_type="8xH100", region="us-east-1", node_count=1
    )
    billing_world.transition(cluster, "n0", "RUNNING", at("22:00:00", day=31))
    billing_world.transition(cluster, "n0", "DESTROYING", at("02:00:00", day=1, month=4))
    billing_world.run(at("03:00:00", day=1, month=4))
    items = admin.get("/v1/billing/invoices").json()["items"]
    assert items[0]["status"] == "open"
    march = next(i for i in items if i["period"] == "2026-03")
    assert march["status"] == "closed"
    assert march["compute_on_demand_usd"] == "63.840000" and march["total_usd"] == "63.840000"
    assert march["line_count"] == 2
    assert datetime.fromisoformat(march["period_end"].replace("Z", "+00:00")) == datetime(
        2026, 4, 1, tzinfo=UTC
    )


def test_estimate_on_demand_and_reserved(member: TestClient) -> None:
    on_demand = member.post(
        "/v1/pricing/estimate",
        json={"region": "us-east-1", "instance_type": "8xH100", "node_count": 2, "max_hourly_cost_usd": "60"},
    )
    assert on_demand.status_code == 200, on_demand.text
    assert on_demand.json()["hourly_usd"] == "63.84"
    assert on_demand.json()["upfront_usd"] is None
    assert on_demand.json()["within_max_hourly_cost"] is False
    reserved = member.post(
        "/v1/pricing/estimate",
        json={
            "region": "eu-north-1",
            "instance_type": "8xH200",
            "node_count": 2,
            "billing": {"type": "reserved", "duration_days": 1},
        },
    )
    assert reserved.json()["hourly_usd"] == "77.76"
    assert reserved.json()["upfront_usd"] == "1866.24"
    assert reserved.json()["reserved_gpu_hour_usd"] == "4.86"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"region": "us-east-1", "instance_type": "9xH900"}, "instance_type"),
        ({"region": "mars-1", "instance_type": "8xH100"}, "region"),
        ({"region": "us-east-1", "instance_type": "1xH100", "node_count": 2}, "node_count"),
        (
            {"region": "us-east-1", "instance_type": "8xH100", "billing": {"type": "reserved"}},
            "billing.duration_days",
        ),
    ],
)
def test_estimate_rejects_bad_specs_naming_the_field(
    member: TestClient, body: dict[str, object], field: str
) -> None:
    response = member.post("/v1/pricing/estimate", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field


def test_add_credits_command(
    settings: Settings,
    tenant: Tenant,
    capsys: pytest.CaptureFixture[str],
    billing_world: BillingWorld,
) -> None:
    parser = argparse.ArgumentParser()
    add_subcommands(parser.add_subparsers(dest="command", required=True),
                    open_runtime=lambda _args: build_runtime(settings))
    project_name = "acme"
    args = parser.parse_args(
        ["add-credits", "--project", project_name, "--amount-usd", "250.5", "--idempotency-key", "ticket-42"]
    )
    assert args.func(args) == 0
    assert args.func(args) == 0  # retried with the same key: added once
    assert capsys.readouterr().out.strip().splitlines()[-1] == "250.500000"
    assert billing_world.balance(tenant.project_id) == Decimal("250.5")
    missing = parser.parse_args(["add-credits", "--project", "nope", "--amount-usd", "1"])
    assert missing.func(missing) == 1
    with pytest.raises(SystemExit):
        parser.parse_args(["add-credits", "--project", project_name, "--amount-usd", "-3"])
    once = parser.parse_args(["billing-run", "--once"])
    assert once.func(once) == 0


def test_gpucloud_backend_add_credits_subcommand(
    settings: Settings, tenant: Tenant, monkeypatch: pytest.MonkeyPatch, billing_world: BillingWorld
) -> None:
    from backend.cli import main

    monkeypatch.setenv("GPUCLOUD_DATABASE_URL", settings.database_url)
    assert main(["add-credits", "--project", "acme", "--amount-usd", "75", "--description", "trial"]) == 0
    assert billing_world.balance(tenant.project_id) == Decimal("75")
    assert "billing.credits_added" in billing_world.audit_actions(tenant.project_id)


def test_max_hourly_cost_refuses_a_create_or_scale_naming_the_field_and_the_cost(admin: TestClient) -> None:
    body = {
        "name": "train",
        "region": "us-east-1",
        "instance_type": "8xH100",
        "node_count": 2,
        "max_hourly_cost_usd": "60",
    }
    refused = admin.post("/v1/clusters", json=body)
    assert refused.status_code == 422, refused.text
    assert refused.json()["field"] == "max_hourly_cost_usd"
    assert "63.84" in refused.json()["detail"]

    created = admin.post("/v1/clusters", json={**body, "max_hourly_cost_usd": "100"})
    assert created.status_code in (200, 201, 202), created.text
    assert Decimal(str(created.json()["estimated_hourly_cost_usd"])) == Decimal("63.84")
    cluster = created.json()
    scaled = admin.patch(f"/v1/clusters/{cluster['id']}", json={"node_count": 4})
    assert scaled.status_code == 422, scaled.text
    assert scaled.json()["field"] == "max_hourly_cost_usd"
    assert "127.68" in scaled.json()["detail"]


def test_cluster_billing_view_exposes_the_reserved_term(tenant: Tenant, billing_world: BillingWorld) -> None:
    from backend.api.billing import ClusterReservationOut
    from backend.billing.reports import cluster_billing

    cluster = billing_world.cluster(
        tenant.project_id,
        instance_type="8xH100",
        region="us-east-1",
        node_count=1,
        billing_type="reserved",
        duration_days=7,
        on_expiry="decommission",
    )
    with billing_world.sessions() as session:
        assert cluster_billing(session, cluster) == {"reservation": None}
    billing_world.transition(cluster, "n0", "RUNNING", at("10:00:00"))
    billing_world.run(at("10:00:30"))
    with billing_world.sessions() as session:
        view = ClusterReservationOut(**cluster_billing(session, cluster)["reservation"])
    assert view.term_start == at("10:00:00") and view.term_end == at("10:00:00", day=9)
    assert Decimal(view.upfront_usd) == Decimal("3.99") * Decimal("0.85") * 8 * 24 * 7  # 4,558.176
    assert view.discount == "0.15" and view.expired is False


def test_cluster_billing_view_shows_a_started_term_before_the_metering_pass_charges_it(
    billing_world: BillingWorld,
) -> None:
    from backend.billing.reports import cluster_billing
    from backend.domain.catalog import default_catalog
    from backend.services.clusters import cluster_spec
    from backend.store.engine_models import EngineCluster
    from backend.store.models import Cluster

    project = billing_world.project()
    cluster = billing_world.cluster(project, instance_type="8xH100", region="us-east-1", node_count=1,
                                    billing_type="reserved", duration_days=7, on_expiry="decommission")

    def shown() -> dict[str, object] | None:
        with billing_world.sessions() as session:
            row = session.get(Cluster, cluster)
            assert row is not None
            spec = cluster_spec(row)
            view: dict[str, object] | None = cluster_billing(
                session, cluster, spec=spec, catalog=default_catalog())["reservation"]
            return view

    with billing_world.sessions.begin() as session:
        session.add(EngineCluster(cluster_id=cluster, fabric="ib-east-a", hostname_prefix="c",
                                  subnet="10.0.0.0/24"))
    assert shown() is None  # not run yet: no term
    with billing_world.sessions.begin() as session:
        engine_cluster = session.get(EngineCluster, cluster)
        assert engine_cluster is not None
        engine_cluster.first_ready_at = at("10:00:00")
    billing_world.transition(cluster, "n0", "RUNNING", at("10:00:00"))
    pending = shown()
    assert pending is not None and pending["term_start"] == at("10:00:00")
    billing_world.run(at("10:00:30"))
    assert shown() == pending  # the metering pass charged exactly the term shown
