"""Billing of capacity reservations apart from clusters (`capacity_reservations`, docs/billing.md).

- The whole term is charged once, up front, at `starts_at`: node_count x GPUs x the catalog's reserved
  GPU-hour rate for the term's length x 24 x days, priced and rounded when the reservation was booked.
  Key `capacity_reservation:<id>`, so it is charged once however many passes or clusters there are. A
  reservation deleted before its start is never charged.
- Nodes of clusters drawing from it (`clusters.reservation_id`) are covered from `starts_at` to
  `ends_at` (`compute_reserved` lines at 0); a node still running after `ends_at` is on-demand from then.
  A cluster replaced or deleted gives its nodes back to the reservation, so its next cluster is covered
  by the same charge.
"""

from __future__ import annotations

from datetime import datetime
from functools import partial

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.billing import actions
from backend.billing.ledger import PendingCharge
from backend.billing.money import micros_to_usd
from backend.domain.clock import ensure_utc
from backend.store.billing_models import CapacityReservation, UsageRecord

KIND = "reservation"


def charge_key(reservation_id: str) -> str:
    return f"capacity_reservation:{reservation_id}"


def project_reservations(session: Session, project_id: str) -> dict[str, CapacityReservation]:
    """Every reservation of the project, deleted ones too (their clusters' past time stays covered)."""
    query = select(CapacityReservation).where(CapacityReservation.project_id == project_id)
    return {r.id: r for r in session.scalars(query)}


def due_charges(
    session: Session, reservations: dict[str, CapacityReservation], *, now: datetime
) -> list[PendingCharge]:
    """The up-front charge of every reservation whose term has started and that was not charged yet
    (marked charged in the caller's transaction, with an audit event)."""
    due = []
    for row in reservations.values():
        starts = row.starts_at
        deleted = row.deleted_at is not None and row.deleted_at <= starts
        if row.charged_at is not None or deleted or starts > now:
            continue
        row.charged_at = now
        due.append(PendingCharge(charge_key(row.id), partial(_record, row, now=now)))
        actions.record_audit(
            session,
            project_id=row.project_id,
            action="billing.capacity_reservation_charged",
            resource_type=KIND,
            resource_id=row.id,
            at=now,
            details={
                "starts_at": starts.isoformat(),
                "ends_at": row.ends_at.isoformat(),
                "node_count": row.node_count,
                "upfront_usd": str(micros_to_usd(row.upfront_micros)),
            },
        )
    return due


def _record(row: CapacityReservation, *, now: datetime) -> UsageRecord:
    starts = row.starts_at.replace(microsecond=0)
    ends = row.ends_at.replace(microsecond=0)
    return UsageRecord(
        idempotency_key=charge_key(row.id),
        project_id=row.project_id,
        kind=KIND,
        resource_type=KIND,
        resource_id=row.id,
        cluster_id=None,
        region=row.region,
        instance_type=row.instance_type,
        period_start=starts,
        period_end=ends,
        seconds=int((ends - starts).total_seconds()),
        units=row.node_count * row.gpus_per_node,
        unit_price_usd=row.gpu_hour_usd,
        amount_micros=row.upfront_micros,
        recorded_at=ensure_utc(now),
        labels=dict(row.labels or {}),
    )
