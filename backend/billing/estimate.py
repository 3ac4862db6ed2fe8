"""Cost of a cluster spec before it exists: the hourly rate and, for a reserved term, the up-front charge.

Hourly rate = the rate at which the cluster costs money while all its nodes run:
- on-demand: node_count x GPUs per node x on-demand USD per GPU-hour;
- drawing from a capacity reservation (`reservation_id`): 0, its nodes are prepaid;
- reserved: the reserved nodes at the discounted GPU-hour rate (the up-front charge spread over the
  term) plus any nodes beyond the reserved size at the on-demand rate.
Up-front = reserved nodes x GPUs x discounted rate x 24 x duration_days (rounded once to the micro-dollar).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from backend.billing.money import SECONDS_PER_HOUR, micros_to_usd, prorate_micros, quantize_usd
from backend.billing.pricing import PriceBook, PricingError

HOURS_PER_DAY = 24


@dataclass(frozen=True)
class CostEstimate:
    hourly_usd: Decimal
    upfront_usd: Decimal | None
    # Breakdown, for the estimate endpoint and for error messages.
    on_demand_gpu_hour_usd: Decimal
    reserved_gpu_hour_usd: Decimal | None
    reserved_discount: Decimal | None
    gpu_count: int


def estimate_cluster_cost(
    spec: Mapping[str, Any], catalog: object, *, reserved_node_count: int | None = None
) -> CostEstimate:
    """Estimate for `spec` (instance_type, region, node_count, billing) priced from `catalog`.

    `reserved_node_count` is the size of an existing reservation (for a scale of a reserved cluster);
    by default a reserved spec reserves all its nodes.
    """
    from backend.billing.pricing_catalog import as_price_book

    return estimate_with_prices(spec, as_price_book(catalog), reserved_node_count=reserved_node_count)


def estimate_with_prices(
    spec: Mapping[str, Any], prices: PriceBook, *, reserved_node_count: int | None = None
) -> CostEstimate:
    """`estimate_cluster_cost` against an explicit price book."""
    instance_type = _required_str(spec, "instance_type")
    region = _required_str(spec, "region")
    node_count = spec.get("node_count", 1)
    if not isinstance(node_count, int) or isinstance(node_count, bool) or node_count < 1:
        raise PricingError("node_count", f"node_count must be an integer >= 1, got {node_count!r}")
    billing = spec.get("billing") or {}
    billing_type = billing.get("type", "on_demand") if isinstance(billing, Mapping) else "on_demand"

    gpus = prices.gpus_per_node(instance_type)
    on_demand = prices.on_demand_gpu_hour(instance_type, region)
    if billing_type != "reserved":
        # Nodes drawn from a capacity reservation are prepaid by its up-front charge.
        drawn = bool(spec.get("reservation_id"))
        return CostEstimate(
            hourly_usd=quantize_usd(Decimal(0) if drawn else on_demand * gpus * node_count),
            upfront_usd=None,
            on_demand_gpu_hour_usd=on_demand,
            reserved_gpu_hour_usd=None,
            reserved_discount=None,
            gpu_count=gpus * node_count,
        )

    duration_days = billing.get("duration_days")
    if not isinstance(duration_days, int) or isinstance(duration_days, bool):
        raise PricingError("billing.duration_days", "a reserved cluster needs an integer duration_days")
    reservation_size = node_count if reserved_node_count is None else reserved_node_count
    reserved_nodes = min(reservation_size, node_count)
    extra_nodes = node_count - reserved_nodes
    discount = prices.reserved_discount(instance_type, duration_days)
    reserved_rate = prices.reserved_gpu_hour(instance_type, region, duration_days)
    hourly = reserved_rate * gpus * reserved_nodes + on_demand * gpus * extra_nodes
    upfront_micros = reserved_upfront_micros(
        reserved_rate=reserved_rate, gpus=gpus * reservation_size, duration_days=duration_days
    )
    return CostEstimate(
        hourly_usd=quantize_usd(hourly),
        upfront_usd=micros_to_usd(upfront_micros),
        on_demand_gpu_hour_usd=on_demand,
        reserved_gpu_hour_usd=reserved_rate,
        reserved_discount=discount,
        gpu_count=gpus * node_count,
    )


def reserved_upfront_micros(*, reserved_rate: Decimal, gpus: int, duration_days: int) -> int:
    """The whole term's charge: `gpus` GPUs for `duration_days` days at `reserved_rate` per GPU-hour."""
    return prorate_micros(reserved_rate, gpus, duration_days * HOURS_PER_DAY * SECONDS_PER_HOUR)


def _required_str(spec: Mapping[str, Any], name: str) -> str:
    value = spec.get(name)
    if not isinstance(value, str) or not value:
        raise PricingError(name, f"{name} is required")
    return value
