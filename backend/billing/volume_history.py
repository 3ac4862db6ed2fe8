"""The volume history storage is metered from: the volume service appends an event with every create,
resize and delete, in the transaction of the change (a rename is not an event: it costs nothing)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from sqlalchemy.orm import Session

from backend.domain.clock import ensure_utc
from backend.store.billing_models import VolumeEvent
from backend.store.models import Volume

CREATED, RESIZED, DELETED = "created", "resized", "deleted"


def record_volume_event(session: Session, *, volume: Volume, event: str, at: datetime) -> None:
    """Append `event` (created | resized | deleted) for `volume` at its size from `at` on."""
    if event not in (CREATED, RESIZED, DELETED):
        raise ValueError(f"unknown volume event {event!r}")
    session.add(
        VolumeEvent(
            volume_id=volume.id,
            project_id=volume.project_id,
            region=volume.region,
            event=event,
            size_tib=Decimal(volume.size_tib),
            at=ensure_utc(at),
            labels=dict(volume.labels or {}),
        )
    )
