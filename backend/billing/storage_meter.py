"""Storage metering: keep each volume's billable life as size segments, then charge TiB-hour slices.

The volume table only holds live volumes, so the job records a segment when it first sees a volume,
closes it when the volume is gone (at the time of the `volume.delete` audit event) and starts a new
one when the size changed (at the volume's `updated_at`, the moment of the resize).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from functools import partial

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.billing.clock import ensure_utc
from backend.billing.ledger import PendingCharge
from backend.billing.meter import UsageItem, storage_usage_items, to_second, unbilled_seconds
from backend.billing.money import prorate_micros
from backend.billing.pricing import PriceBook
from backend.store.billing_models import UsageRecord, VolumeSegment
from backend.store.models import AuditEvent, Volume


def sync_volume_segments(session: Session, *, project_id: str, now: datetime) -> None:
    """Bring the project's open volume segments in line with its live volumes."""
    volumes = {v.id: v for v in session.scalars(select(Volume).where(Volume.project_id == project_id))}
    of_project = select(VolumeSegment).where(VolumeSegment.project_id == project_id)
    still_open = of_project.where(VolumeSegment.ended_at.is_(None))
    open_segments = {s.volume_id: s for s in session.scalars(still_open)}
    for volume_id, segment in open_segments.items():
        volume = volumes.get(volume_id)
        if volume is None:
            segment.ended_at = max(ensure_utc(segment.started_at), _deleted_at(session, volume_id) or now)
        elif Decimal(volume.size_tib) != segment.size_tib:
            resized_at = max(ensure_utc(segment.started_at), to_second(ensure_utc(volume.updated_at)))
            if resized_at == ensure_utc(segment.started_at):
                segment.size_tib = Decimal(volume.size_tib)  # resized within its first second
            else:
                segment.ended_at = resized_at
                session.add(_segment(volume, started_at=resized_at))
    known = {s.volume_id for s in session.scalars(of_project)}
    for volume_id, volume in volumes.items():
        if volume_id not in known:
            session.add(_segment(volume, started_at=to_second(ensure_utc(volume.created_at))))
    session.flush()


def storage_records(
    session: Session, *, project_id: str, prices: PriceBook, cutoff: datetime, now: datetime
) -> list[PendingCharge]:
    """Charges for every final hour slice of the project's volume segments (stored or not)."""
    records: list[PendingCharge] = []
    segments = session.scalars(select(VolumeSegment).where(VolumeSegment.project_id == project_id))
    for segment in segments:
        items = storage_usage_items(
            volume_id=segment.volume_id,
            size_tib=segment.size_tib,
            start=ensure_utc(segment.started_at),
            end=None if segment.ended_at is None else ensure_utc(segment.ended_at),
            tib_hour_usd=prices.storage_tib_hour(segment.region),
            cutoff=cutoff,
        )
        region = segment.region
        records.extend(
            PendingCharge(
                item.key,
                partial(
                    usage_record, item, project_id=project_id, region=region, resource_type="volume", now=now
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
) -> UsageRecord:
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
    )


def _segment(volume: Volume, *, started_at: datetime) -> VolumeSegment:
    return VolumeSegment(
        volume_id=volume.id,
        project_id=volume.project_id,
        region=volume.region,
        size_tib=Decimal(volume.size_tib),
        started_at=started_at,
    )


def _deleted_at(session: Session, volume_id: str) -> datetime | None:
    occurred = session.scalar(
        select(AuditEvent.occurred_at)
        .where(AuditEvent.resource_id == volume_id, AuditEvent.action == "volume.delete")
        .order_by(AuditEvent.occurred_at.desc())
        .limit(1)
    )
    return None if occurred is None else to_second(ensure_utc(occurred))


def storage_accrued_micros(
    session: Session, *, project_id: str, prices: PriceBook, cutoff: datetime, now: datetime
) -> int:
    """Storage used up to `now` that no charge covers yet (open volume segments' current slices)."""
    total = 0
    for segment in session.scalars(
        select(VolumeSegment).where(VolumeSegment.project_id == project_id, VolumeSegment.ended_at.is_(None))
    ):
        seconds = unbilled_seconds(ensure_utc(segment.started_at), None, cutoff=cutoff, now=now)
        total += prorate_micros(prices.storage_tib_hour(segment.region), segment.size_tib, seconds)
    return total
