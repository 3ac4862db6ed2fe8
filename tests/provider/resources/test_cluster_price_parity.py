"""The provider's plan-time price is the backend's one price function (`backend.billing.estimate`):
for every capacity type, a drawn reservation and reserved terms of each tier, the plan's
`estimated_hourly_cost_usd`, the figure `max_hourly_cost_usd` is held to and a term's up-front charge
equal what the API computes (and the meter charges), from the instance-type listing the API serves.
Two catalogs: the built-in one and one whose discounts make every rounding step matter."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from backend.api.catalog import instance_types
from backend.billing.estimate import ClusterShape, cluster_price
from backend.billing.pricing_catalog import price_book_from_catalog
from backend.domain.catalog import Catalog, _builtin_catalog, catalog_from_dict, catalog_to_dict
from provider.resources import cluster_checks as checks
from provider.resources.cluster_checks import CostEstimate, estimate


def _odd_catalog() -> Catalog:
    data = catalog_to_dict(_builtin_catalog())
    data["spot_discount"] = "0.6173"
    data["reserved_discounts"] = {"1": "0.1237", "7": "0.1913", "30": "0.2671", "90": "0.3333"}
    for itype in data["instance_types"]:
        itype["on_demand_usd_per_gpu_hour"] = "3.987"
    return catalog_from_dict(data)


CATALOGS = {"builtin": _builtin_catalog(), "odd": _odd_catalog()}


def provider_catalog(catalog: Catalog) -> checks.Catalog:
    """The provider's view of the catalog, from the JSON the API's listing writes."""
    listed = [t.model_dump(mode="json") for t in instance_types(catalog, {})]
    return checks.Catalog(regions={r.name: {"name": r.name} for r in catalog.regions},
                          instance_types={t["name"]: t for t in listed})


def planned(catalog: Catalog, **values: Any) -> CostEstimate:
    plan = {"billing": {"type": "on_demand", "duration_days": None}, "reservation_id": None,
            "capacity_type": "on_demand", **values}
    cost = estimate(provider_catalog(catalog), plan)
    assert cost is not None
    return cost


@pytest.mark.parametrize("catalog_name", sorted(CATALOGS))
@pytest.mark.parametrize("capacity", ["on_demand", "spot", "spot_with_fallback"])
@pytest.mark.parametrize("nodes", [1, 3])
def test_plan_price_equals_backend_cluster_price_per_capacity_type(
    catalog_name: str, capacity: str, nodes: int
) -> None:
    catalog = CATALOGS[catalog_name]
    for itype in catalog.instance_types:
        region = catalog.regions[0].name
        shape = ClusterShape(itype.name, region, nodes, capacity)
        backend = cluster_price(shape, price_book_from_catalog(catalog))
        cost = planned(catalog, instance_type=itype.name, node_count=nodes, capacity_type=capacity)
        assert Decimal(cost.hourly_usd) == backend.hourly_usd, (itype.name, capacity)
        assert Decimal(cost.ceiling_usd) == backend.max_hourly_usd, (itype.name, capacity)
        assert cost.upfront_usd is None


def test_plan_price_of_spot_is_the_spot_rate_not_on_demand() -> None:
    cost = planned(_builtin_catalog(), instance_type="8xH100", node_count=1, capacity_type="spot")
    assert cost.hourly_usd == Decimal("12.768") and cost.ceiling_usd == Decimal("12.768")  # 31.92 x 0.4
    fallback = planned(_builtin_catalog(), instance_type="8xH100", node_count=1,
                       capacity_type="spot_with_fallback")
    assert fallback.hourly_usd == Decimal("12.768") and fallback.ceiling_usd == Decimal("31.92")


@pytest.mark.parametrize("catalog_name", sorted(CATALOGS))
@pytest.mark.parametrize("capacity", ["on_demand", "spot", "spot_with_fallback"])
def test_plan_price_of_a_drawn_reservation_is_zero_as_the_backend(catalog_name: str, capacity: str) -> None:
    catalog = CATALOGS[catalog_name]
    shape = ClusterShape("8xH100", "us-east-1", 2, capacity, draws_reservation=True)
    backend = cluster_price(shape, price_book_from_catalog(catalog))
    cost = planned(catalog, instance_type="8xH100", node_count=2, capacity_type=capacity,
                   reservation_id="rsv_1")
    assert Decimal(cost.hourly_usd) == backend.hourly_usd == 0
    assert Decimal(cost.ceiling_usd) == backend.max_hourly_usd == 0


@pytest.mark.parametrize("catalog_name", sorted(CATALOGS))
@pytest.mark.parametrize("itype", ["8xH200", "1xH100"])
def test_plan_price_on_a_host_pool_is_zero_as_the_backend(catalog_name: str, itype: str) -> None:
    # Issue 32: the project's own servers carry no compute charge.
    catalog = CATALOGS[catalog_name]
    shape = ClusterShape(itype, "us-east-1", 2, own_hosts=True)
    backend = cluster_price(shape, price_book_from_catalog(catalog))
    cost = planned(catalog, instance_type=itype, node_count=2, host_pool_id="hpl_1")
    assert Decimal(cost.hourly_usd) == backend.hourly_usd == 0
    assert Decimal(cost.ceiling_usd) == backend.max_hourly_usd == 0


@pytest.mark.parametrize("catalog_name", sorted(CATALOGS))
@pytest.mark.parametrize("days", [1, 6, 7, 29, 30, 59, 60, 89, 90])
@pytest.mark.parametrize("nodes", [1, 5])
def test_plan_price_of_a_reserved_term_equals_backend_hourly_and_upfront(
    catalog_name: str, days: int, nodes: int
) -> None:
    catalog = CATALOGS[catalog_name]
    for itype in catalog.instance_types:
        shape = ClusterShape(itype.name, "us-east-1", nodes, reserved_days=days)
        backend = cluster_price(shape, price_book_from_catalog(catalog))
        cost = planned(catalog, instance_type=itype.name, node_count=nodes,
                       billing={"type": "reserved", "duration_days": days})
        assert Decimal(cost.hourly_usd) == backend.hourly_usd, (itype.name, days)
        assert Decimal(cost.ceiling_usd) == backend.max_hourly_usd
        assert cost.upfront_usd is not None and Decimal(cost.upfront_usd) == backend.upfront_usd


def test_plan_price_unknown_capacity_type_or_listing_without_spot_is_left_to_apply() -> None:
    from provider.cty import UNKNOWN

    catalog = provider_catalog(_builtin_catalog())
    plan = {"instance_type": "8xH100", "node_count": 1, "billing": {"type": "on_demand"},
            "reservation_id": None, "capacity_type": UNKNOWN}
    assert estimate(catalog, plan) is None
    older = checks.Catalog(regions=catalog.regions, instance_types={
        "8xH100": {k: v for k, v in catalog.instance_types["8xH100"].items() if k != "spot_usd_per_gpu_hour"}
    })
    assert estimate(older, {**plan, "capacity_type": "spot"}) is None  # never the on-demand rate
