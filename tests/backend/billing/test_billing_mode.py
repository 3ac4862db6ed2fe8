"""Prepaid vs postpaid is a project setting an operator makes (`gpucloud-backend set-billing-mode`),
never inferred from a grant: credits on a postpaid project reduce its invoice and pause nothing;
exhaustion of a prepaid project never pauses clusters on paid capacity; leaving prepaid resumes what
exhaustion paused."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from backend.billing.account import billing_mode
from backend.cli import main
from backend.store.billing_models import CreditHold
from backend.store.models import AuditEvent, Project, ReservedIp, Volume
from tests.backend.billing.conftest import BillingWorld, at
from tests.backend.billing.test_admission import CLUSTER, VOLUME, make_prepaid, spend
from tests.backend.conftest import Tenant


def test_a_credit_grant_never_pauses_a_postpaid_project_with_history(world: BillingWorld) -> None:
    # The review: 0.01 USD granted to a postpaid project with 278 USD of history paused every cluster.
    project = world.project()
    clusters = [world.cluster(project, instance_type="8xH100", region="us-east-1", node_count=1)
                for _ in range(3)]
    for cluster in clusters:
        world.transition(cluster, "n0", "RUNNING", at("10:00:00"))
    world.run(at("13:01:00"))
    world.grant(project, "0.01", moment=at("13:02:00"))
    result = world.run(at("14:01:00"))
    assert result.clusters_paused == 0 and result.clusters_decommissioned == 0
    assert world.balance(project) == Decimal("0.01") - 4 * 3 * Decimal("31.92")  # the credit reduces it
    assert all(world.get_cluster(c).deletion_requested_at is None for c in clusters)
    assert "billing.credits_exhausted" not in world.audit_actions(project)
    with world.sessions() as session:
        assert billing_mode(session, project) == "postpaid"
        assert session.scalars(select(CreditHold)).all() == []


def test_clusters_on_paid_capacity_are_never_paused_when_prepaid_credits_run_out(world: BillingWorld) -> None:
    project = world.project(billing_mode="prepaid")
    world.grant(project, "1400.00", moment=at("09:00:00"))
    booking = world.capacity_reservation(project, instance_type="8xH100", region="us-east-1", node_count=1,
                                         duration_days=1, starts_at=at("09:30:00"))
    drawing = world.cluster(project, instance_type="8xH100", region="us-east-1", node_count=1,
                            reservation_id=booking)
    on_demand = world.cluster(project, instance_type="8xH100", region="us-east-1", node_count=1)
    for cluster in (drawing, on_demand):
        world.transition(cluster, "n0", "RUNNING", at("10:00:00"))
    # 689.472 up front leaves 710.528: 31.92 an hour on demand runs out in the 23rd hour (08:15 on day 3).
    world.run(at("10:01:00"))
    assert world.charged(project, kind="reservation") == Decimal("689.472")
    result = world.run(at("23:30:00"))
    assert result.clusters_paused == 0
    result = world.run(at("09:01:00", day=3))
    assert result.clusters_paused == 1
    with world.sessions() as session:
        held = {h.cluster_id for h in session.scalars(select(CreditHold))}
    assert held == {on_demand}  # the cluster drawing the paid reservation runs on
    world.run(at("15:02:00", day=3))  # past the decommission delay (6 h here)
    assert world.get_cluster(on_demand).deletion_requested_at is not None
    assert world.get_cluster(drawing).deletion_requested_at is None


def test_switching_a_prepaid_project_to_postpaid_resumes_what_exhaustion_paused(
    world: BillingWorld, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    project = world.project("acme", billing_mode="prepaid")
    world.grant(project, "10.00", moment=at("09:00:00"))
    cluster = world.cluster(project, instance_type="8xH100", region="us-east-1", node_count=1)
    world.transition(cluster, "n0", "RUNNING", at("10:00:00"))
    assert world.run(at("11:01:00")).clusters_paused == 1

    monkeypatch.setenv("GPUCLOUD_DATABASE_URL", database_url)
    monkeypatch.setenv("GPUCLOUD_DATA_DIR", str(tmp_path))
    assert main(["set-billing-mode", "--project", "acme", "postpaid"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "billing_mode=postpaid"
    assert main(["set-billing-mode", "--project", "nobody", "prepaid"]) == 1

    result = world.run(at("11:02:00"))
    assert result.clusters_resumed == 1
    with world.sessions() as session:
        assert session.scalars(select(CreditHold)).one().released_at is not None
        assert session.get(Project, project).billing_mode == "postpaid"  # type: ignore[union-attr]
        audit = session.scalars(
            select(AuditEvent).where(AuditEvent.action == "project.set_billing_mode")
        ).one()
        assert audit.details == {"billing_mode": "postpaid", "previous": "prepaid"}
    assert world.run(at("20:01:00")).clusters_paused == 0


def test_the_balance_shows_the_billing_mode_an_operator_set(
    admin: TestClient, tenant: Tenant, world: BillingWorld
) -> None:
    assert admin.get("/v1/billing/balance").json()["billing_mode"] == "postpaid"
    with world.sessions.begin() as session:
        row = session.get(Project, tenant.project_id)
        assert row is not None
        row.billing_mode = "prepaid"
    balance = admin.get("/v1/billing/balance").json()
    assert balance["billing_mode"] == "prepaid" and balance["prepaid"] is True


def test_after_exhaustion_only_storage_and_reserved_ips_charge_at_their_rate_at_exhaustion(
    world: BillingWorld,
) -> None:
    # The documented bound (docs/billing.md, "Billing mode and credits"): once paused, a prepaid
    # project's balance falls by its storage and reserved IP rates only, fixed at exhaustion (nothing can
    # grow until a top-up). Its example's figures are in the guide.
    project = world.project(billing_mode="prepaid")
    world.grant(project, "40.00", moment=at("09:00:00"))
    cluster = world.cluster(project, instance_type="8xH100", region="us-east-1", node_count=1)
    world.transition(cluster, "n0", "RUNNING", at("10:00:00"))
    world.volume(project, region="us-east-1", size_tib=10, created=at("10:00:00"))
    world.reserved_ip(project, region="us-east-1", moment=at("10:00:00"))
    world.run(at("11:01:00"))  # 31.92 + 1.122 + 0.005 charged, 6.953 left
    assert world.run(at("11:15:00")).clusters_paused == 1  # the slice under way would overdraw it
    world.run(at("12:01:00"))
    compute = world.charged(project, kind="compute_on_demand")
    assert compute == Decimal("31.92") * Decimal("1.25")  # metered until the pause at 11:15
    before = world.balance(project)
    world.run(at("12:01:00", day=3))
    assert world.charged(project, kind="compute_on_demand") == compute
    assert before - world.balance(project) == 24 * (Decimal("1.122") + Decimal("0.005"))
    guide = (Path(__file__).resolve().parents[3] / "docs" / "billing.md").read_text()
    assert "paused at 11:15 (31.92 x 1.25 = 39.90 of compute), then **1.127** USD an hour" in guide
    assert "27.048 USD a day" in guide


def test_prepaid_admission_refuses_a_volume_or_reserved_ip_whose_first_hour_the_balance_does_not_cover(
    admin: TestClient, tenant: Tenant, world: BillingWorld
) -> None:
    # Volumes (a create, a resize that grows one) and reserved IPs (a reserve, a cluster's address kept)
    # are admitted like clusters: their first billing slice (an hour) must fit in the prepaid balance.
    make_prepaid(world.sessions, tenant.project_id)
    assert admin.post("/v1/billing/credits", json={"amount_usd": "40"}).status_code == 201
    cluster = admin.post("/v1/clusters", json={**CLUSTER, "node_count": 1, "orchestrator": "slurm"})
    assert cluster.status_code == 201, cluster.json()
    spend(world.sessions, tenant.project_id, 38_000_000)  # 2.00 left

    big = admin.post("/v1/volumes", json={**VOLUME, "size_tib": 20})  # 20 TiB x 0.1122 = 2.244 an hour
    body = big.json()
    assert big.status_code == 402 and body["code"] == "insufficient_credits", body
    assert (body["balance_usd"], body["charge_usd"], body["committed_usd"]) == (
        "2.000000", "2.244000", "0.000000")
    assert "creating a volume charges 2.244000 USD up front" in body["detail"]
    volume = admin.post("/v1/volumes", json={**VOLUME, "size_tib": 16})  # 1.7952 an hour fits
    assert volume.status_code == 201, volume.json()
    grown = admin.patch(f"/v1/volumes/{volume.json()['id']}", json={"size_tib": 18})  # + 0.2244
    assert grown.status_code == 200, grown.json()

    spend(world.sessions, tenant.project_id, 1_998_000)  # 0.002 left
    refused = admin.patch(f"/v1/volumes/{volume.json()['id']}", json={"size_tib": 19})
    body = refused.json()
    assert refused.status_code == 402 and body["code"] == "insufficient_credits", body
    assert (body["field"], body["balance_usd"], body["charge_usd"]) == ("size_tib", "0.002000", "0.112200")
    assert admin.get(f"/v1/volumes/{volume.json()['id']}").json()["size_tib"] == 18
    assert admin.patch(f"/v1/volumes/{volume.json()['id']}", json={"name": "kept"}).status_code == 200

    address = admin.post("/v1/reserved-ips", json={"region": "us-east-1"})  # 0.005 an hour
    body = address.json()
    assert address.status_code == 402 and body["code"] == "insufficient_credits", body
    assert (body["balance_usd"], body["charge_usd"]) == ("0.002000", "0.005000")
    kept = admin.post(f"/v1/clusters/{cluster.json()['id']}/reserve-ip", json={})  # 0.0025 attached
    body = kept.json()
    assert kept.status_code == 402 and body["code"] == "insufficient_credits", body
    assert body["charge_usd"] == "0.002500"
    with world.sessions() as session:
        assert session.scalars(select(ReservedIp)).all() == []
        assert session.scalars(select(Volume)).one().size_tib == 18

    assert admin.post("/v1/billing/credits", json={"amount_usd": "1"}).status_code == 201  # 1.002
    assert admin.post("/v1/reserved-ips", json={"region": "us-east-1"}).status_code == 201
    assert admin.patch(f"/v1/volumes/{volume.json()['id']}", json={"size_tib": 19}).status_code == 200
    kept = admin.post(f"/v1/clusters/{cluster.json()['id']}/reserve-ip", json={})
    assert kept.status_code == 201, kept.json()
    guide = (Path(__file__).resolve().parents[3] / "docs" / "billing.md").read_text()
    for figure in ("20 x 0.1122 = **2.244**", "that volume grown from 18 to 19 TiB | 0.1122",
                   "a reserved IP | **0.005**", "**0.0025** (attached)"):
        assert figure in guide, figure
