"""Adapter from the engine's catalog (`backend.domain.catalog.Catalog`) to billing's `PriceBook`."""

from __future__ import annotations

from backend.billing.pricing import InstancePrice, PriceBook, discount_tiers
from backend.domain.catalog import Catalog, default_catalog


def price_book_from_catalog(catalog: Catalog) -> PriceBook:
    """Prices of every instance type in every region of `catalog` (the catalog prices types globally)."""
    tiers = discount_tiers(catalog.reserved_discounts)
    return PriceBook(
        instances={
            t.name: InstancePrice(
                gpus_per_node=t.gpu_count,
                on_demand_gpu_hour_usd=t.on_demand_usd_per_gpu_hour,
                reserved_tiers=tiers,
            )
            for t in catalog.instance_types
        },
        regions=frozenset(r.name for r in catalog.regions),
        storage_tib_hour_usd=catalog.storage_usd_per_tib_hour,
        spot_discount=catalog.spot_discount,
        reserved_ip_hour_usd=catalog.reserved_ip_usd_per_hour,
        reserved_ip_attached_hour_usd=catalog.reserved_ip_attached_usd_per_hour,
    )


def as_price_book(catalog: object) -> PriceBook:
    """A PriceBook from a PriceBook, a Catalog, or None (the catalog in force)."""
    if isinstance(catalog, PriceBook):
        return catalog
    if catalog is None:
        return price_book_from_catalog(default_catalog())
    if isinstance(catalog, Catalog):
        return price_book_from_catalog(catalog)
    raise TypeError(f"expected a Catalog or PriceBook, got {type(catalog).__name__}")


def default_price_book() -> PriceBook:
    return price_book_from_catalog(default_catalog())
