"""Capacity reservations apart from clusters: book, read, list and delete.

Booking prices the term (the catalog's reserved rate for its length, fixed now) and holds the nodes on
one fabric of the region under the pool's lock (`backend.provisioning.allocator.reserve`), so two
bookings, or a booking and an on-demand create, can never take the same capacity; the metering job
charges the whole term once at `starts_at`. Clusters with `reservation_id` draw from it in its term
(`backend.provisioning.engine`) and their nodes go back to it when they are released.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.billing.account import check_admission_allowed
from backend.billing.estimate import reserved_upfront_micros
from backend.billing.pricing_catalog import as_price_book
from backend.domain.catalog import Catalog
from backend.domain.cluster_rules import apply_cluster_defaults, validate_cluster_spec
from backend.domain.errors import Conflict, FieldError, NotFound, validation_failed
from backend.domain.ids import is_id_of, new_id
from backend.provisioning import allocator
from backend.provisioning.engine import InsufficientCapacity
from backend.services.common import keyset_page
from backend.store.billing_models import CapacityReservation
from backend.store.models import Cluster

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


def book_reservation(
    *, session: Session, catalog: Catalog, project_id: str, spec: ReservationSpec, now: datetime
) -> CapacityReservation:
    """Price the term and hold its nodes (422 naming the field for bad input, 409 `insufficient_capacity`
    when no fabric has them free, 402 when the project is out of prepaid credits)."""
    _check_spec(catalog, spec, now)
    check_admission_allowed(session, project_id=project_id, what="booking a capacity reservation")
    itype = catalog.instance_type(spec.instance_type)
    assert itype is not None
    starts_at = now.replace(microsecond=0) if spec.starts_at is None else spec.starts_at  # echoed as written
    fabric = allocator.reserve(session, catalog, region=spec.region, instance_type=itype.name,
                               interconnect=itype.default_interconnect, count=spec.node_count, now=now)
    if fabric is None:
        free = allocator.free_by_fabric(session, catalog, spec.region, itype.name, itype.default_interconnect)
        raise InsufficientCapacity(
            f"{spec.node_count} x {itype.name} requested on one fabric in {spec.region}, at most "
            f"{max(free.values(), default=0)} available to reserve now",
            field="node_count",
            extra={"requested_nodes": spec.node_count, "available": [
                {"region": spec.region, "fabric": name, "instance_type": itype.name, "available_nodes": count}
                for name, count in free.items()]},
        )
    prices = as_price_book(catalog)
    discount = prices.reserved_discount(itype.name, spec.duration_days)
    rate = prices.on_demand_gpu_hour(itype.name, spec.region) * (1 - discount)
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
        upfront_micros=reserved_upfront_micros(
            reserved_rate=rate, gpus=itype.gpu_count * spec.node_count, duration_days=spec.duration_days
        ),
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


def get_reservation(*, session: Session, project_id: str, reservation_id: str) -> CapacityReservation:
    """One of the project's reservations (not deleted); 404 naming reservation_id otherwise."""
    row = session.get(CapacityReservation, reservation_id) if is_id_of(KIND, reservation_id) else None
    if row is None or row.project_id != project_id or row.deleted_at is not None:
        raise NotFound(f"no reservation with id {reservation_id[:64]!r}", field="reservation_id")
    return row


def list_reservations(
    *, session: Session, project_id: str, after_id: str | None, limit: int
) -> tuple[Sequence[CapacityReservation], bool]:
    """A page of the project's reservations (not deleted), oldest first."""
    query = select(CapacityReservation).where(
        CapacityReservation.project_id == project_id, CapacityReservation.deleted_at.is_(None)
    )
    return keyset_page(session, query, CapacityReservation.id, after_id=after_id, limit=limit)


def check_reservation(session: Session, project_id: str, spec: Mapping[str, Any]) -> list[FieldError]:
    """What keeps a cluster spec from drawing from its `reservation_id`, each naming the field to fix."""
    ref = str(spec["reservation_id"])
    row = session.get(CapacityReservation, ref) if is_id_of(KIND, ref) else None
    if row is None or row.project_id != project_id or row.deleted_at is not None:
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


def delete_reservation(*, session: Session, project_id: str, reservation_id: str, now: datetime) -> None:
    """Give the held capacity back early (no refund: a term already started stays charged; one deleted
    before its start is never charged); 409 while clusters draw from it."""
    row = get_reservation(session=session, project_id=project_id, reservation_id=reservation_id)
    users = cluster_ids(session, row.id)
    if users:
        raise Conflict(
            f"clusters still draw from reservation {row.id}: {', '.join(users)}; delete them first",
            field="reservation_id", code="reservation_in_use", extra={"cluster_ids": users},
        )
    allocator.lock(session, "pool:" + row.pool)
    row.deleted_at = now
