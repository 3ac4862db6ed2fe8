"""/v1/audit-events: the project's audit log (admins only)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel
from starlette.responses import Response

from backend.api.deps import Writer
from backend.api.listing import page_args, page_body
from backend.api.schemas import WRITE_ERRORS, Page, PageSize, PageToken
from backend.api.state import app_state
from backend.domain.api_keys import DISPLAY_PREFIX_LEN
from backend.services import audit
from backend.store.models import AuditEvent

router = APIRouter(prefix="/v1/audit-events", tags=["audit"])
KIND = "audit_event"
_ERRORS: dict[int | str, dict[str, Any]] = {
    code: WRITE_ERRORS[code] for code in (400, 401, 403, 413, 422, 429)
}


class AuditEventOut(BaseModel):
    id: str
    occurred_at: datetime
    actor: str
    action: str
    resource_type: str
    resource_id: str | None
    request_id: str | None
    details: dict[str, Any]


def to_out(row: AuditEvent) -> AuditEventOut:
    return AuditEventOut(
        id=row.id,
        occurred_at=row.occurred_at,
        actor=row.actor,
        action=row.action,
        resource_type=row.resource_type,
        resource_id=row.resource_id,
        request_id=row.request_id,
        details=row.details,
    )


@router.get("", response_model=Page[AuditEventOut], responses=_ERRORS)
def list_audit_events(
    request: Request,
    principal: Writer,
    page_size: PageSize = None,
    page_token: PageToken = None,
    resource_id: Annotated[str | None, Query(max_length=64, pattern=r"^[a-z]{3}_[0-9a-z]+$")] = None,
    action: Annotated[str | None, Query(max_length=64, pattern=r"^[a-z_]+\.[a-z_]+$")] = None,
    api_key: Annotated[
        str | None,
        Query(
            min_length=DISPLAY_PREFIX_LEN,
            max_length=DISPLAY_PREFIX_LEN,
            pattern=r"^gpc_[0-9A-Za-z]+$",
            description="Only the writes made with this API key: its first 12 characters (`gpc_AbCdEfGh`)",
        ),
    ] = None,
) -> Response:
    """Every write in the project, oldest first (admin keys only; a team-scoped admin key sees the
    writes of its team's keys)."""
    state = app_state(request)
    after_id, limit = page_args(state.settings, kind=KIND, page_size=page_size, page_token=page_token)
    with state.read_sessions() as session:
        rows = audit.list_events(
            session=session,
            project_id=principal.project_id,
            after_id=after_id,
            limit=limit + 1,
            resource_id=resource_id,
            action=action,
            actor=api_key,
            scope=principal.scope,
        )
        page = Page[AuditEventOut].model_validate(page_body(KIND, rows[:limit], len(rows) > limit, to_out))
    return Response(page.model_dump_json(), media_type="application/json")
