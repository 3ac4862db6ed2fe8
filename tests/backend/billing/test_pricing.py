from decimal import Decimal

import pytest

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
