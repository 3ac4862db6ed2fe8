"""Capacity reservations in admission: the nodes a reservation has not lent out are held in its pool.

A reservation (`capacity_reservations`) holds a count, not particular slots: from booking until
`ends_at`, `undrawn = node_count - drawn` of its pool's free slots are out of reach of every placement
but those for clusters drawing from it, where `drawn` is the slots its clusters' nodes hold now (their
allocation rows). So a node a cluster releases (scale-down, replacement, delete) is back in the
reservation at once, with no bookkeeping to forget, and overbooking is impossible: booking, drawing and
every other placement read the pool's free-slot counter (`capacity`) and the reservations' holds under
the pool's lock row (`allocator.lock("pool:" + pool)`), and the pool's free slots never drop below
what its reservations hold undrawn.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

from backend.store.billing_models import CapacityReservation
from backend.store.engine_models import Allocation
from backend.store.models import Cluster

SLOT = "slot"


def active(pool: str, now: dt.datetime) -> Select[CapacityReservation]:
    """The query of the reservations holding capacity in `pool` at `now` (booked, not ended or deleted)."""
    return select(CapacityReservation).where(
        CapacityReservation.pool == pool,
        CapacityReservation.ends_at > now,
        CapacityReservation.deleted_at.is_(None),
    )


def drawn_nodes(session: Session, reservation: CapacityReservation) -> int:
    """Slots the nodes of the reservation's clusters hold now."""
    clusters = select(Cluster.id).where(Cluster.reservation_id == reservation.id)
    held = select(func.count()).select_from(Allocation).where(
        Allocation.kind == SLOT, Allocation.pool == reservation.pool, Allocation.cluster_id.in_(clusters))
    return int(session.scalar(held) or 0)


def free_nodes(session: Session, reservation: CapacityReservation) -> int:
    """Nodes of the reservation no cluster draws now (0 once it ended or was deleted)."""
    return max(0, reservation.node_count - drawn_nodes(session, reservation))


def held_undrawn(
    session: Session, pool: str, now: dt.datetime, *, except_reservation: str | None = None
) -> int:
    """Free slots of `pool` its reservations hold for their clusters (`except_reservation`'s not
    counted: a cluster drawing from it may take those)."""
    return sum(free_nodes(session, r) for r in session.scalars(active(pool, now))
               if r.id != except_reservation)
