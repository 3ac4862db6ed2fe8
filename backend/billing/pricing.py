"""Price lookup: on-demand USD per GPU-hour per (instance type, region), spot discount, reserved
discount by term length, storage USD per TiB-hour per region.

`PriceBook` is the billing view of the engine's catalog (`backend.domain.catalog`); `price_book_from_catalog`
builds it, so every price stays configurable through the catalog file (`GPUCLOUD_CATALOG_FILE`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal

from backend.billing.money import to_decimal

RESERVED_MIN_DAYS = 1
RESERVED_MAX_DAYS = 90
# The capacities a node runs on (engine_node_transitions.capacity_type); each has its own GPU-hour rate.
ON_DEMAND = "on_demand"
SPOT = "spot"


class PricingError(ValueError):
    """A price cannot be found; `field` names the spec field to blame (e.g. "instance_type")."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True)
class DiscountTier:
    """Terms of at least `min_days` days get `discount` (a fraction, 0.25 = 25 % off)."""

    min_days: int
    discount: Decimal


@dataclass(frozen=True)
class InstancePrice:
    gpus_per_node: int
    on_demand_gpu_hour_usd: Decimal
    # Regions listed here override the base price (a region may be dearer); others use the base.
    regional_gpu_hour_usd: Mapping[str, Decimal] = field(default_factory=dict)
    # Sorted by min_days; empty means no reserved discount for this type.
    reserved_tiers: Sequence[DiscountTier] = ()


@dataclass(frozen=True)
class PriceBook:
    instances: Mapping[str, InstancePrice]
    regions: frozenset[str]
    storage_tib_hour_usd: Decimal
    regional_storage_tib_hour_usd: Mapping[str, Decimal] = field(default_factory=dict)
    # Fractional discount off on-demand for spot capacity (0.60: spot costs 40 % of on-demand).
    spot_discount: Decimal = Decimal(0)
    reserved_ip_hour_usd: Decimal = Decimal(0)
    reserved_ip_attached_hour_usd: Decimal = Decimal(0)

    def instance(self, instance_type: str) -> InstancePrice:
        try:
            return self.instances[instance_type]
        except KeyError:
            known = ", ".join(sorted(self.instances))
            message = f"unknown instance type {instance_type!r} (known: {known})"
            raise PricingError("instance_type", message) from None

    def _check_region(self, region: str) -> None:
        if region not in self.regions:
            known = ", ".join(sorted(self.regions))
            raise PricingError("region", f"unknown region {region!r} (known: {known})")

    def gpus_per_node(self, instance_type: str) -> int:
        return self.instance(instance_type).gpus_per_node

    def on_demand_gpu_hour(self, instance_type: str, region: str) -> Decimal:
        """On-demand USD per GPU-hour of `instance_type` in `region`."""
        self._check_region(region)
        price = self.instance(instance_type)
        return price.regional_gpu_hour_usd.get(region, price.on_demand_gpu_hour_usd)

    def spot_gpu_hour(self, instance_type: str, region: str) -> Decimal:
        """Spot USD per GPU-hour: on-demand less the spot discount (exact, not rounded)."""
        return self.on_demand_gpu_hour(instance_type, region) * (1 - self.spot_discount)

    def own_hosts(self, region: str) -> PriceBook:
        """The book a cluster on the project's own servers is metered with: its time recorded at no
        compute charge (whatever region name the servers' pool has)."""
        free = {name: replace(price, on_demand_gpu_hour_usd=Decimal(0), regional_gpu_hour_usd={})
                for name, price in self.instances.items()}
        return replace(self, instances=free, regions=self.regions | {region}, spot_discount=Decimal(0))

    def capacity_gpu_hour(self, instance_type: str, region: str, capacity_type: str) -> Decimal:
        """USD per GPU-hour of a node running on `capacity_type` (spot or on_demand): the rate both the
        meter and the cluster price (`backend.billing.estimate.cluster_price`) use."""
        if capacity_type == SPOT:
            return self.spot_gpu_hour(instance_type, region)
        if capacity_type == ON_DEMAND:
            return self.on_demand_gpu_hour(instance_type, region)
        raise PricingError("capacity_type", f"no node runs on {capacity_type!r} capacity (on_demand or spot)")

    def reserved_discount(self, instance_type: str, duration_days: int) -> Decimal:
        """Discount fraction for a reserved term of `duration_days` (the deepest tier it qualifies for)."""
        if not RESERVED_MIN_DAYS <= duration_days <= RESERVED_MAX_DAYS:
            raise PricingError(
                "billing.duration_days",
                f"duration_days must be {RESERVED_MIN_DAYS}..{RESERVED_MAX_DAYS}, got {duration_days}",
            )
        discount = Decimal(0)
        for tier in self.instance(instance_type).reserved_tiers:
            if duration_days >= tier.min_days:
                discount = tier.discount
        return discount

    def reserved_gpu_hour(self, instance_type: str, region: str, duration_days: int) -> Decimal:
        """Discounted USD per GPU-hour of a reserved term (exact, not rounded)."""
        discount = self.reserved_discount(instance_type, duration_days)
        return reserved_gpu_hour(self.on_demand_gpu_hour(instance_type, region), discount)

    def node_hour(self, instance_type: str, region: str) -> Decimal:
        """On-demand USD per node-hour (all GPUs of one node)."""
        return self.on_demand_gpu_hour(instance_type, region) * self.gpus_per_node(instance_type)

    def storage_tib_hour(self, region: str) -> Decimal:
        """USD per TiB-hour of shared storage in `region`. A region the catalog does not sell in is a host
        pool's (the volume API admits no other): its volumes are directories on the project's own storage,
        at no charge."""
        if region not in self.regions:
            return Decimal(0)
        return self.regional_storage_tib_hour_usd.get(region, self.storage_tib_hour_usd)

    def reserved_ip_hour(self, region: str, *, attached: bool) -> Decimal:
        """USD per hour of a reserved IP in `region`: the lower rate while a cluster holds it."""
        self._check_region(region)
        return self.reserved_ip_attached_hour_usd if attached else self.reserved_ip_hour_usd


def reserved_gpu_hour(on_demand_gpu_hour_usd: Decimal, discount: Decimal) -> Decimal:
    """A reserved rate: on-demand less the term's discount, exact (the listing shows what is charged)."""
    return on_demand_gpu_hour_usd * (1 - discount)


def discount_tiers(pairs: Mapping[int, Decimal | str | int]) -> tuple[DiscountTier, ...]:
    """Tiers from `{min_days: discount}`, validated (0 <= discount < 1) and sorted."""
    tiers = []
    for min_days, raw in sorted(pairs.items()):
        discount = to_decimal(raw)
        if not Decimal(0) <= discount < Decimal(1):
            raise ValueError(f"reserved discount for {min_days}+ days must be in [0, 1), got {discount}")
        tiers.append(DiscountTier(int(min_days), discount))
    return tuple(tiers)
