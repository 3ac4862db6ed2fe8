"""The worked example of docs/billing.md, driven through the real metering job; its numbers are checked
here and must appear in the guide."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from pathlib import Path

from backend.billing.estimate import estimate_cluster_cost
from backend.domain.catalog import default_catalog
from tests.backend.billing.conftest import BillingWorld, at

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "billing.md"

EXPECTED = {
    "train_estimate_hourly": Decimal("63.84"),
    "finetune_estimate_hourly": Decimal("77.76"),
    "finetune_upfront": Decimal("1866.24"),
    "train_node_0": Decimal("74.613"),
    "train_node_2": Decimal("20.083"),
    "train_total": Decimal("169.309"),
    "finetune_extra_node": Decimal("86.40"),
    "finetune_after_term": Decimal("86.40"),
    "storage": Decimal("33.66"),
    "total": Decimal("2242.009"),
    "balance": Decimal("757.991"),
}


def play_worked_example(world: BillingWorld, teams: dict[str, str] | None = None) -> dict[str, str]:
    project = world.project(billing_mode="prepaid")
    world.grant(project, "3000.00", moment=at("09:00:00"))
    volume = world.volume(project, region="eu-north-1", size_tib=10, created=at("09:30:00"))

    labels = {name: {"team": team, "env": "prod"} for name, team in (teams or {}).items()}
    train = world.cluster(project, instance_type="8xH100", region="us-east-1", node_count=2,
                          labels=labels.get("train"))
    world.nodes(train, ["train-0", "train-1"], "PROVISIONING", at("09:40:00"))
    world.nodes(train, ["train-0", "train-1"], "RUNNING", at("10:00:00"))
    finetune = world.cluster(project, instance_type="8xH200", region="eu-north-1", node_count=2,
                             billing_type="reserved", duration_days=1, on_expiry="convert_to_on_demand",
                             labels=labels.get("finetune"))
    world.nodes(finetune, ["ft-0", "ft-1"], "RUNNING", at("10:05:00"))
    world.run(at("10:30:00"))

    world.set_node_count(train, 3)
    world.transition(train, "train-2", "PROVISIONING", at("11:30:00"))
    world.transition(train, "train-2", "RUNNING", at("11:42:30"))
    world.run(at("12:01:00"))
    world.nodes(train, ["train-0", "train-1", "train-2"], "DESTROYING", at("12:20:15"))
    world.nodes(train, ["train-0", "train-1", "train-2"], "DESTROYED", at("12:25:00"))

    world.set_node_count(finetune, 3)
    world.transition(finetune, "ft-2", "RUNNING", at("14:00:00"))
    world.run(at("15:00:00"))
    world.set_node_count(finetune, 2)
    world.transition(finetune, "ft-2", "DESTROYING", at("16:00:00"))

    moment = at("16:00:00")
    while moment < at("11:00:00", day=3):  # the job keeps running every hour
        moment += timedelta(hours=1)
        world.run(moment)
    world.nodes(finetune, ["ft-0", "ft-1"], "DESTROYING", at("11:05:00", day=3))
    world.run(at("12:00:00", day=3))
    world.delete_volume(volume, at("15:30:00", day=3))
    world.run(at("16:00:00", day=3))
    return {"project": project, "train": train, "finetune": finetune, "volume": volume}


def test_worked_example_numbers(world: BillingWorld) -> None:
    catalog = default_catalog()
    train_spec = {"instance_type": "8xH100", "region": "us-east-1", "node_count": 2}
    assert estimate_cluster_cost(train_spec, catalog).hourly_usd == EXPECTED["train_estimate_hourly"]
    finetune_spec = {"instance_type": "8xH200", "region": "eu-north-1", "node_count": 2,
                     "billing": {"type": "reserved", "duration_days": 1, "on_expiry": "convert_to_on_demand"}}
    finetune_estimate = estimate_cluster_cost(finetune_spec, catalog)
    assert finetune_estimate.hourly_usd == EXPECTED["finetune_estimate_hourly"]
    assert finetune_estimate.upfront_usd == EXPECTED["finetune_upfront"]

    ids = play_worked_example(world)
    project = ids["project"]
    assert world.charged(project, resource_id=f"nod_{ids['train'][-12:]}_train-0") == EXPECTED["train_node_0"]
    assert world.charged(project, resource_id=f"nod_{ids['train'][-12:]}_train-2") == EXPECTED["train_node_2"]
    assert world.charged(project, cluster_id=ids["train"]) == EXPECTED["train_total"]
    upfront = world.charged(project, cluster_id=ids["finetune"], kind="reservation")
    assert upfront == EXPECTED["finetune_upfront"]
    assert (world.charged(project, resource_id=f"nod_{ids['finetune'][-12:]}_ft-2")
            == EXPECTED["finetune_extra_node"])
    after_term = world.charged(project, cluster_id=ids["finetune"], kind="compute_on_demand") - EXPECTED[
        "finetune_extra_node"]
    assert after_term == EXPECTED["finetune_after_term"]
    assert world.charged(project, kind="storage") == EXPECTED["storage"]
    assert world.charged(project) == EXPECTED["total"]
    assert world.balance(project) == EXPECTED["balance"]
    actions = world.audit_actions(project)
    assert "billing.reservation_started" in actions
    assert "billing.reservation_expired" in actions


def test_worked_example_is_idempotent_across_reruns_and_restarts(world: BillingWorld) -> None:
    ids = play_worked_example(world)
    before = world.records(ids["project"])
    again = world.run(at("16:00:30", day=3))
    assert again.records_charged == 0
    assert [r.idempotency_key for r in world.records(ids["project"])] == [r.idempotency_key for r in before]
    assert world.balance(ids["project"]) == EXPECTED["balance"]


def test_the_guide_shows_the_numbers_the_tests_check() -> None:
    text = GUIDE.read_text(encoding="utf-8")
    for name, value in EXPECTED.items():
        shown = f"{value:,.2f}" if value == value.quantize(Decimal("0.01")) else f"{value:,}"
        assert shown in text, f"docs/billing.md does not show {name} = {shown}"
