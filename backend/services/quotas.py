"""Quota use cases: read and set a project's quotas, and admit a create or scale-up under them.

Admission is atomic with the write it admits: a project with quotas has a lock row (`quota:<project>`,
the allocator's lock rows of issue 18's admission) taken before its holdings are counted and held
until the transaction that stores the new cluster or node count commits, so concurrent creates on any
number of API replicas are counted one after the other and never overshoot (on PostgreSQL each
statement after the lock sees what the previous holder committed; on SQLite write transactions are
serial). Projects without quotas take no lock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.billing.estimate import estimate_cluster_cost
from backend.billing.money import usd_to_micros
from backend.billing.pricing import PricingError
from backend.domain.catalog import Catalog
from backend.domain.clock import utcnow
from backend.domain.quotas import Figures, Limits, first_exceeded
from backend.provisioning import allocator
from backend.store.models import Cluster
from backend.store.quota_models import ProjectQuota

LIMIT_FIELDS = ("max_clusters", "max_gpus", "max_hourly_micros")


def limits_of(session: Session, project_id: str, *, fresh: bool = False) -> Limits:
    """The project's quotas (all None without a row)."""
    row = session.get(ProjectQuota, project_id, populate_existing=fresh)
    if row is None:
        return Limits()
    return Limits(row.max_clusters, row.max_gpus, row.max_hourly_micros)


def figures_of(spec: Mapping[str, Any], catalog: Catalog) -> Figures:
    """What one cluster of `spec` holds: itself, its GPUs and its estimated hourly cost."""
    try:
        estimate = estimate_cluster_cost(spec, catalog)
    except PricingError:  # a type the catalog no longer sells: its GPUs still count
        itype = catalog.instance_type(str(spec.get("instance_type")))
        return Figures(1, (itype.gpu_count if itype else 0) * int(spec.get("node_count") or 0), 0)
    return Figures(1, estimate.gpu_count, usd_to_micros(estimate.hourly_usd))


def held(session: Session, catalog: Catalog, project_id: str) -> Figures:
    """What the project holds: every cluster whose deletion has not been requested."""
    rows = session.execute(
        select(Cluster.instance_type, Cluster.region, Cluster.node_count, Cluster.billing_type,
               Cluster.billing_duration_days, Cluster.host_pool_id)
        .where(Cluster.project_id == project_id, Cluster.deletion_requested_at.is_(None))
    )
    total = Figures()
    for itype, region, nodes, billing_type, days, host_pool_id in rows:
        # Priced as the create was: a cluster on the project's own servers costs nothing an hour.
        spec = {"instance_type": itype, "region": region, "node_count": nodes, "host_pool_id": host_pool_id,
                "billing": {"type": billing_type, "duration_days": days}}
        total += figures_of(spec, catalog)
    return total


def admit(
    *, session: Session, catalog: Catalog, project_id: str, spec: Mapping[str, Any],
    current: Mapping[str, Any] | None = None,
) -> None:
    """Refuse (403 `quota_exceeded`) a create of `spec`, or a change of a cluster from `current` to
    `spec`, that would take the project past a quota; else hold the project's quota lock until commit."""
    added = figures_of(spec, catalog)
    if current is not None:
        added = added - figures_of(current, catalog)
    if max(added.clusters, added.gpus, added.hourly_micros) <= 0 or limits_of(session, project_id).unlimited:
        return
    allocator.lock(session, f"quota:{project_id}")
    limits = limits_of(session, project_id, fresh=True)  # as committed before the lock was ours
    refusal = first_exceeded(limits, held(session, catalog, project_id), added)
    if refusal is not None:
        raise refusal


def set_quota(*, session: Session, project_id: str, changes: Mapping[str, int | None]) -> ProjectQuota:
    """Set or clear (None) some of the project's quotas; the others keep their value."""
    unknown = set(changes) - set(LIMIT_FIELDS)
    if unknown:
        raise ValueError(f"not quotas: {', '.join(sorted(unknown))}")
    row = session.get(ProjectQuota, project_id)
    if row is None:
        row = ProjectQuota(project_id=project_id, updated_at=utcnow())
        session.add(row)
    for field, value in changes.items():
        if value is not None and value < 0:
            raise ValueError(f"{field} must be 0 or more, got {value}")
        setattr(row, field, value)
    row.updated_at = utcnow()
    session.flush()
    return row


def quota_view(session: Session, catalog: Catalog, project_id: str) -> dict[str, Any]:
    """The project's quotas next to what it holds (money in micro-dollars)."""
    row = session.get(ProjectQuota, project_id)
    limits = limits_of(session, project_id)
    use = held(session, catalog, project_id)
    return {
        "max_clusters": limits.max_clusters,
        "clusters_in_use": use.clusters,
        "max_gpus": limits.max_gpus,
        "gpus_in_use": use.gpus,
        "max_hourly_micros": limits.max_hourly_micros,
        "hourly_micros_in_use": use.hourly_micros,
        "updated_at": None if row is None else row.updated_at,
    }
