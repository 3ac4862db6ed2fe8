"""Reserved IP use cases: reserve, list, get, rename/relabel, release when detached, attach to a
cluster (moving it from another), convert a cluster's floating address.

An address is held in one place at a time: reserved IPs and clusters' floating addresses come from the
region's public block under one lock (backend.provisioning.allocator), and a cluster holds at most one
reserved IP and a reserved IP at most one cluster (`clusters.reserved_ip_id`, unique).

Attaching an IP another cluster of the project holds moves it: the holder gets a fresh floating address
in the same transaction. So a move written as "detach from A, attach to B" works in either order
(Terraform updates A and B in parallel). The holder's generation is not bumped by a move: its own
writer did not change it, and an apply that detaches it concurrently must not fail its If-Match.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from decimal import Decimal

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.billing.account import check_admission_allowed, reserved_ip_first_charge_micros
from backend.billing.pricing_catalog import as_price_book
from backend.domain.access import Scope
from backend.domain.catalog import Catalog
from backend.domain.clock import utcnow
from backend.domain.errors import Conflict, FieldError, validation_failed
from backend.domain.ids import is_id_of, new_id
from backend.provisioning import allocator, public_address
from backend.services.volumes import check_region
from backend.store.models import ApiKey, Cluster, ReservedIp
from backend.store.repository import (
    check_if_match,
    get_owned,
    in_scope,
    keyset_page,
    owned_select,
    scoped_labels,
    touch,
)
from backend.store.reserved_ip_history import (
    ATTACHED,
    DETACHED,
    RELEASED,
    RESERVED,
    record_reserved_ip_event,
)

KIND = "reserved_ip"


def create_reserved_ip(
    *,
    session: Session,
    catalog: Catalog,
    project_id: str,
    region: str,
    name: str | None,
    labels: Mapping[str, str],
    scope: Scope | None = None,
) -> ReservedIp:
    """Reserve the next free address of the region's public block (402 when the project is out of
    prepaid credits or its balance does not cover the address's first hour, 409 when the region has none
    left)."""
    check_region(catalog, region)
    charge = reserved_ip_first_charge_micros(as_price_book(catalog), region=region, attached=False)
    check_admission_allowed(session, project_id=project_id, what="reserving an IP", charge_micros=charge)
    home = catalog.region(region)
    assert home is not None
    allocator.lock_region_addresses(session, region)
    address = allocator.next_public_ip(session, home.public_cidr)
    if address is None:
        raise Conflict(f"region {region} has no free public address left", field="region",
                       code="insufficient_capacity")
    now = utcnow()
    row = ReservedIp(id=new_id(KIND), project_id=project_id, name=name, region=region, address=address,
                     labels=scoped_labels(labels, scope), generation=1, created_at=now, updated_at=now)
    session.add(row)
    session.flush()
    record_reserved_ip_event(session, reserved_ip=row, event=RESERVED, at=now)
    return row


def get_reserved_ip(
    *,
    session: Session,
    project_id: str,
    reserved_ip_id: str,
    for_update: bool = False,
    field: str = "reserved_ip_id",
    scope: Scope | None = None,
) -> ReservedIp:
    """One of the project's reserved IPs within the caller's scope; 404 otherwise."""
    return get_owned(session, ReservedIp, kind=KIND, project_id=project_id, row_id=reserved_ip_id,
                     field=field, for_update=for_update, scope=scope)


def list_reserved_ips(
    *,
    session: Session,
    project_id: str,
    after_id: str | None,
    limit: int,
    name: str | None = None,
    scope: Scope | None = None,
) -> tuple[Sequence[ReservedIp], bool]:
    """A page of the project's reserved IPs (within the scope), oldest first."""
    query = owned_select(ReservedIp, project_id=project_id, scope=scope)
    if name is not None:
        query = query.where(ReservedIp.name == name)
    return keyset_page(session, query, ReservedIp.id, after_id=after_id, limit=limit)


def holders(*, session: Session, reserved_ip_ids: Iterable[str]) -> dict[str, str | None]:
    """Reserved IP id -> the cluster it is attached to (None: not attached)."""
    ids = list(reserved_ip_ids)
    out: dict[str, str | None] = dict.fromkeys(ids)
    if ids:
        rows = session.execute(select(Cluster.reserved_ip_id, Cluster.id)
                               .where(Cluster.reserved_ip_id.in_(ids))).all()
        out.update({ip_id: cluster_id for ip_id, cluster_id in rows if ip_id is not None})
    return out


def update_reserved_ip(
    *,
    session: Session,
    project_id: str,
    reserved_ip_id: str,
    changes: Mapping[str, object],
    if_match: str | None,
    scope: Scope | None = None,
) -> ReservedIp:
    """Rename and/or relabel (`changes`: name, labels; null name clears it)."""
    row = get_reserved_ip(session=session, project_id=project_id, reserved_ip_id=reserved_ip_id,
                          for_update=True, scope=scope)
    check_if_match(if_match, row)
    changed = False
    if "name" in changes and changes["name"] != row.name:
        row.name, changed = changes["name"], True  # type: ignore[assignment]
    if changes.get("labels") is not None:
        labels = scoped_labels(changes["labels"], scope)  # type: ignore[arg-type]
        if labels != row.labels:
            row.labels, changed = labels, True
    if changed:
        touch(row)
    return row


def release_reserved_ip(
    *,
    session: Session,
    project_id: str,
    reserved_ip_id: str,
    if_match: str | None,
    scope: Scope | None = None,
) -> None:
    """Give the address back to the region (409 naming the cluster while one holds it)."""
    row = get_reserved_ip(session=session, project_id=project_id, reserved_ip_id=reserved_ip_id,
                          for_update=True, scope=scope)
    check_if_match(if_match, row)
    holder = holders(session=session, reserved_ip_ids=[row.id])[row.id]
    if holder is not None:
        raise Conflict(
            f"reserved IP {row.address} is attached to cluster {holder}; unset reserved_ip_id on that "
            "cluster first",
            field="reserved_ip_id",
            code="reserved_ip_attached",
            extra={"cluster_id": holder},
        )
    record_reserved_ip_event(session, reserved_ip=row, event=RELEASED, at=utcnow())
    session.delete(row)


def check_reference(
    session: Session, *, project_id: str, scope: Scope | None, reserved_ip_id: str | None, region: str,
    kept: str | None,
) -> list[FieldError]:
    """What is wrong with a cluster in `region` naming `reserved_ip_id` (`kept`: the IP it holds now,
    which a scoped key may keep): another project's or team's is not found, another region's refused."""
    if reserved_ip_id is None:
        return []
    row = session.get(ReservedIp, reserved_ip_id) if is_id_of(KIND, reserved_ip_id) else None
    if row is None or row.project_id != project_id or (
        reserved_ip_id != kept and not in_scope(scope, row.labels)
    ):
        return [FieldError("reserved_ip_id", "not_found",
                           f"no reserved IP with id {reserved_ip_id!r} in this project")]
    if row.region != region:
        return [FieldError("reserved_ip_id", "region_mismatch",
                           f"reserved IP {reserved_ip_id} is in {row.region}, the cluster in {region}; "
                           f"reserve an IP in {region}")]
    return []


def assign(session: Session, catalog: Catalog, *, cluster: Cluster, reserved_ip_id: str | None) -> None:
    """Make `reserved_ip_id` (checked by `check_reference`) the cluster's login address, or a fresh
    floating one for None; an IP another cluster holds moves here (that one gets a floating address).

    The caller holds `cluster`'s row. Then the IP's row is locked, then its holder's: every attach of an
    IP (and its release) waits for the IP, so two moves of one IP run one after the other and a release
    never deletes an IP that is being attached (the foreign key `clusters.reserved_ip_id` backs this up)."""
    if cluster.reserved_ip_id == reserved_ip_id:
        return
    now = utcnow()
    if cluster.reserved_ip_id is not None:
        _let_go(session, cluster, now)
    if reserved_ip_id is None:
        public_address.take_floating(session, catalog, cluster_id=cluster.id, region=cluster.region, now=now)
        return
    row = session.scalars(select(ReservedIp).where(ReservedIp.id == reserved_ip_id).with_for_update()
                          .execution_options(populate_existing=True)).one_or_none()
    if row is None:  # released while this request was checking it
        raise validation_failed([FieldError("reserved_ip_id", "not_found",
                                            f"no reserved IP with id {reserved_ip_id!r} in this project")])
    # Read after the IP's lock, and locked: a holder that let go meanwhile is skipped.
    holder = session.scalars(select(Cluster).where(Cluster.reserved_ip_id == reserved_ip_id,
                                                   Cluster.id != cluster.id).with_for_update()
                             .execution_options(populate_existing=True)).one_or_none()
    if holder is not None:  # a move: the holder falls back to a floating address
        _let_go(session, holder, now)
        public_address.take_floating(session, catalog, cluster_id=holder.id, region=holder.region, now=now)
    cluster.reserved_ip_id = row.id
    session.flush()
    public_address.take_reserved(session, cluster_id=cluster.id, region=cluster.region, address=row.address)
    record_reserved_ip_event(session, reserved_ip=row, event=ATTACHED, at=now, cluster_id=cluster.id)


def _let_go(session: Session, cluster: Cluster, now: datetime) -> None:
    row = session.get(ReservedIp, cluster.reserved_ip_id)
    cluster.reserved_ip_id = None
    session.flush()  # the unique index sees the IP free before anyone takes it
    if row is not None:
        record_reserved_ip_event(session, reserved_ip=row, event=DETACHED, at=now, cluster_id=cluster.id)


def reserve_cluster_address(
    *, session: Session, project_id: str, cluster: Cluster, name: str | None, labels: Mapping[str, str],
    scope: Scope | None = None, catalog: Catalog | None = None,
) -> ReservedIp:
    """Turn the cluster's floating address into a reserved IP that stays attached to it (409 when the
    cluster already has one, or has no address yet; 402 as `create_reserved_ip`, for its first hour at
    the attached rate). The IP takes the cluster's team labels, so the cluster's team sees it whoever
    reserved it. `catalog`: the prices (the catalog in force unless given)."""
    if cluster.reserved_ip_id is not None:
        raise Conflict(f"cluster {cluster.id} already answers on reserved IP {cluster.reserved_ip_id}",
                       field="reserved_ip_id", code="already_reserved",
                       extra={"reserved_ip_id": cluster.reserved_ip_id})
    labels = _with_team_labels(session, project_id, scoped_labels(labels, scope), cluster)
    charge = reserved_ip_first_charge_micros(as_price_book(catalog), region=cluster.region, attached=True)
    check_admission_allowed(session, project_id=project_id, what="reserving an IP", charge_micros=charge)
    address = public_address.give_up_floating(session, cluster_id=cluster.id, region=cluster.region)
    if address is None:
        raise Conflict(f"cluster {cluster.id} has no public address yet; retry once it is provisioning",
                       field="cluster_id", code="no_public_address")
    now = utcnow()
    row = ReservedIp(id=new_id(KIND), project_id=project_id, name=name, region=cluster.region,
                     address=address, labels=labels, generation=1, created_at=now, updated_at=now)
    session.add(row)
    session.flush()
    cluster.reserved_ip_id = row.id
    touch(cluster)
    session.flush()
    record_reserved_ip_event(session, reserved_ip=row, event=RESERVED, at=now)
    record_reserved_ip_event(session, reserved_ip=row, event=ATTACHED, at=now, cluster_id=cluster.id)
    return row


def _with_team_labels(
    session: Session, project_id: str, labels: dict[str, str], cluster: Cluster
) -> dict[str, str]:
    """`labels` plus the cluster's value of each team label (`team`, and every label key the project's
    API keys are scoped on); 422 naming the label when `labels` gives it another value."""
    keys = {"team", *session.scalars(select(ApiKey.scope_key).where(ApiKey.project_id == project_id,
                                                                     ApiKey.scope_key.is_not(None)))}
    out = dict(labels)
    for key in sorted(k for k in keys if k is not None and k in cluster.labels):
        value = cluster.labels[key]
        if out.setdefault(key, value) != value:
            raise validation_failed([FieldError(
                f"labels.{key}", "label_mismatch",
                f"an IP reserved for cluster {cluster.id} takes its team label {key}={value!r}; leave "
                f"labels.{key} out or set it to {value!r}")])
    return out


def hourly_cost_usd(catalog: Catalog, *, attached: bool) -> Decimal:
    """What a reserved IP costs per hour at the catalog's prices (attached: the lower rate)."""
    return catalog.reserved_ip_attached_usd_per_hour if attached else catalog.reserved_ip_usd_per_hour
