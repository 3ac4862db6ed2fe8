from decimal import Decimal

import pytest

from backend.billing.estimate import ClusterShape, cluster_price, estimate_cluster_cost
from backend.billing.pricing import PricingError
from backend.billing.pricing_catalog import default_price_book
from backend.domain.catalog import default_catalog


def test_on_demand_estimate_is_nodes_times_gpus_times_price() -> None:
    estimate = estimate_cluster_cost(
        {"instance_type": "8xH100", "region": "us-east-1", "node_count": 2}, default_catalog()
    )
    assert estimate.hourly_usd == Decimal("63.84")
    assert estimate.upfront_usd is None
    assert estimate.gpu_count == 16


def test_reserved_estimate_has_discounted_rate_and_upfront_term() -> None:
    spec = {
        "instance_type": "8xH200",
        "region": "eu-north-1",
        "node_count": 2,
        "billing": {"type": "reserved", "duration_days": 1, "on_expiry": "convert_to_on_demand"},
    }
    estimate = estimate_cluster_cost(spec, default_catalog())
    assert estimate.hourly_usd == Decimal("77.76")  # 16 GPUs x 5.40 x 0.90
    assert estimate.upfront_usd == Decimal("1866.24")  # x 24 h
    assert estimate.reserved_discount == Decimal("0.10")


def test_reserved_estimate_bills_nodes_beyond_the_reservation_on_demand() -> None:
    spec = {
        "instance_type": "8xH200",
        "region": "eu-north-1",
        "node_count": 3,
        "billing": {"type": "reserved", "duration_days": 1},
    }
    estimate = estimate_cluster_cost(spec, default_catalog(), reserved_node_count=2)
    assert estimate.hourly_usd == Decimal("77.76") + Decimal("43.20")
    assert estimate.upfront_usd == Decimal("1866.24")  # the reservation's size, not the new one
    scaled_down = estimate_cluster_cost({**spec, "node_count": 1}, default_catalog(), reserved_node_count=2)
    assert scaled_down.hourly_usd == Decimal("38.88")
    assert scaled_down.upfront_usd == Decimal("1866.24")


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"region": "us-east-1"}, "instance_type"),
        ({"instance_type": "8xH100"}, "region"),
        ({"instance_type": "8xH100", "region": "us-east-1", "node_count": 0}, "node_count"),
        ({"instance_type": "8xH100", "region": "us-east-1", "billing": {"type": "reserved"}},
         "billing.duration_days"),
        ({"instance_type": "8xH100", "region": "us-east-1",
          "billing": {"type": "reserved", "duration_days": 120}}, "billing.duration_days"),
    ],
)
def test_estimate_errors_name_the_field(spec: dict[str, object], field: str) -> None:
    with pytest.raises(PricingError) as err:
        estimate_cluster_cost(spec, default_catalog())
    assert err.value.field == field


H100 = {"instance_type": "8xH100", "region": "us-east-1", "node_count": 2}


def test_cluster_price_spot_is_the_spot_rate() -> None:
    estimate = estimate_cluster_cost({**H100, "capacity_type": "spot"}, default_catalog())
    # Priced on-demand (63.84) before: the meter charges 2 x 8 x 1.596.
    assert (estimate.hourly_usd, estimate.max_hourly_usd) == (Decimal("25.536"), Decimal("25.536"))
    assert estimate.gpu_hour_usd == Decimal("1.596") and estimate.capacity_type == "spot"


def test_cluster_price_spot_with_fallback_is_spot_with_the_on_demand_ceiling() -> None:
    estimate = estimate_cluster_cost({**H100, "capacity_type": "spot_with_fallback"}, default_catalog())
    assert (estimate.hourly_usd, estimate.max_hourly_usd) == (Decimal("25.536"), Decimal("63.84"))


def test_cluster_price_drawn_reservation_is_prepaid() -> None:
    for capacity_type in ("on_demand", "spot"):
        spec = {**H100, "capacity_type": capacity_type, "reservation_id": "res_x"}
        estimate = estimate_cluster_cost(spec, default_catalog())
        assert estimate.hourly_usd == estimate.max_hourly_usd == estimate.gpu_hour_usd == Decimal(0)
        assert estimate.upfront_usd is None


def test_cluster_price_reserved_term_ceiling_is_its_hourly_rate() -> None:
    spec = {**H100, "billing": {"type": "reserved", "duration_days": 30}}
    estimate = estimate_cluster_cost(spec, default_catalog())
    assert estimate.hourly_usd == estimate.max_hourly_usd == Decimal("47.88")  # 16 x 3.99 x 0.75
    assert estimate.upfront_usd == Decimal("34473.6")


def test_cluster_price_refuses_an_unknown_capacity_type() -> None:
    shape = ClusterShape("8xH100", "us-east-1", 1, capacity_type="preemptible")
    with pytest.raises(PricingError) as err:
        cluster_price(shape, default_price_book())
    assert err.value.field == "capacity_type"
