"""Read models for the billing API: usage line items, balance, invoices, and a cluster's reserved term."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import Select, bindparam, select
from sqlalchemy.orm import Session

from backend.billing.account import billing_mode, credit_standing
from backend.billing.credits import CreditStanding
from backend.billing.estimate import estimate_cluster_cost
from backend.billing.invoices import month_bounds, month_of, month_totals
from backend.billing.ledger import balance_micros, granted_micros
from backend.billing.meter import to_second
from backend.billing.money import micros_to_usd
from backend.billing.pricing import PricingError
from backend.billing.settings import BillingSettings
from backend.domain.access import Scope
from backend.store.billing_models import Invoice, Reservation, UsageRecord
from backend.store.db import execute_core
from backend.store.engine_models import EngineCluster
from backend.store.scoping import scope_filter


@dataclass(frozen=True)
class UsageFilter:
    kind: str | None = None
    cluster_id: str | None = None
    resource_id: str | None = None
    start: datetime | None = None  # period_end > start
    end: datetime | None = None  # period_start < end
    scope: Scope | None = None  # a team-scoped key: the lines labelled with its team only


def list_usage(
    session: Session, *, project_id: str, filters: UsageFilter, after_id: int | None, limit: int
) -> tuple[Sequence[UsageRecord], bool]:
    """A page of the project's usage records, oldest first; True when more follow."""
    query = usage_query(project_id, filters)
    if after_id is not None:
        query = query.where(UsageRecord.id > after_id)
    rows = session.scalars(query.order_by(UsageRecord.id).limit(limit + 1)).all()
    return rows[:limit], len(rows) > limit


def usage_query(project_id: str, filters: UsageFilter) -> Select[UsageRecord]:
    """The project's usage records matching `filters` (unordered)."""
    query = select(UsageRecord).where(UsageRecord.project_id == project_id)
    if filters.kind is not None:
        query = query.where(UsageRecord.kind == filters.kind)
    if filters.cluster_id is not None:
        query = query.where(UsageRecord.cluster_id == filters.cluster_id)
    if filters.resource_id is not None:
        query = query.where(UsageRecord.resource_id == filters.resource_id)
    if filters.start is not None:
        query = query.where(UsageRecord.period_end > filters.start)
    if filters.end is not None:
        query = query.where(UsageRecord.period_start < filters.end)
    if filters.scope is not None:
        # Each line carries its object's labels as charged (a deleted volume's or a reservation's too),
        # so a team sees the lines chargeback counts for it, and a relabel moves none of them.
        query = query.where(scope_filter(UsageRecord.labels, filters.scope))
    return query


def usage_item(row: UsageRecord) -> dict[str, Any]:
    return {
        "id": str(row.id),
        "idempotency_key": row.idempotency_key,
        "kind": row.kind,
        "resource_type": row.resource_type,
        "resource_id": row.resource_id,
        "cluster_id": row.cluster_id,
        "region": row.region,
        "instance_type": row.instance_type,
        "period_start": row.period_start,
        "period_end": row.period_end,
        "seconds": row.seconds,
        "units": str(row.units.normalize()),
        "unit_price_usd": str(row.unit_price_usd),
        "amount_usd": str(micros_to_usd(row.amount_micros)),
        "recorded_at": row.recorded_at,
        "labels": dict(row.labels or {}),
    }


def balance_view(
    session: Session, *, project_id: str, now: datetime, settings: BillingSettings
) -> dict[str, Any]:
    granted = granted_micros(session, project_id)
    balance = balance_micros(session, project_id)
    standing: CreditStanding = credit_standing(session, project_id=project_id, now=now, settings=settings)
    return {
        "billing_mode": billing_mode(session, project_id),
        "prepaid": standing.prepaid,
        "granted_usd": str(micros_to_usd(granted)),
        "charged_usd": str(micros_to_usd(granted - balance)),
        "balance_usd": str(micros_to_usd(balance)),
        "exhausted": standing.exhausted,
        "exhausted_since": standing.exhausted_since,
        "on_demand_paused": standing.pause_on_demand,
        "decommission_at": standing.decommission_at,
        "attach_refused_at": standing.attach_refused_at,
        "attach_refused": standing.refuse_attach,
        "volume_data_deadline": standing.volume_data_deadline,
    }


def invoices_view(session: Session, *, project_id: str, now: datetime) -> list[dict[str, Any]]:
    """Closed months from the invoices table, newest first, led by the open current month."""
    current = month_of(now)
    totals = month_totals(session, project_id=project_id, period=current)
    items = [_invoice_item(current, "open", totals, issued_at=None)]
    for invoice in session.scalars(
        select(Invoice).where(Invoice.project_id == project_id).order_by(Invoice.period.desc())
    ):
        if invoice.period == current:
            continue
        closed = {
            "compute_on_demand": invoice.compute_on_demand_micros,
            "compute_reserved": 0,
            "reservation": invoice.reserved_micros,
            "storage": invoice.storage_micros,
            "reserved_ip": invoice.reserved_ip_micros,
            "lines": invoice.line_count,
        }
        items.append(_invoice_item(invoice.period, "closed", closed, issued_at=invoice.issued_at))
    return items


def _invoice_item(
    period: str, status: str, totals: dict[str, int], *, issued_at: datetime | None
) -> dict[str, Any]:
    start, end = month_bounds(period)
    # Metered compute, spot included (closed invoices store it as one column).
    compute = totals["compute_on_demand"] + totals.get("compute_spot", 0) + totals["compute_reserved"]
    total = compute + totals["reservation"] + totals["storage"] + totals["reserved_ip"]
    return {
        "period": period,
        "status": status,
        "period_start": start,
        "period_end": end,
        "compute_on_demand_usd": str(micros_to_usd(compute)),
        "reserved_upfront_usd": str(micros_to_usd(totals["reservation"])),
        "storage_usd": str(micros_to_usd(totals["storage"])),
        "reserved_ip_usd": str(micros_to_usd(totals["reserved_ip"])),
        "total_usd": str(micros_to_usd(total)),
        "line_count": totals["lines"],
        "issued_at": issued_at,
    }


# Only the columns a cluster response shows, built once: a light row on the hot GET path.
_RESERVATION_SHOWN = select(
    Reservation.term_start,
    Reservation.term_end,
    Reservation.node_count,
    Reservation.upfront_micros,
    Reservation.discount,
    Reservation.on_expiry,
    Reservation.expired_at,
).where(Reservation.cluster_id == bindparam("cluster_id"))


_FIRST_READY = select(EngineCluster.first_ready_at).where(EngineCluster.cluster_id == bindparam("cluster_id"))


def _term_to_charge(
    session: Session, cluster_id: str, spec: Mapping[str, Any], catalog: object
) -> dict[str, Any] | None:
    """The reserved term the next metering pass charges (see `compute_meter.start_reservation`): from when
    the engine first had the cluster RUNNING, at the catalog's reserved price; None when none started."""
    billing = spec.get("billing") or {}
    days = billing.get("duration_days")
    if billing.get("type") != "reserved" or not isinstance(days, int):
        return None
    first_ready = execute_core(session, _FIRST_READY, {"cluster_id": cluster_id}).scalar_one_or_none()
    if first_ready is None:
        return None
    try:
        cost = estimate_cluster_cost(spec, catalog)
    except PricingError:
        return None
    start = to_second(first_ready)
    return {
        "term_start": start,
        "term_end": start + timedelta(days=days),
        "node_count": spec.get("node_count"),
        "upfront_usd": str(cost.upfront_usd),
        "discount": str((cost.reserved_discount or Decimal(0)).normalize()),
        "on_expiry": billing.get("on_expiry") or "decommission",
        "expired": False,
    }


def reserved_node_count(session: Session, cluster_id: str) -> int | None:
    """The node count of the cluster's started reserved term, None before it starts (or on demand)."""
    return session.scalar(select(Reservation.node_count).where(Reservation.cluster_id == cluster_id))


def cluster_billing(
    session: Session, cluster_id: str, *, spec: Mapping[str, Any] | None = None, catalog: object = None
) -> dict[str, Any]:
    """Billing fields of a cluster response: its reserved term (null for on-demand or before RUNNING).

    Given the cluster's `spec` and the `catalog`, a term that started (the cluster first ran) but that no
    metering pass has charged yet is shown as that pass will record it, so its dates are known at once."""
    reservation = execute_core(session, _RESERVATION_SHOWN, {"cluster_id": cluster_id}).one_or_none()
    if reservation is None:
        started = _term_to_charge(session, cluster_id, spec, catalog) if spec is not None else None
        return {"reservation": started}
    return {
        "reservation": {
            "term_start": reservation.term_start,
            "term_end": reservation.term_end,
            "node_count": reservation.node_count,
            "upfront_usd": str(micros_to_usd(reservation.upfront_micros)),
            "discount": str(reservation.discount.normalize()),
            "on_expiry": reservation.on_expiry,
            "expired": reservation.expired_at is not None,
        }
    }
