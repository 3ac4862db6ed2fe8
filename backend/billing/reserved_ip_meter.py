"""Reserved IP metering: the reserved IP history (`reserved_ip_events`, append-only, written with every
reserve, attach, detach and release) -> segments at one rate -> priced hour slices.

An address is billed per hour from its reservation until its release: at the reserved rate while no
cluster holds it, at the lower attached rate while one does. As storage, nothing depends on what a pass
saw: an attachment between two passes is charged for exactly its seconds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from functools import partial

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.billing.ledger import PendingCharge
from backend.billing.meter import UsageItem, UsageKind, hour_slices, stamp, to_second, unbilled_seconds
from backend.billing.money import prorate_micros
from backend.billing.pricing import PriceBook
from backend.billing.storage_meter import usage_record
from backend.store.billing_models import ReservedIpEvent
from backend.store.models import ReservedIp


@dataclass(frozen=True)
class ReservedIpChange:
    reserved_ip_id: str
    event: str  # reserved | attached | detached | released
    at: datetime


@dataclass(frozen=True)
class ReservedIpSegment:
    """A stretch of a reserved IP's life at one rate."""

    reserved_ip_id: str
    region: str
    attached: bool
    start: datetime
    end: datetime | None  # None: still reserved in this state
    labels: Mapping[str, str] = field(default_factory=dict)  # written onto each line (chargeback)


def reserved_ip_segments(
    changes: Iterable[ReservedIpChange], regions: dict[str, str]
) -> list[ReservedIpSegment]:
    """Per address, its life cut at every attach and detach (ties in time keep the input order; a
    stretch of no whole second is dropped: nothing of it can be charged)."""
    by_ip: dict[str, list[ReservedIpChange]] = {}
    for change in changes:
        by_ip.setdefault(change.reserved_ip_id, []).append(change)
    segments: list[ReservedIpSegment] = []
    for ip_id, history in by_ip.items():
        opened: ReservedIpSegment | None = None
        for change in sorted(history, key=lambda c: c.at):
            moment = to_second(change.at)
            if change.event == "reserved" and opened is None:
                opened = ReservedIpSegment(ip_id, regions[ip_id], False, moment, None)
                continue
            if opened is None or change.event not in ("attached", "detached", "released"):
                continue
            attached = change.event == "attached"
            if change.event != "released" and attached == opened.attached:
                continue
            if moment > opened.start:
                segments.append(replace(opened, end=moment))
            opened = (None if change.event == "released"
                      else replace(opened, attached=attached, start=max(moment, opened.start)))
        if opened is not None:
            segments.append(opened)
    segments.sort(key=lambda s: (s.start, s.reserved_ip_id))
    return segments


def load_reserved_ip_usage(session: Session, *, project_id: str) -> list[ReservedIpSegment]:
    """Every rate segment of every reserved IP the project ever had, from its history, with the
    address's labels now (those of its last event once it is gone)."""
    rows = session.scalars(
        select(ReservedIpEvent).where(ReservedIpEvent.project_id == project_id)
        .order_by(ReservedIpEvent.at, ReservedIpEvent.id)
    ).all()
    regions = {row.reserved_ip_id: row.region for row in rows}
    labels = {row.reserved_ip_id: dict(row.labels or {}) for row in rows}
    live = select(ReservedIp.id, ReservedIp.labels).where(ReservedIp.project_id == project_id)
    labels.update({row.id: dict(row.labels or {}) for row in session.execute(live) if row.id in labels})
    changes = [ReservedIpChange(r.reserved_ip_id, r.event, r.at) for r in rows]
    return [replace(s, labels=labels[s.reserved_ip_id]) for s in reserved_ip_segments(changes, regions)]


def reserved_ip_usage_items(
    segment: ReservedIpSegment, *, hour_usd: Decimal, cutoff: datetime
) -> list[UsageItem]:
    """Priced, keyed line items for the final hour slices of one segment (its start is in the keys)."""
    items = []
    for slice_start, slice_end in hour_slices(segment.start, segment.end, cutoff):
        seconds = int((slice_end - slice_start).total_seconds())
        items.append(UsageItem(
            key=f"reserved_ip:{segment.reserved_ip_id}:{stamp(segment.start)}:{stamp(slice_start)}",
            kind=UsageKind.RESERVED_IP,
            resource_id=segment.reserved_ip_id,
            start=slice_start,
            end=slice_end,
            seconds=seconds,
            units=Decimal(1),
            unit_price_usd=hour_usd,
            amount_micros=prorate_micros(hour_usd, 1, seconds),
        ))
    return items


def reserved_ip_records(segments: list[ReservedIpSegment], *, project_id: str, prices: PriceBook,
                        cutoff: datetime, now: datetime) -> list[PendingCharge]:
    """Charges for every final hour slice of the project's reserved IP segments (stored or not)."""
    records: list[PendingCharge] = []
    for segment in segments:
        price = prices.reserved_ip_hour(segment.region, attached=segment.attached)
        records.extend(
            PendingCharge(item.key, partial(usage_record, item, project_id=project_id, region=segment.region,
                                            resource_type="reserved_ip", now=now, labels=segment.labels))
            for item in reserved_ip_usage_items(segment, hour_usd=price, cutoff=cutoff)
        )
    return records


def reserved_ip_accrued_micros(segments: list[ReservedIpSegment], *, prices: PriceBook, cutoff: datetime,
                               now: datetime) -> int:
    """Reserved IP time up to `now` that no charge covers yet."""
    return sum(
        prorate_micros(prices.reserved_ip_hour(s.region, attached=s.attached), 1,
                       unbilled_seconds(s.start, s.end, cutoff=cutoff, now=now))
        for s in segments
    )
