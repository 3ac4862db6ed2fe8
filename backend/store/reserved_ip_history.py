"""The reserved IP history billing meters from: the reserved IP service (and the engine, when a cluster
that held one ends) appends an event with every reserve, attach, detach and release, in the transaction
of the change (a rename or relabel costs nothing: no event). In the store, below both of its writers:
the engine must not depend on billing to record what billing reads."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from backend.domain.clock import ensure_utc
from backend.store.billing_models import ReservedIpEvent
from backend.store.models import ReservedIp

RESERVED, ATTACHED, DETACHED, RELEASED = "reserved", "attached", "detached", "released"


def record_reserved_ip_event(session: Session, *, reserved_ip: ReservedIp, event: str, at: datetime,
                             cluster_id: str | None = None) -> None:
    """Append `event` (reserved | attached | detached | released) for `reserved_ip` from `at` on."""
    if event not in (RESERVED, ATTACHED, DETACHED, RELEASED):
        raise ValueError(f"unknown reserved IP event {event!r}")
    session.add(ReservedIpEvent(reserved_ip_id=reserved_ip.id, project_id=reserved_ip.project_id,
                                region=reserved_ip.region, event=event, cluster_id=cluster_id,
                                at=ensure_utc(at), labels=dict(reserved_ip.labels or {})))
