"""Spot metering (docs/billing.md "Spot capacity"): each node at the rate of the capacity it ran on, per
second, through the real metering job: a spot cluster with fallback whose spot node is preempted, an
on-demand node standing in, and spot re-acquired. The guide shows the numbers checked here."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

from backend.billing.pricing_catalog import default_price_book
from tests.backend.billing.conftest import BillingWorld, at

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "billing.md"

EXPECTED = {
    "spot_gpu_hour": Decimal("1.596"),
    "batch_0_spot": Decimal("16.492"),  # 10:00:00 -> 11:17:30, 4,650 s x 12.768 USD/h
    "batch_1_spot": Decimal("38.304"),  # 10:00:00 -> 13:00:00, 10,800 s x 12.768 USD/h
    "batch_2_on_demand": Decimal("37.772"),  # 11:24:00 -> 12:35:00, 4,260 s x 31.92 USD/h
    "batch_3_spot": Decimal("5.32"),  # 12:35:00 -> 13:00:00, 1,500 s x 12.768 USD/h
    "batch_total": Decimal("97.888"),
}


def play_spot_example(world: BillingWorld) -> dict[str, str]:
    project = world.project()
    batch = world.cluster(project, instance_type="8xH100", region="us-east-1", node_count=2)
    world.nodes(batch, ["batch-0", "batch-1"], "PROVISIONING", at("09:45:00"), "spot")
    world.nodes(batch, ["batch-0", "batch-1"], "RUNNING", at("10:00:00"), "spot")
    # Notice at 11:15:30, reclaimed at 11:17:30; spot is short, an on-demand node stands in.
    world.transition(batch, "batch-0", "DESTROYING", at("11:17:30"))
    world.transition(batch, "batch-2", "PROVISIONING", at("11:17:30"), "on_demand")
    world.transition(batch, "batch-2", "RUNNING", at("11:24:00"))
    world.run(at("12:01:00"))
    # Spot returns: a spot node is re-acquired; once it runs, the stand-in goes.
    world.transition(batch, "batch-3", "PROVISIONING", at("12:20:00"), "spot")
    world.transition(batch, "batch-3", "RUNNING", at("12:35:00"))
    world.transition(batch, "batch-2", "DESTROYING", at("12:35:00"))
    world.nodes(batch, ["batch-1", "batch-3"], "DESTROYING", at("13:00:00"))
    world.run(at("14:00:00"))
    return {"project": project, "batch": batch}


def test_spot_metering_charges_each_node_at_its_capacity_rate(world: BillingWorld) -> None:
    prices = default_price_book()
    assert prices.spot_gpu_hour("8xH100", "us-east-1") == EXPECTED["spot_gpu_hour"]
    ids = play_spot_example(world)
    project, node = ids["project"], f"nod_{ids['batch'][-12:]}_"
    lines = (("batch-0", "compute_spot", "batch_0_spot"), ("batch-1", "compute_spot", "batch_1_spot"),
             ("batch-2", "compute_on_demand", "batch_2_on_demand"),
             ("batch-3", "compute_spot", "batch_3_spot"))
    for name, kind, key in lines:
        records = world.records_of(node + name)
        assert {r.kind for r in records} == {kind}, name
        assert sum(r.amount_micros for r in records) / Decimal(1_000_000) == EXPECTED[key], name
    batch_0 = world.records_of(node + "batch-0")
    assert [r.seconds for r in batch_0] == [3600, 1050]  # hour slices, per second
    assert all(r.unit_price_usd == EXPECTED["spot_gpu_hour"] for r in batch_0)
    assert world.charged(project, cluster_id=ids["batch"]) == EXPECTED["batch_total"]


def test_spot_metering_guide_shows_the_numbers_the_tests_check() -> None:
    text = GUIDE.read_text(encoding="utf-8")
    for name, value in EXPECTED.items():
        assert f"{value:,}" in text, f"docs/billing.md does not show {name} = {value:,}"
