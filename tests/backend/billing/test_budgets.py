"""Budgets: each alert threshold crossed once per month (alert on the budget and an audit event),
label filters, block_new refusing cluster creates naming the budget, and the API's bad input."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient

from backend.store.models import Cluster
from tests.backend.billing.conftest import BillingWorld, at
from tests.backend.billing.test_worked_example import GUIDE
from tests.backend.conftest import Tenant


@pytest.fixture
def shared(world: BillingWorld, tenant: Tenant, monkeypatch: pytest.MonkeyPatch) -> BillingWorld:
    """The billing world in the tenant's project, with the API and admission on the world's clock."""
    monkeypatch.setattr(world, "project", lambda name="acme", billing_mode="postpaid": tenant.project_id)
    monkeypatch.setattr("backend.api.budgets._clock", world.clock)
    monkeypatch.setattr("backend.services.clusters.utcnow", world.clock.now)
    return world


def _budget(admin: TestClient, **body: Any) -> dict[str, Any]:
    response = admin.post("/v1/budgets", json=body)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def _labelled(world: BillingWorld, project: str, team: str, start: datetime) -> str:
    cluster = world.cluster(project, instance_type="8xH100", region="us-east-1", node_count=2)
    with world.sessions.begin() as session:
        row = session.get(Cluster, cluster)
        assert row is not None
        row.labels = {"team": team}
    world.nodes(cluster, ["n-0", "n-1"], "RUNNING", start)
    return cluster


def test_budget_thresholds_cross_once_each_with_alerts_and_audit_events(
    admin: TestClient, shared: BillingWorld, tenant: Tenant
) -> None:
    nlp = _budget(
        admin,
        name="nlp monthly",
        amount_usd="100",
        label_filter={"key": "team", "value": "nlp"},
        thresholds=[100, 50, 80],
        action="block_new",
    )
    everything = _budget(admin, name="project", amount_usd="1000.00")
    assert (nlp["thresholds"], nlp["amount_usd"], nlp["spent_usd"]) == (
        [50, 80, 100],
        "100.000000",
        "0.000000",
    )
    assert (everything["action"], everything["thresholds"], everything["label_filter"]) == (
        "notify",
        [50, 80, 100],
        None,
    )
    _labelled(shared, tenant.project_id, "nlp", at("10:00:00"))  # 63.84 USD an hour
    shared.run(at("10:30:00"))
    shared.run(at("11:01:05"))  # 10:00-11:00 charged: 63.84 = 63.84 %
    body = admin.get(f"/v1/budgets/{nlp['id']}").json()
    assert body["spent_usd"] == "63.840000"
    assert [(a["threshold_percent"], a["spent_usd"]) for a in body["alerts"]] == [(50, "63.840000")]
    for moment in ("12:01:05", "12:30:00", "13:01:05"):  # 127.68 then 191.52: 80 and 100 crossed once
        shared.run(at(moment))
    body = admin.get(f"/v1/budgets/{nlp['id']}").json()
    assert [(a["period"], a["threshold_percent"], a["spent_usd"]) for a in body["alerts"]] == [
        ("2026-03", 50, "63.840000"),
        ("2026-03", 80, "127.680000"),
        ("2026-03", 100, "127.680000"),
    ]
    events = admin.get("/v1/audit-events", params={"action": "billing.budget_threshold_crossed"}).json()
    crossed = [(e["resource_id"], e["details"]["threshold_percent"]) for e in events["items"]]
    assert sorted(crossed) == [(nlp["id"], 50), (nlp["id"], 80), (nlp["id"], 100)]  # the project budget: 19 %
    assert admin.get(f"/v1/budgets/{everything['id']}").json()["spent_usd"] == "191.520000"


def test_budget_block_new_refuses_a_relabel_into_it_a_scale_up_and_a_minimum_raise_under_it(
    admin: TestClient, shared: BillingWorld, tenant: Tenant
) -> None:
    # The review sidestepped block_new by creating under another label and relabelling, and by raising
    # an autoscaling minimum.
    base = {"region": "us-east-1", "instance_type": "8xH100", "orchestrator": "slurm"}
    nlp_fixed = admin.post("/v1/clusters", json={**base, "name": "fixed", "node_count": 1,
                                                 "labels": {"team": "nlp"}}).json()
    nlp_auto = admin.post("/v1/clusters", json={**base, "name": "auto", "labels": {"team": "nlp"},
                                                "autoscaling": {"min_nodes": 1, "max_nodes": 4}}).json()
    vision = admin.post("/v1/clusters", json={**base, "name": "other", "node_count": 1,
                                              "labels": {"team": "vision"}}).json()
    nlp = _budget(admin, name="nlp", amount_usd="60", label_filter={"key": "team", "value": "nlp"},
                  action="block_new")
    _labelled(shared, tenant.project_id, "nlp", at("10:00:00"))
    shared.run(at("11:01:05"))  # 63.84 of 60 spent

    relabel = admin.patch(f"/v1/clusters/{vision['id']}", json={"labels": {"team": "nlp"}})
    assert relabel.status_code == 402 and relabel.json()["budget_id"] == nlp["id"], relabel.text
    assert "relabelling a cluster into it is refused" in relabel.json()["detail"]
    scale = admin.patch(f"/v1/clusters/{nlp_fixed['id']}", json={"node_count": 2})
    assert scale.status_code == 402 and scale.json()["code"] == "budget_exceeded", scale.text
    raise_min = admin.patch(f"/v1/clusters/{nlp_auto['id']}",
                            json={"autoscaling": {"min_nodes": 2, "max_nodes": 4}})
    assert raise_min.status_code == 402 and "autoscaling.min_nodes" in raise_min.json()["detail"]
    assert admin.get(f"/v1/clusters/{vision['id']}").json()["labels"] == {"team": "vision"}  # nothing kept

    # What adds no spend under the budget still goes through: labels within the team, leaving it, the
    # range's maximum, and growth of another team.
    within = admin.patch(f"/v1/clusters/{nlp_fixed['id']}", json={"labels": {"team": "nlp", "env": "dev"}})
    assert within.status_code == 200, within.text
    assert admin.patch(f"/v1/clusters/{nlp_auto['id']}",
                       json={"autoscaling": {"min_nodes": 1, "max_nodes": 3}}).status_code == 200
    assert admin.patch(f"/v1/clusters/{vision['id']}", json={"node_count": 2}).status_code == 200
    leave = admin.patch(f"/v1/clusters/{nlp_fixed['id']}", json={"labels": {"team": "vision"}})
    assert leave.status_code == 200, leave.text


def test_budget_block_new_refuses_creates_under_it_naming_the_budget(
    admin: TestClient, shared: BillingWorld, tenant: Tenant
) -> None:
    nlp = _budget(
        admin, name="nlp", amount_usd="60", label_filter={"key": "team", "value": "nlp"}, action="block_new"
    )
    _budget(admin, name="vision", amount_usd="60", label_filter={"key": "team", "value": "vision"})
    _labelled(shared, tenant.project_id, "nlp", at("10:00:00"))
    _labelled(shared, tenant.project_id, "vision", at("10:00:00"))
    shared.run(at("11:01:05"))
    spec = {"name": "more", "region": "us-east-1", "instance_type": "1xH100"}
    refused = admin.post("/v1/clusters", json={**spec, "labels": {"team": "nlp"}})
    assert refused.status_code == 402, refused.text
    problem = refused.json()
    assert problem["code"] == "budget_exceeded" and problem["budget_id"] == nlp["id"]
    assert "budget 'nlp'" in problem["detail"] and "63.840000 USD in 2026-03" in problem["detail"]
    # Other teams (a notify budget, also spent) and unlabelled clusters are not blocked.
    assert admin.post("/v1/clusters", json={**spec, "labels": {"team": "vision"}}).status_code == 201
    assert admin.post("/v1/clusters", json={**spec, "name": "plain"}).status_code == 201
    # Raising the amount lifts the block at once.
    raised = admin.patch(f"/v1/budgets/{nlp['id']}", json={"amount_usd": "500"})
    assert raised.status_code == 200 and raised.json()["label_filter"] == {"key": "team", "value": "nlp"}
    assert (
        admin.post("/v1/clusters", json={**spec, "name": "again", "labels": {"team": "nlp"}}).status_code
        == 201
    )


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "b", "amount_usd": "0"}, "amount_usd"),
        ({"name": "b", "amount_usd": "10.001"}, "amount_usd"),
        ({"name": "b", "amount_usd": "10", "thresholds": []}, "thresholds"),
        ({"name": "b", "amount_usd": "10", "thresholds": [0]}, "thresholds[0]"),
        ({"name": "b", "amount_usd": "10", "action": "stop"}, "action"),
        (
            {"name": "b", "amount_usd": "10", "label_filter": {"key": "Team", "value": "x"}},
            "label_filter.key",
        ),
        ({"amount_usd": "10"}, "name"),
    ],
)
def test_budget_bad_input_names_the_field(admin: TestClient, body: dict[str, Any], field: str) -> None:
    response = admin.post("/v1/budgets", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["field"] == field


def test_budget_crud_etag_and_other_projects(admin: TestClient, member: TestClient) -> None:
    budget = _budget(admin, name="b", amount_usd="10")
    path = f"/v1/budgets/{budget['id']}"
    etag = admin.get(path).headers["ETag"]
    assert admin.patch(path, json={"name": "c"}, headers={"If-Match": '"stale"'}).status_code == 412
    updated = admin.patch(path, json={"name": "c", "thresholds": [90]}, headers={"If-Match": etag})
    assert updated.status_code == 200 and (updated.json()["name"], updated.json()["thresholds"]) == (
        "c",
        [90],
    )
    assert [b["id"] for b in member.get("/v1/budgets").json()["items"]] == [budget["id"]]
    assert member.post("/v1/budgets", json={"name": "x", "amount_usd": "1"}).status_code == 403
    assert admin.delete(path).status_code == 204
    assert admin.get(path).status_code == 404
    assert admin.get("/v1/budgets/bud_0000000000000000000000000a").status_code == 404


def test_budget_example_numbers_are_in_the_guide() -> None:
    guide = GUIDE.read_text().split("## Budgets", 1)[1]
    for text in ("**63.84**", "**100** USD", "50 % at 63.84", "80 % and 100 % at 127.68", "191.52"):
        assert text in guide, text
