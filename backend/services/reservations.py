"""Capacity reservations apart from clusters: book, read, list, rename/relabel and delete.

Booking prices the term (the catalog's reserved rate for its length, fixed now) and holds the nodes on
one fabric of the region under the pool's lock (`backend.provisioning.allocator.reserve`), so two
bookings, or a booking and an on-demand create, can never take the same capacity; the metering job
charges the whole term once at `starts_at`. Clusters with `reservation_id` draw from it in its term
(`backend.provisioning.engine`) and their nodes go back to it when they are released.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.billing.account import check_admission_allowed
from backend.billing.estimate import reserved_upfront_micros
from backend.billing.pricing_catalog import as_price_book
from backend.domain.access import Scope
from backend.domain.catalog import Catalog
from backend.domain.cluster_rules import apply_cluster_defaults, validate_cluster_spec
from backend.domain.errors import Conflict, FieldError, NotFound, PreconditionFailed, validation_failed
from backend.domain.etags import if_match_satisfied
from backend.domain.ids import new_id
from backend.provisioning import allocator
from backend.provisioning.engine import InsufficientCapacity
from backend.store.billing_models import CapacityReservation
from backend.store.models import Cluster
from backend.store.repository import get_owned, keyset_page, owned_select, referenced, scoped_labels

KIND = "reservation"
DESTROYED = "DESTROYED"
# A start a little in the past (clock skew, a plan computed a moment ago) means "now".
START_SKEW = timedelta(minutes=5)


@dataclass(frozen=True)
class ReservationSpec:
    name: str
    region: str
    instance_type: str
    node_count: int
    duration_days: int
    starts_at: datetime | None  # None: now
    labels: Mapping[str, str] = field(default_factory=dict)


def book_reservation(
    *,
    session: Session,
    catalog: Catalog,
    project_id: str,
    spec: ReservationSpec,
    now: datetime,
    scope: Scope | None = None,
) -> CapacityReservation:
    """Price the term and hold its nodes (422 naming the field for bad input, 409 `insufficient_capacity`
    when no fabric has them free, 402 when the project is out of prepaid credits); a scoped caller's
    reservation carries its scope label, as its clusters do (403 for another team's)."""
    labels = scoped_labels(spec.labels, scope)
    _check_spec(catalog, spec, now)
    itype = catalog.instance_type(spec.instance_type)
    assert itype is not None
    prices = as_price_book(catalog)
    discount = prices.reserved_discount(itype.name, spec.duration_days)
    rate = prices.on_demand_gpu_hour(itype.name, spec.region) * (1 - discount)
    upfront = reserved_upfront_micros(
        reserved_rate=rate, gpus=itype.gpu_count * spec.node_count, duration_days=spec.duration_days
    )
    # A prepaid balance must cover the whole up-front charge (402 naming both) before nodes are held.
    check_admission_allowed(session, project_id=project_id, what="booking a capacity reservation",
                            charge_micros=upfront)
    starts_at = now.replace(microsecond=0) if spec.starts_at is None else spec.starts_at  # echoed as written
    fabric = allocator.reserve(session, catalog, region=spec.region, instance_type=itype.name,
                               interconnect=itype.default_interconnect, count=spec.node_count, now=now)
    if fabric is None:
        free = allocator.free_by_fabric(session, catalog, spec.region, itype.name, itype.default_interconnect,
                                        now=now)
        raise InsufficientCapacity(
            f"{spec.node_count} x {itype.name} requested on one fabric in {spec.region}, at most "
            f"{max(free.values(), default=0)} available to reserve now",
            field="node_count",
            extra={"requested_nodes": spec.node_count, "available": [
                {"region": spec.region, "fabric": name, "instance_type": itype.name, "available_nodes": count}
                for name, count in free.items()]},
        )
    row = CapacityReservation(
        id=new_id(KIND),
        project_id=project_id,
        name=spec.name,
        region=spec.region,
        instance_type=itype.name,
        pool=allocator.pool_name(spec.region, fabric.name, itype.name),
        node_count=spec.node_count,
        gpus_per_node=itype.gpu_count,
        duration_days=spec.duration_days,
        starts_at=starts_at,
        ends_at=starts_at + timedelta(days=spec.duration_days),
        discount=discount,
        gpu_hour_usd=rate,
        upfront_micros=upfront,
        labels=labels,
        created_at=now,
    )
    session.add(row)
    session.flush()
    return row


def _check_spec(catalog: Catalog, spec: ReservationSpec, now: datetime) -> None:
    shape = {"name": "probe", "region": spec.region, "instance_type": spec.instance_type, "node_count": 1}
    probe = apply_cluster_defaults(shape, catalog)
    errors = [
        FieldError("instance_type" if e.path == "interconnect" else e.path, e.code, e.message)
        for e in validate_cluster_spec(probe, catalog)
        # node_count's cluster rules (one node unless fabric-capable) do not apply: single-node
        # clusters can draw a node each.
        if e.path in ("region", "instance_type", "interconnect")
    ]
    if spec.starts_at is not None and spec.starts_at < now - START_SKEW:
        errors.append(FieldError("starts_at", "in_the_past", f"starts_at {spec.starts_at.isoformat()} has "
                                 "passed; leave it out to start now"))
    if errors:
        raise validation_failed(errors)


def get_reservation(
    *, session: Session, project_id: str, reservation_id: str, scope: Scope | None
) -> CapacityReservation:
    """One of the project's reservations (not deleted) within the caller's scope; 404 naming
    reservation_id otherwise."""
    row = get_owned(session, CapacityReservation, kind=KIND, project_id=project_id, row_id=reservation_id,
                    field="reservation_id", scope=scope)
    if row.deleted_at is not None:
        raise NotFound(f"no reservation with id {reservation_id!r}", field="reservation_id")
    return row


def list_reservations(
    *, session: Session, project_id: str, after_id: str | None, limit: int, scope: Scope | None
) -> tuple[Sequence[CapacityReservation], bool]:
    """A page of the project's reservations (not deleted) within the caller's scope, oldest first."""
    query = owned_select(CapacityReservation, project_id=project_id, scope=scope).where(
        CapacityReservation.deleted_at.is_(None)
    )
    return keyset_page(session, query, CapacityReservation.id, after_id=after_id, limit=limit)


def check_reservation(
    session: Session, project_id: str, spec: Mapping[str, Any], scope: Scope | None
) -> list[FieldError]:
    """What keeps a cluster spec from drawing from its `reservation_id`, each naming the field to fix
    (another team's reservation is not found, as another project's)."""
    ref = str(spec["reservation_id"])
    found = referenced(session, CapacityReservation, [ref], project_id=project_id, scope=scope)
    row = found[0] if found else None
    if row is None or row.deleted_at is not None:
        message = f"no capacity reservation with id {ref!r} in this project"
        return [FieldError("reservation_id", "not_found", message)]
    errors = [
        FieldError(field, "reservation_mismatch",
                   f"reservation {row.id} holds {row.instance_type} nodes in {row.region}; set {field} = "
                   f"{held!r} or draw from another reservation")
        for field, held in (("region", row.region), ("instance_type", row.instance_type))
        if spec.get(field) != held
    ]
    if (spec.get("billing") or {}).get("type") == "reserved":
        errors.append(FieldError("billing.type", "conflicts_with_reservation",
                                 "a cluster drawing from a reservation is prepaid by it: leave billing out"))
    if spec.get("capacity_type", "on_demand") != "on_demand":
        errors.append(FieldError("capacity_type", "conflicts_with_reservation",
                                 "a reservation holds on-demand capacity: leave capacity_type out "
                                 "(on_demand) or drop reservation_id to run on spot"))
    return errors


def cluster_ids(session: Session, reservation_id: str) -> list[str]:
    """The clusters drawing from the reservation that are not destroyed yet."""
    return list(session.scalars(select(Cluster.id).where(
        Cluster.reservation_id == reservation_id, Cluster.status != DESTROYED).order_by(Cluster.id)))


def delete_reservation(
    *, session: Session, project_id: str, reservation_id: str, now: datetime, scope: Scope | None
) -> None:
    """Give the held capacity back early (no refund: a term already started stays charged; one deleted
    before its start is never charged); 409 while clusters draw from it."""
    row = get_reservation(session=session, project_id=project_id, reservation_id=reservation_id, scope=scope)
    users = cluster_ids(session, row.id)
    if users:
        raise Conflict(
            f"clusters still draw from reservation {row.id}: {', '.join(users)}; delete them first",
            field="reservation_id", code="reservation_in_use", extra={"cluster_ids": users},
        )
    allocator.lock(session, "pool:" + row.pool)
    row.deleted_at = now


def reservation_etag(row: CapacityReservation) -> str:
    """The ETag of a reservation: a digest of what PATCH may change (name, labels), since nothing else of
    it is ever updated by its owner (the table has no generation column; charged_at is the meter's)."""
    declared = json.dumps([row.name, dict(sorted((row.labels or {}).items()))], separators=(",", ":"))
    return '"' + hashlib.sha256(declared.encode()).hexdigest()[:24] + '"'


def update_reservation(
    *,
    session: Session,
    project_id: str,
    reservation_id: str,
    changes: Mapping[str, Any],
    if_match: str | None,
    scope: Scope | None,
) -> CapacityReservation:
    """Rename and/or relabel in place (`changes`: name, labels; nothing priced or held changes, so no new
    booking or charge); 412 on a stale If-Match, 403 for a scoped key setting another team's label."""
    row = get_owned(session, CapacityReservation, kind=KIND, project_id=project_id, row_id=reservation_id,
                    field="reservation_id", scope=scope, for_update=True, write=True)
    if row.deleted_at is not None:
        raise NotFound(f"no reservation with id {reservation_id!r}", field="reservation_id")
    current = reservation_etag(row)
    if not if_match_satisfied(if_match, current):
        raise PreconditionFailed(f"the resource changed: its ETag is now {current}; read it again and retry",
                                 field="If-Match", code="etag_mismatch")
    if changes.get("name") is not None:
        row.name = str(changes["name"])
    if changes.get("labels") is not None:
        row.labels = scoped_labels(changes["labels"], scope)
    return row
