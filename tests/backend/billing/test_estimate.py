from decimal import Decimal

import pytest

from backend.billing.estimate import estimate_cluster_cost
from backend.billing.pricing import PricingError
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
