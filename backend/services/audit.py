"""The audit log: every write is recorded (who, what, when, request id) in the write's transaction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.domain.access import Scope
from backend.domain.clock import utcnow
from backend.store.audit_log import add_event
from backend.store.models import ApiKey, AuditEvent


def record_event(
    *,
    session: Session,
    project_id: str,
    actor: str,
    action: str,
    resource_type: str,
    resource_id: str | None,
    request_id: str | None,
    details: dict[str, Any] | None = None,
) -> None:
    """Add one audit event to the current transaction, stamped now."""
    add_event(session, project_id=project_id, actor=actor, action=action, resource_type=resource_type,
              resource_id=resource_id, at=utcnow(), request_id=request_id, details=details)


def list_events(
    *,
    session: Session,
    project_id: str,
    after_id: str | None,
    limit: int,
    resource_id: str | None = None,
    action: str | None = None,
    actor: str | None = None,
    scope: Scope | None = None,
) -> Sequence[AuditEvent]:
    """A page of a project's audit events, oldest first, after `after_id`; `actor`: one key's (its
    prefix); `scope`: only the events of keys with that team scope (what a scoped admin sees)."""
    query = select(AuditEvent).where(AuditEvent.project_id == project_id)
    if actor is not None:
        query = query.where(AuditEvent.actor == actor)
    if scope is not None:
        team_keys = select(ApiKey.prefix).where(
            ApiKey.project_id == project_id, ApiKey.scope_key == scope.key, ApiKey.scope_value == scope.value
        )
        query = query.where(AuditEvent.actor.in_(team_keys))
    if after_id is not None:
        query = query.where(AuditEvent.id > after_id)
    if resource_id is not None:
        query = query.where(AuditEvent.resource_id == resource_id)
    if action is not None:
        query = query.where(AuditEvent.action == action)
    return session.scalars(query.order_by(AuditEvent.id).limit(limit)).all()
