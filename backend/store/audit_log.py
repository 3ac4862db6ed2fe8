"""The one writer of audit rows: API writes, operator commands, billing and the engine all add their
events through `add_event`, so every row has the same shape (id, aware UTC time, actor, what, request)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import insert
from sqlalchemy.orm import Session

from backend.domain.ids import new_id
from backend.store.db import execute_core
from backend.store.models import AuditEvent

_INSERT_EVENT = insert(AuditEvent)


def add_event(
    session: Session,
    *,
    project_id: str,
    actor: str,
    action: str,
    resource_type: str,
    resource_id: str | None,
    at: datetime,
    request_id: str | None = None,
    details: dict[str, Any] | None = None,
) -> None:
    """Add one audit event to the session's transaction (`actor`: a key prefix, "cli", "billing", the
    engine's name; `request_id`: the API request that caused it, None for everything else).

    Inserted at once (after flushing what the session holds) as a plain row: the ORM's flush of one
    more object cost more than the insert itself, on every write."""
    execute_core(session, _INSERT_EVENT, dict(
        id=new_id("audit_event"),
        project_id=project_id,
        occurred_at=at.astimezone(UTC) if at.tzinfo is not None else at.replace(tzinfo=UTC),
        actor=actor,
        action=action,
        resource_type=resource_type,
        resource_id=resource_id,
        request_id=request_id,
        details=details or {},
    ))
