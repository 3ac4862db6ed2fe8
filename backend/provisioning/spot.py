"""Spot capacity: the spot pool of a region, the market that reclaims spot nodes, and the audit trail.

A spot node runs on a physical slot of its pool like any node and also holds a spot ticket: a slot of
the pool's spot share (`Catalog.spot_capacity`: the region's `spot_capacity_share` of the pool),
counted by the same free-slot counters (`capacity`, migration 0012) under the pool name with
`/spot` appended. Spot is short when the share has no free ticket, or while the market keeps
capacity it reclaimed from the cluster (`EngineCluster.spot_reclaimed_until`).

Locks are always taken physical pool first, then its spot pool (the order `allocator._release` takes
them in, by name), so admission, re-acquisition and release never deadlock.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Protocol, cast

from sqlalchemy.orm import Session

from backend.domain.catalog import Catalog, Fabric
from backend.provisioning import allocator, capacity
from backend.provisioning.driver import ProvisioningDriver
from backend.store.audit_log import add_event
from backend.store.engine_models import EngineNode
from backend.store.models import Cluster

SPOT, ON_DEMAND = "spot", "on_demand"
FALLBACK = "spot_with_fallback"
NOTICE = dt.timedelta(minutes=2)  # the warning a spot node gets before the market reclaims it
ACTOR = "engine"


class SpotMarket(Protocol):
    """A driver that sells spot capacity says when it reclaims a spot node and when capacity returns."""

    def spot_preemption(self, cluster_name: str, node_name: str, attempt: int, now: dt.datetime
                        ) -> dt.datetime | None:
        """When the market reclaims a spot node running since `now`; None: it is never reclaimed."""
        ...

    def spot_notice_at(self, reclaimed_at: dt.datetime) -> dt.datetime:
        """When the node gets its preemption notice (two minutes before, in the market's time)."""
        ...

    def spot_returns_at(self, cluster_name: str, reclaimed_at: dt.datetime) -> dt.datetime:
        """When capacity reclaimed at `reclaimed_at` is on the spot market again for this cluster."""
        ...


def market_of(driver: ProvisioningDriver) -> SpotMarket | None:
    """The driver as a spot market, or None when it declares none (its spot nodes are never reclaimed)."""
    return cast(SpotMarket, driver) if driver.capabilities.spot_market else None


def uses_spot(cluster: Cluster) -> bool:
    return cluster.capacity_type in (SPOT, FALLBACK)


def spot_pool(region: str, fabric: str, instance_type: str) -> str:
    return allocator.pool_name(region, fabric, instance_type) + "/spot"


def take_tickets(session: Session, catalog: Catalog, cluster: Cluster, fabric: str, count: int) -> list[int]:
    """Up to `count` free spot tickets of the cluster's pool on `fabric` (fewer, or none, when spot is
    short), under the pool's locks; the caller holds them with `hold_tickets` in this transaction."""
    share = catalog.spot_capacity(cluster.region, fabric, cluster.instance_type)
    if share <= 0 or count <= 0:
        return []
    physical = allocator.pool_name(cluster.region, fabric, cluster.instance_type)
    allocator.lock(session, "pool:" + physical)
    pool = spot_pool(cluster.region, fabric, cluster.instance_type)
    allocator.lock(session, "pool:" + pool)
    row = capacity.counters(session, pool, share, share)
    try:
        chosen = capacity.choose(session, row, min(count, row.free), [])
    except capacity.StaleCounters:
        row = capacity.recount(session, pool, share, share)
        chosen = capacity.choose(session, row, min(count, row.free), [])
    return chosen or []


def hold_tickets(session: Session, cluster: Cluster, fabric: str, tickets: list[int],
                 nodes: list[EngineNode], now: dt.datetime) -> None:
    """The allocation rows of spot tickets, one per spot node of `nodes` (they come first), released
    with their nodes."""
    held = [(ticket, node.id) for ticket, node in zip(tickets, nodes, strict=False)]
    assert all(node.capacity_type == SPOT for _, node in zip(tickets, nodes, strict=False))
    if held:
        allocator.add_slots(session, pool=spot_pool(cluster.region, fabric, cluster.instance_type),
                            slots=held, cluster_id=cluster.id, now=now)


def free_tickets(session: Session, catalog: Catalog, cluster: Cluster, fabric: str) -> int:
    """Spot tickets free now (read-only, for error messages)."""
    share = catalog.spot_capacity(cluster.region, fabric, cluster.instance_type)
    geometry = Fabric(cluster.region, fabric, "spot", {cluster.instance_type: share},
                      nodes_per_su=max(share, 1))
    return capacity.free_nodes(session, geometry, cluster.instance_type,
                               spot_pool(cluster.region, fabric, cluster.instance_type))


def audit(session: Session, cluster: Cluster, action: str, at: dt.datetime, details: dict[str, Any]) -> None:
    add_event(session, project_id=cluster.project_id, actor=ACTOR, action=action, resource_type="cluster",
              resource_id=cluster.id, at=at, details=details)


def iso(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
