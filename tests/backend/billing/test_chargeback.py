"""Chargeback: usage summed per team label, cluster or day, with totals equal to the ungrouped total and
a CSV export, on the worked example of docs/billing.md (whose chargeback numbers are checked here)."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from fastapi.testclient import TestClient

from backend.store.models import Cluster, ReservedIp, Volume
from tests.backend.billing.conftest import BillingWorld, at
from tests.backend.billing.test_worked_example import GUIDE, play_worked_example
from tests.backend.conftest import Tenant

BY_TEAM = {"nlp": "169.309000", "vision": "2039.040000", None: "33.660000"}
BY_DAY = {"2026-03-02": "2138.218000", "2026-03-03": "103.791000"}
TOTAL = "2242.009000"


@pytest.fixture
def example(world: BillingWorld, tenant: Tenant, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The worked example played in the tenant's project, `train` labelled team=nlp, `finetune` vision."""
    monkeypatch.setattr(world, "project", lambda name="acme", billing_mode="postpaid": tenant.project_id)
    return play_worked_example(world, teams={"train": "nlp", "finetune": "vision"})


def _get(client: TestClient, **params: str) -> Any:
    response = client.get("/v1/billing/usage", params=params)
    assert response.status_code == 200, response.text
    return response.json() if response.headers["content-type"].startswith("application/json") else response


def _all_lines(client: TestClient) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    params = {"page_size": "200"}
    while True:
        page = _get(client, **params)
        lines += page["items"]
        if not page["next_page_token"]:
            return lines
        params["page_token"] = page["next_page_token"]


def test_chargeback_by_team_label_adds_up_to_the_ungrouped_total(
    member: TestClient, example: dict[str, str]
) -> None:
    body = _get(member, group_by="label:team")
    assert {g["key"]: g["amount_usd"] for g in body["groups"]} == BY_TEAM
    assert body["total_usd"] == TOTAL
    lines = _all_lines(member)
    assert body["line_count"] == len(lines)
    assert sum(Decimal(item["amount_usd"]) for item in lines) == Decimal(TOTAL)
    assert sum(Decimal(g["amount_usd"]) for g in body["groups"]) == Decimal(TOTAL)
    # The guide shows this very answer.
    for group in body["groups"]:
        shown = f'"amount_usd": "{group["amount_usd"]}", "line_count": {group["line_count"]}'
        assert shown in GUIDE.read_text(), shown
    assert f'"total_usd": "{TOTAL}", "line_count": {len(lines)}' in GUIDE.read_text()


def test_chargeback_by_cluster_and_day_with_filters(member: TestClient, example: dict[str, str]) -> None:
    by_cluster = _get(member, group_by="cluster")
    amounts = {g["key"]: (g["name"], g["amount_usd"]) for g in by_cluster["groups"]}
    assert amounts[example["train"]] == ("c1", "169.309000")
    assert amounts[example["finetune"]] == ("c2", "2039.040000")
    assert amounts[None] == (None, "33.660000")
    by_day = _get(member, group_by="day")
    assert {g["key"]: g["amount_usd"] for g in by_day["groups"]} == BY_DAY
    assert by_day["total_usd"] == TOTAL
    # Filters apply before grouping: only storage lines.
    storage = _get(member, group_by="label:team", kind="storage")
    assert storage["groups"] == [{"key": None, "name": None, "amount_usd": "33.660000", "line_count": 31}]


def test_chargeback_csv_exports_parse_and_match_the_json(member: TestClient, example: dict[str, str]) -> None:
    response = _get(member, group_by="label:team", format="csv")
    assert response.headers["content-type"].startswith("text/csv")
    assert "attachment" in response.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert {r["key"] or None: r["amount_usd"] for r in rows} == BY_TEAM
    lines = list(csv.DictReader(io.StringIO(_get(member, format="csv").text)))
    assert sum(Decimal(r["amount_usd"]) for r in lines) == Decimal(TOTAL)
    assert {r["kind"] for r in lines} == {"compute_on_demand", "compute_reserved", "reservation", "storage"}


@pytest.mark.parametrize("group_by", ["team", "label:", "label:Team", "week"])
def test_chargeback_bad_group_by_names_the_field(member: TestClient, group_by: str) -> None:
    response = member.get("/v1/billing/usage", params={"group_by": group_by})
    assert response.status_code == 422
    problem = response.json()
    assert problem["errors"][0]["field"] == "group_by" and "label:<key>" in problem["errors"][0]["message"]


def test_chargeback_numbers_are_in_the_guide() -> None:
    text = GUIDE.read_text()
    for amount in ("169.309", "2,039.04", "33.66", "2,138.218", "103.791", "2,242.009"):
        assert amount in text.split("## Chargeback", 1)[1], amount


def test_chargeback_reads_each_lines_labels_so_relabelling_moves_no_past_spend(
    member: TestClient, world: BillingWorld, tenant: Tenant
) -> None:
    # The review: relabelling a cluster moved its past spend between teams, and the reservation, the
    # reserved IP lines and storage fell under null.
    project = tenant.project_id
    nlp, vision = {"team": "nlp"}, {"team": "vision"}
    cluster = world.cluster(project, instance_type="8xH100", region="us-east-1", node_count=1, labels=nlp)
    world.transition(cluster, "n0", "RUNNING", at("10:00:00"))
    volume = world.volume(project, region="us-east-1", size_tib=1, created=at("10:00:00"), labels=nlp)
    address = world.reserved_ip(project, region="us-east-1", moment=at("10:00:00"), labels=nlp)
    world.capacity_reservation(project, instance_type="8xH100", region="us-east-1", node_count=1,
                               duration_days=1, starts_at=at("10:00:00"), labels=nlp)
    world.run(at("11:01:00"))  # 10:00-11:00 charged under nlp
    world.relabel(Cluster, cluster, vision)
    world.relabel(Volume, volume, vision)
    world.relabel(ReservedIp, address, vision)
    world.delete_volume(volume, at("11:30:00"))  # its last slice is charged after the row is gone
    world.reserved_ip_event(address, "released", at("11:30:00"))
    world.run(at("12:01:00"))  # 11:00-12:00 charged under vision

    body = _get(member, group_by="label:team")
    teams = {g["key"]: Decimal(g["amount_usd"]) for g in body["groups"]}
    hour = Decimal("31.92") + Decimal("0.1122") + Decimal("0.005")
    half_hour = Decimal("0.0561") + Decimal("0.0025")
    assert teams == {"nlp": Decimal("689.472") + hour, "vision": Decimal("31.92") + half_hour}
    lines = _all_lines(member)
    assert all(line["labels"] in (nlp, vision) for line in lines)
    assert {line["kind"] for line in lines if line["labels"] == nlp} == {
        "reservation", "compute_on_demand", "storage", "reserved_ip"
    }


def test_volume_labels_given_through_the_api_reach_each_storage_line(
    admin: TestClient, member: TestClient, world: BillingWorld
) -> None:
    created = admin.post("/v1/volumes", json={"name": "data", "region": "us-east-1", "size_tib": 1,
                                              "labels": {"team": "nlp"}})
    assert created.status_code == 201 and created.json()["labels"] == {"team": "nlp"}, created.text
    later = datetime.now(UTC) + timedelta(hours=2)
    world.run(later)
    relabelled = admin.patch(f"/v1/volumes/{created.json()['id']}", json={"labels": {"team": "vision"}})
    assert relabelled.status_code == 200 and relabelled.json()["labels"] == {"team": "vision"}
    world.run(later)  # the same moment: nothing new is final, and the lines charged stay nlp's
    groups = _get(member, group_by="label:team")["groups"]
    assert [g["key"] for g in groups] == ["nlp"] and groups[0]["line_count"] >= 1
