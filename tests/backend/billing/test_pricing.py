from decimal import Decimal

import pytest
from fastapi.testclient import TestClient

from backend.billing.pricing import InstancePrice, PriceBook, PricingError, discount_tiers
from backend.billing.pricing_catalog import as_price_book, default_price_book, price_book_from_catalog
from backend.domain.catalog import default_catalog


def test_price_book_from_the_default_catalog() -> None:
    prices = price_book_from_catalog(default_catalog())
    assert prices.on_demand_gpu_hour("8xH100", "us-east-1") == Decimal("3.99")
    assert prices.gpus_per_node("8xH100") == 8
    assert prices.node_hour("8xH100", "us-east-1") == Decimal("31.92")
    assert prices.storage_tib_hour("eu-north-1") == Decimal("0.1122")
    assert prices.reserved_discount("8xH200", 1) == Decimal("0.10")
    assert prices.reserved_discount("8xH200", 29) == Decimal("0.15")
    assert prices.reserved_discount("8xH200", 90) == Decimal("0.35")
    assert prices.reserved_gpu_hour("8xH200", "eu-north-1", 1) == Decimal("4.86")


def test_unknown_names_blame_the_field() -> None:
    prices = default_price_book()
    with pytest.raises(PricingError) as err:
        prices.on_demand_gpu_hour("9xH900", "us-east-1")
    assert err.value.field == "instance_type"
    with pytest.raises(PricingError) as err:
        prices.on_demand_gpu_hour("8xH100", "mars-1")
    assert err.value.field == "region"
    with pytest.raises(PricingError) as err:
        prices.reserved_discount("8xH100", 91)
    assert err.value.field == "billing.duration_days"


def test_regional_override_and_tier_validation() -> None:
    prices = PriceBook(
        instances={
            "x": InstancePrice(2, Decimal("2.00"), {"r2": Decimal("2.50")}, discount_tiers({5: "0.2"}))
        },
        regions=frozenset({"r1", "r2"}),
        storage_tib_hour_usd=Decimal("0.1"),
        regional_storage_tib_hour_usd={"r2": Decimal("0.2")},
    )
    assert prices.on_demand_gpu_hour("x", "r2") == Decimal("2.50")
    assert prices.reserved_discount("x", 4) == 0
    assert prices.reserved_gpu_hour("x", "r1", 5) == Decimal("1.600")
    assert prices.storage_tib_hour("r2") == Decimal("0.2")
    with pytest.raises(ValueError):
        discount_tiers({7: "1.0"})


def test_as_price_book_accepts_catalog_price_book_or_none() -> None:
    book = default_price_book()
    assert as_price_book(book) is book
    assert as_price_book(None).instances.keys() == book.instances.keys()
    assert as_price_book(default_catalog()).regions == book.regions
    with pytest.raises(TypeError):
        as_price_book("catalog")


def test_capacity_gpu_hour_is_the_meter_rate_of_each_capacity() -> None:
    prices = default_price_book()
    assert prices.capacity_gpu_hour("8xH100", "us-east-1", "on_demand") == Decimal("3.99")
    assert prices.capacity_gpu_hour("8xH100", "us-east-1", "spot") == Decimal("1.596")
    with pytest.raises(PricingError) as err:  # a cluster's capacity_type is no node's capacity
        prices.capacity_gpu_hour("8xH100", "us-east-1", "spot_with_fallback")
    assert err.value.field == "capacity_type"


def test_instance_types_list_reserved_rates_exactly_as_charged(member: TestClient) -> None:
    listed = {t["name"]: t for t in member.get("/v1/instance-types").json()["items"]}
    h100 = {r["min_duration_days"]: r["usd_per_gpu_hour"] for r in listed["8xH100"]["reserved"]}
    # 3.99 x 0.90 = 3.591 is charged (a reservation's gpu_hour_usd); the listing said 3.59.
    assert Decimal(h100[1]) == default_price_book().reserved_gpu_hour("8xH100", "us-east-1", 1)
    assert h100[1] == "3.591"
    assert (h100[7], h100[30], h100[90]) == ("3.3915", "2.9925", "2.5935")
    assert listed["8xH200"]["reserved"][0]["usd_per_gpu_hour"] == "4.86"
