"""Monthly invoices: a summary per project and month, written once the month is over."""

from __future__ import annotations

import calendar
from datetime import UTC, datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.domain.clock import ensure_utc
from backend.store.billing_models import Invoice, UsageRecord


def month_bounds(period: str) -> tuple[datetime, datetime]:
    """[first instant, first instant of the next month) of "YYYY-MM", in UTC."""
    year, month = (int(part) for part in period.split("-"))
    start = datetime(year, month, 1, tzinfo=UTC)
    days = calendar.monthrange(year, month)[1]
    end = datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=UTC)
    assert (end - start).days == days
    return start, end


def month_of(moment: datetime) -> str:
    return ensure_utc(moment).strftime("%Y-%m")


def month_totals(session: Session, *, project_id: str, period: str) -> dict[str, int]:
    """Micro-dollar totals per usage kind (and the line count) of a project's month."""
    start, end = month_bounds(period)
    rows = session.execute(
        select(UsageRecord.kind, func.sum(UsageRecord.amount_micros), func.count())
        .where(
            UsageRecord.project_id == project_id,
            UsageRecord.period_start >= start,
            UsageRecord.period_start < end,
        )
        .group_by(UsageRecord.kind)
    ).all()
    kinds = ("compute_on_demand", "compute_spot", "compute_reserved", "reservation", "storage", "reserved_ip",
             "lines")
    totals = dict.fromkeys(kinds, 0)
    for kind, amount, count in rows:
        totals[kind] = totals.get(kind, 0) + int(amount or 0)
        totals["lines"] += int(count)
    return totals


def issue_invoices(session: Session, *, project_id: str, cutoff: datetime, now: datetime) -> int:
    """Write the invoice of every month that is over (by `cutoff`) and has usage but no invoice yet."""
    issued = {p for p in session.scalars(select(Invoice.period).where(Invoice.project_id == project_id))}
    first = session.scalar(
        select(func.min(UsageRecord.period_start)).where(UsageRecord.project_id == project_id)
    )
    if first is None:
        return 0
    count = 0
    period = month_of(first)
    current = month_of(cutoff)
    while period < current:
        if period not in issued:
            totals = month_totals(session, project_id=project_id, period=period)
            if totals["lines"]:
                session.add(_invoice(project_id, period, totals, now))
                count += 1
        period = month_of(month_bounds(period)[1])
    return count


def _invoice(project_id: str, period: str, totals: dict[str, int], now: datetime) -> Invoice:
    on_demand = totals["compute_on_demand"] + totals["compute_spot"] + totals["compute_reserved"]
    return Invoice(
        project_id=project_id,
        period=period,
        compute_on_demand_micros=on_demand,
        reserved_micros=totals["reservation"],
        storage_micros=totals["storage"],
        reserved_ip_micros=totals["reserved_ip"],
        total_micros=on_demand + totals["reservation"] + totals["storage"] + totals["reserved_ip"],
        line_count=totals["lines"],
        issued_at=now,
    )
