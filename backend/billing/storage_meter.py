"""Storage metering: the volume history (`volume_events`, append-only, written by the volume service with
every create, resize and delete) -> size segments -> priced TiB-hour slices.

Like compute from node transitions, nothing depends on what a pass saw: a volume created and deleted
between two passes, or during a billing outage, is charged for exactly the seconds it existed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from functools import partial

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.billing.ledger import PendingCharge
from backend.billing.meter import (
    StorageSegment,
    UsageItem,
    VolumeChange,
    storage_segments,
    storage_usage_items,
    unbilled_seconds,
)
from backend.billing.money import prorate_micros
from backend.billing.pricing import PriceBook
from backend.domain.clock import ensure_utc
from backend.store.billing_models import UsageRecord, VolumeEvent
from backend.store.models import Volume


@dataclass(frozen=True)
class VolumeUsage:
    region: str
    segment: StorageSegment
    labels: Mapping[str, str] = field(default_factory=dict)  # written onto each line (chargeback)


def load_volume_usage(session: Session, *, project_id: str) -> list[VolumeUsage]:
    """Every size segment of every volume the project ever had, from its history, with the volume's
    labels now (those of its last event once it is deleted)."""
    rows = session.scalars(
        select(VolumeEvent)
        .where(VolumeEvent.project_id == project_id)
        .order_by(VolumeEvent.at, VolumeEvent.id)
    ).all()
    regions = {row.volume_id: row.region for row in rows}
    labels = {row.volume_id: dict(row.labels or {}) for row in rows}
    live = select(Volume.id, Volume.labels).where(Volume.project_id == project_id)
    labels.update({row.id: dict(row.labels or {}) for row in session.execute(live)})
    changes = [VolumeChange(r.volume_id, r.event, Decimal(r.size_tib), r.at) for r in rows]
    return [VolumeUsage(regions[s.volume_id], s, labels[s.volume_id]) for s in storage_segments(changes)]


def storage_records(
    volumes: list[VolumeUsage], *, project_id: str, prices: PriceBook, cutoff: datetime, now: datetime
) -> list[PendingCharge]:
    """Charges for every final hour slice of the project's volume segments (stored or not)."""
    records: list[PendingCharge] = []
    for volume in volumes:
        segment = volume.segment
        items = storage_usage_items(
            volume_id=segment.volume_id,
            size_tib=segment.size_tib,
            start=segment.start,
            end=segment.end,
            tib_hour_usd=prices.storage_tib_hour(volume.region),
            cutoff=cutoff,
        )
        records.extend(
            PendingCharge(
                item.key,
                partial(
                    usage_record,
                    item,
                    project_id=project_id,
                    region=volume.region,
                    resource_type="volume",
                    now=now,
                    labels=volume.labels,
                ),
            )
            for item in items
        )
    return records


def usage_record(
    item: UsageItem,
    *,
    project_id: str,
    region: str,
    resource_type: str,
    now: datetime,
    cluster_id: str | None = None,
    instance_type: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> UsageRecord:
    """The usage line of `item`, carrying its object's labels as they are when it is charged."""
    return UsageRecord(
        idempotency_key=item.key,
        project_id=project_id,
        kind=str(item.kind),
        resource_type=resource_type,
        resource_id=item.resource_id,
        cluster_id=cluster_id,
        region=region,
        instance_type=instance_type,
        period_start=item.start,
        period_end=item.end,
        seconds=item.seconds,
        units=item.units,
        unit_price_usd=item.unit_price_usd,
        amount_micros=item.amount_micros,
        recorded_at=ensure_utc(now),
        labels=dict(labels or {}),
    )


def storage_accrued_micros(
    volumes: list[VolumeUsage], *, prices: PriceBook, cutoff: datetime, now: datetime
) -> int:
    """Storage used up to `now` that no charge covers yet (the current slices of every segment)."""
    return sum(
        prorate_micros(
            prices.storage_tib_hour(v.region),
            v.segment.size_tib,
            unbilled_seconds(v.segment.start, v.segment.end, cutoff=cutoff, now=now),
        )
        for v in volumes
    )
