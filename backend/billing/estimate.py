"""The one price function: what a cluster shape costs per hour on each capacity type, and up front.

`cluster_price` is used by `POST /v1/pricing/estimate`, every cluster's `estimated_hourly_cost_usd`, the
`max_hourly_cost_usd` admission check, quotas, reports and the CLI; the meter prices each running node
with the same per-node rate (`PriceBook.capacity_gpu_hour`), so the estimate is what the meter charges
for the first hour of a cluster whose nodes all run:
- on_demand: node_count x GPUs per node x the on-demand GPU-hour rate;
- spot: the same at the spot rate (on-demand less the catalog's spot discount);
- spot_with_fallback: the spot rate, what the meter charges while spot nodes run (create takes spot
  first); `max_hourly_usd` is the on-demand rate, the most it costs while on-demand nodes stand in;
- drawing from a capacity reservation (`reservation_id`): 0, its nodes are prepaid by the reservation;
- reserved term: the reserved nodes at the discounted GPU-hour rate (the up-front charge spread over the
  term) plus any nodes beyond the reserved size at the on-demand rate.
Up-front = reserved nodes x GPUs x discounted rate x 24 x duration_days (rounded once to the micro-dollar).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from backend.billing.money import SECONDS_PER_HOUR, micros_to_usd, prorate_micros, quantize_usd
from backend.billing.pricing import ON_DEMAND, SPOT, PriceBook, PricingError

HOURS_PER_DAY = 24
SPOT_WITH_FALLBACK = "spot_with_fallback"
CAPACITY_TYPES = (ON_DEMAND, SPOT, SPOT_WITH_FALLBACK)


@dataclass(frozen=True)
class ClusterShape:
    """What a cluster's price depends on, and nothing else."""

    instance_type: str
    region: str
    node_count: int
    capacity_type: str = ON_DEMAND  # on_demand | spot | spot_with_fallback
    reserved_days: int | None = None  # billing.type = reserved: the term's length
    reserved_nodes: int | None = None  # the size of a term already started (default: node_count)
    draws_reservation: bool = False  # reservation_id set: nodes prepaid by a capacity reservation
    own_hosts: bool = False  # host_pool_id set: the project's own servers carry no compute charge


@dataclass(frozen=True)
class CostEstimate:
    hourly_usd: Decimal
    upfront_usd: Decimal | None
    # Breakdown, for the estimate endpoint and for error messages.
    on_demand_gpu_hour_usd: Decimal
    reserved_gpu_hour_usd: Decimal | None
    reserved_discount: Decimal | None
    gpu_count: int
    capacity_type: str = ON_DEMAND
    # The GPU-hour rate of the capacity the nodes run on first (spot for spot and spot_with_fallback).
    gpu_hour_usd: Decimal = Decimal(0)
    # The most the cluster costs per hour: hourly_usd, or the on-demand rate for spot_with_fallback.
    max_hourly_usd: Decimal = Decimal(0)


def cluster_price(shape: ClusterShape, prices: PriceBook) -> CostEstimate:
    """The hourly (and reserved up-front) price of `shape`; PricingError names the field to blame."""
    if shape.node_count < 1:
        raise PricingError("node_count", f"node_count must be an integer >= 1, got {shape.node_count!r}")
    if shape.capacity_type not in CAPACITY_TYPES:
        known = ", ".join(CAPACITY_TYPES)
        message = f"capacity_type must be one of {known}, got {shape.capacity_type!r}"
        raise PricingError("capacity_type", message)
    if shape.own_hosts:  # the project's own servers, in its pool's region: no compute charge
        prices = prices.own_hosts(shape.region)
    gpus = prices.gpus_per_node(shape.instance_type)
    on_demand = prices.capacity_gpu_hour(shape.instance_type, shape.region, ON_DEMAND)
    if shape.reserved_days is not None:
        return _reserved_price(shape, prices, gpus=gpus, on_demand=on_demand)
    # A fallback cluster takes spot first; its on-demand stand-ins are the ceiling.
    first = SPOT if shape.capacity_type in (SPOT, SPOT_WITH_FALLBACK) else ON_DEMAND
    rate = prices.capacity_gpu_hour(shape.instance_type, shape.region, first)
    gpu_count = gpus * shape.node_count
    if shape.draws_reservation:  # prepaid by the reservation's up-front charge
        rate = hourly = ceiling = Decimal(0)
    else:
        hourly = rate * gpu_count
        ceiling = (on_demand if shape.capacity_type == SPOT_WITH_FALLBACK else rate) * gpu_count
    return CostEstimate(
        hourly_usd=quantize_usd(hourly),
        upfront_usd=None,
        on_demand_gpu_hour_usd=on_demand,
        reserved_gpu_hour_usd=None,
        reserved_discount=None,
        gpu_count=gpu_count,
        capacity_type=shape.capacity_type,
        gpu_hour_usd=rate,
        max_hourly_usd=quantize_usd(ceiling),
    )


def _reserved_price(shape: ClusterShape, prices: PriceBook, *, gpus: int, on_demand: Decimal) -> CostEstimate:
    # As the meter: a term covers its nodes whatever capacity_type says (the API refuses reserved spot).
    days = shape.reserved_days
    assert days is not None
    reservation_size = shape.node_count if shape.reserved_nodes is None else shape.reserved_nodes
    reserved_nodes = min(reservation_size, shape.node_count)
    extra_nodes = shape.node_count - reserved_nodes
    discount = prices.reserved_discount(shape.instance_type, days)
    reserved_rate = prices.reserved_gpu_hour(shape.instance_type, shape.region, days)
    hourly = quantize_usd(reserved_rate * gpus * reserved_nodes + on_demand * gpus * extra_nodes)
    upfront_micros = reserved_upfront_micros(
        reserved_rate=reserved_rate, gpus=gpus * reservation_size, duration_days=days
    )
    return CostEstimate(
        hourly_usd=hourly,
        upfront_usd=micros_to_usd(upfront_micros),
        on_demand_gpu_hour_usd=on_demand,
        reserved_gpu_hour_usd=reserved_rate,
        reserved_discount=discount,
        gpu_count=gpus * shape.node_count,
        gpu_hour_usd=reserved_rate,
        max_hourly_usd=hourly,
    )


def shape_of(spec: Mapping[str, Any], *, reserved_node_count: int | None = None) -> ClusterShape:
    """The price-relevant part of a cluster spec (as the API writes it), checked field by field."""
    instance_type = _required_str(spec, "instance_type")
    region = _required_str(spec, "region")
    node_count = spec.get("node_count", 1)
    if not isinstance(node_count, int) or isinstance(node_count, bool) or node_count < 1:
        raise PricingError("node_count", f"node_count must be an integer >= 1, got {node_count!r}")
    billing = spec.get("billing") or {}
    billing_type = billing.get("type", "on_demand") if isinstance(billing, Mapping) else "on_demand"
    reserved_days = None
    if billing_type == "reserved":
        reserved_days = billing.get("duration_days")
        if not isinstance(reserved_days, int) or isinstance(reserved_days, bool):
            raise PricingError("billing.duration_days", "a reserved cluster needs an integer duration_days")
    return ClusterShape(
        instance_type=instance_type,
        region=region,
        node_count=node_count,
        capacity_type=spec.get("capacity_type") or ON_DEMAND,
        reserved_days=reserved_days,
        reserved_nodes=reserved_node_count,
        draws_reservation=bool(spec.get("reservation_id")),
        own_hosts=bool(spec.get("host_pool_id")),
    )


def estimate_cluster_cost(
    spec: Mapping[str, Any], catalog: object, *, reserved_node_count: int | None = None
) -> CostEstimate:
    """`cluster_price` of a spec (instance_type, region, node_count, capacity_type, billing,
    reservation_id) priced from `catalog` (a Catalog, a PriceBook, or None: the catalog in force).

    `reserved_node_count` is the size of an existing reservation (for a scale of a reserved cluster);
    by default a reserved spec reserves all its nodes.
    """
    from backend.billing.pricing_catalog import as_price_book

    return estimate_with_prices(spec, as_price_book(catalog), reserved_node_count=reserved_node_count)


def estimate_with_prices(
    spec: Mapping[str, Any], prices: PriceBook, *, reserved_node_count: int | None = None
) -> CostEstimate:
    """`estimate_cluster_cost` against an explicit price book."""
    return cluster_price(shape_of(spec, reserved_node_count=reserved_node_count), prices)


def reserved_upfront_micros(*, reserved_rate: Decimal, gpus: int, duration_days: int) -> int:
    """The whole term's charge: `gpus` GPUs for `duration_days` days at `reserved_rate` per GPU-hour."""
    return prorate_micros(reserved_rate, gpus, duration_days * HOURS_PER_DAY * SECONDS_PER_HOUR)


def _required_str(spec: Mapping[str, Any], name: str) -> str:
    value = spec.get(name)
    if not isinstance(value, str) or not value:
        raise PricingError(name, f"{name} is required")
    return value
