"""Shared volume use cases: create, list, get, rename/grow (never shrink), delete when detached."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from decimal import Decimal

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from backend.billing.account import check_admission_allowed, storage_first_charge_micros
from backend.billing.pricing_catalog import as_price_book
from backend.billing.volume_history import CREATED, DELETED, RESIZED, record_volume_event
from backend.domain.access import Scope
from backend.domain.catalog import Catalog
from backend.domain.clock import utcnow
from backend.domain.errors import Conflict, FieldError, Unprocessable, validation_failed
from backend.domain.ids import new_id
from backend.store.host_pool_models import HostPool
from backend.store.models import Cluster, ClusterVolume, Volume
from backend.store.repository import (
    check_if_match,
    get_owned,
    keyset_page,
    owned_select,
    scoped_labels,
    touch,
)


def check_region(
    catalog: Catalog, region: str, *, path: str = "region", also: Collection[str] = ()
) -> None:
    """422 naming `path` when neither the catalog nor `also` (the project's host pools' regions, for a
    volume) has such a region."""
    if catalog.region(region) is None and region not in also:
        known = ", ".join([*(r.name for r in catalog.regions), *sorted(also)])
        raise validation_failed(
            [FieldError(path, "unknown_region", f"unknown region {region!r}; choose one of {known}")]
        )


def create_volume(
    *,
    session: Session,
    catalog: Catalog,
    project_id: str,
    name: str,
    region: str,
    size_tib: int,
    scope: Scope | None = None,
    labels: Mapping[str, str] | None = None,
) -> Volume:
    """Create a volume in a known region with `labels` plus the caller's team scope (402 when the
    project is out of prepaid credits, or its balance does not cover the volume's first hour)."""
    # A host pool's region: the volume is a directory on the pool's shared storage (no storage charge).
    pools = session.scalars(select(HostPool.region).where(HostPool.project_id == project_id)).all()
    check_region(catalog, region, also=set(pools))
    charge = storage_first_charge_micros(as_price_book(catalog), region=region, added_tib=size_tib)
    check_admission_allowed(session, project_id=project_id, what="creating a volume",
                            charge_micros=charge)
    now = utcnow()
    row = Volume(
        id=new_id("volume"),
        project_id=project_id,
        name=name,
        region=region,
        size_tib=size_tib,
        status="available",
        labels=scoped_labels(labels or {}, scope),
        generation=1,
        created_at=now,
        updated_at=now,
    )
    session.add(row)
    session.flush()
    record_volume_event(session, volume=row, event=CREATED, at=now)
    return row


def get_volume(
    *,
    session: Session,
    project_id: str,
    volume_id: str,
    for_update: bool = False,
    field: str = "volume_id",
    scope: Scope | None = None,
) -> Volume:
    """One of the project's volumes within the caller's scope; 404 otherwise."""
    return get_owned(
        session,
        Volume,
        kind="volume",
        project_id=project_id,
        row_id=volume_id,
        field=field,
        for_update=for_update,
        scope=scope,
    )


def list_volumes(
    *,
    session: Session,
    project_id: str,
    after_id: str | None,
    limit: int,
    name: str | None = None,
    scope: Scope | None = None,
) -> tuple[Sequence[Volume], bool]:
    """A page of the project's volumes (within the scope) in creation order."""
    query = owned_select(Volume, project_id=project_id, scope=scope)
    if name is not None:
        query = query.where(Volume.name == name)
    return keyset_page(session, query, Volume.id, after_id=after_id, limit=limit)


def attached_cluster_ids(*, session: Session, volume_ids: Iterable[str]) -> dict[str, list[str]]:
    """Volume id -> ids of the live clusters it is attached to (in attach order)."""
    ids = list(volume_ids)
    out: dict[str, list[str]] = {volume_id: [] for volume_id in ids}
    if not ids:
        return out
    rows = session.execute(
        select(ClusterVolume.volume_id, ClusterVolume.cluster_id)
        .join(Cluster, Cluster.id == ClusterVolume.cluster_id)
        .where(ClusterVolume.volume_id.in_(ids), Cluster.deletion_requested_at.is_(None))
        .order_by(Cluster.id)
    ).all()
    for volume_id, cluster_id in rows:
        out[volume_id].append(cluster_id)
    return out


def update_volume(
    *,
    session: Session,
    project_id: str,
    volume_id: str,
    name: str | None,
    size_tib: int | None,
    if_match: str | None,
    scope: Scope | None = None,
    labels: Mapping[str, str] | None = None,
    catalog: Catalog | None = None,
) -> Volume:
    """Rename, relabel and/or grow a volume; shrinking is refused (422) because it would lose data, growing a
    volume of a prepaid project whose balance does not cover the added TiB's first hour too (402).
    `catalog`: the prices (the catalog in force unless given)."""
    row = get_volume(
        session=session, project_id=project_id, volume_id=volume_id, for_update=True, scope=scope
    )
    check_if_match(if_match, row)
    if size_tib is not None and size_tib < row.size_tib:
        raise Unprocessable(
            f"size_tib can only grow: the volume has {row.size_tib} TiB, shrinking to "
            f"{size_tib} TiB would lose data",
            field="size_tib",
            code="shrink_not_supported",
        )
    if size_tib is not None and size_tib > row.size_tib:
        charge = storage_first_charge_micros(as_price_book(catalog), region=row.region,
                                             added_tib=size_tib - row.size_tib)
        check_admission_allowed(session, project_id=project_id, what="growing a volume", field="size_tib",
                                charge_micros=charge)
    changed = False
    if name is not None and name != row.name:
        row.name, changed = name, True
    if labels is not None and scoped_labels(labels, scope) != row.labels:
        row.labels, changed = scoped_labels(labels, scope), True
    resized = size_tib is not None and size_tib != row.size_tib
    if size_tib is not None and resized:
        row.size_tib, changed = size_tib, True
    if changed:
        touch(row)
    if resized:  # billed at the new size from this moment (a rename is not billed: no event)
        record_volume_event(session, volume=row, event=RESIZED, at=row.updated_at)
    return row


def delete_volume(
    *, session: Session, project_id: str, volume_id: str, if_match: str | None, scope: Scope | None = None
) -> None:
    """Delete a volume attached to no live cluster (409 naming them otherwise)."""
    row = get_volume(
        session=session, project_id=project_id, volume_id=volume_id, for_update=True, scope=scope
    )
    check_if_match(if_match, row)
    users = attached_cluster_ids(session=session, volume_ids=[row.id])[row.id]
    if users:
        raise Conflict(
            f"the volume is attached to cluster(s) {', '.join(users)}; detach it first",
            field="volume_id",
            code="volume_attached",
            extra={"cluster_ids": users},
        )
    session.execute(delete(ClusterVolume).where(ClusterVolume.volume_id == row.id))
    record_volume_event(session, volume=row, event=DELETED, at=utcnow())
    session.delete(row)


def hourly_cost_usd(catalog: Catalog, size_tib: int) -> Decimal:
    """What the volume costs per hour at the catalog's storage price."""
    return (catalog.storage_usd_per_tib_hour * size_tib).quantize(Decimal("0.0001"))
