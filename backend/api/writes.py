"""Running a write: one transaction holding the change, its audit event and its idempotency record.

A POST carrying `Idempotency-Key` whose key was seen before replays the stored response (same request)
or answers 422 (different request).

Lost races: two concurrent requests can both pass a service's "does it exist yet?" check (same
Idempotency-Key, the same SSH key twice) and the loser's insert then violates a unique constraint. Only a
unique violation can be such a race, so only it is retried, once: the retry runs the checks again against
the winner's committed row and answers what they say (a replay, the service's own 409, or success). Any
other integrity failure, or a unique violation that survives the retry, is a bug (a rule the services do
not check): it is logged with its traceback and answered 500 with the request id, never 409 "retry".
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

import structlog
from fastapi import Request
from pydantic import BaseModel
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from starlette.responses import Response

from backend.api.problems import request_id_of
from backend.api.state import app_state
from backend.domain.errors import ApiError, BadRequest
from backend.services import audit, idempotency
from backend.services.auth import Principal
from backend.services.idempotency import StoredResponse

_KEY_PATTERN = re.compile(r"^[\x21-\x7e]{1,255}$")
_log = structlog.get_logger("gpucloud.api")
# How each driver names a unique violation: SQLite's extended result codes, PostgreSQL's SQLSTATE.
_SQLITE_UNIQUE = ("SQLITE_CONSTRAINT_UNIQUE", "SQLITE_CONSTRAINT_PRIMARYKEY")
_POSTGRES_UNIQUE = "23505"


@dataclass
class WriteOutcome:
    """What a write produced: the response body (None for 204) and what the audit log records."""

    resource_type: str
    resource_id: str | None
    body: BaseModel | None = None
    status: int = 200
    etag: str | None = None
    location: str | None = None


def _stored(outcome: WriteOutcome) -> StoredResponse:
    headers: dict[str, str] = {}
    if outcome.etag:
        headers["ETag"] = outcome.etag
    if outcome.location:
        headers["Location"] = outcome.location
    body = outcome.body.model_dump_json() if outcome.body is not None else ""
    return StoredResponse(status=outcome.status, body=body, headers=headers)


def _response(stored: StoredResponse, *, replayed: bool = False) -> Response:
    headers = dict(stored.headers)
    if replayed:
        headers["Idempotent-Replayed"] = "true"
    if stored.status == 204 or not stored.body:
        return Response(status_code=stored.status, headers=headers)
    return Response(stored.body, status_code=stored.status, media_type="application/json", headers=headers)


def _idempotency_key(request: Request) -> str | None:
    if request.method != "POST":
        return None
    key = request.headers.get("idempotency-key")
    if key is None:
        return None
    if not _KEY_PATTERN.match(key):
        raise BadRequest(
            "Idempotency-Key must be 1-255 visible ASCII characters",
            field="Idempotency-Key",
            code="invalid_idempotency_key",
        )
    return key


def run_write(
    request: Request,
    principal: Principal,
    *,
    action: str,
    operation: Callable[[Session], WriteOutcome],
    body: BaseModel | None = None,
) -> Response:
    """Run `operation` in a write transaction with audit and idempotency; return the HTTP response."""
    state = app_state(request)
    key = _idempotency_key(request)
    payload = body.model_dump(mode="json", exclude_unset=True) if body is not None else None
    fingerprinted = json.dumps(payload, sort_keys=True)
    if principal.scope is not None:
        # Idempotency keys are per project: another team's request under the same key is not replayed.
        fingerprinted += f"\nscope={principal.scope}"
    fingerprint = idempotency.request_fingerprint(
        method=request.method, path=request.url.path, body=fingerprinted.encode()
    )
    for attempt in (1, 2):
        try:
            with state.write_sessions.begin() as session:
                if key is not None:
                    replay = idempotency.find_replay(
                        session=session, project_id=principal.project_id, key=key, fingerprint=fingerprint
                    )
                    if replay is not None:
                        return _response(replay, replayed=True)
                outcome = operation(session)
                stored = _stored(outcome)
                if key is not None:
                    idempotency.save_response(
                        session=session,
                        project_id=principal.project_id,
                        key=key,
                        fingerprint=fingerprint,
                        response=stored,
                        ttl_hours=state.settings.idempotency_ttl_hours,
                    )
                audit.record_event(
                    session=session,
                    project_id=principal.project_id,
                    actor=principal.key_prefix,
                    action=action,
                    resource_type=outcome.resource_type,
                    resource_id=outcome.resource_id,
                    request_id=request_id_of(request),
                    details={"request": payload, "status": outcome.status},
                )
            return _response(stored)
        except IntegrityError as error:
            violation = _violation(error)
            if attempt == 1 and _is_unique_violation(error):
                _log.info(
                    "write.lost_race", action=action, violation=violation, request_id=request_id_of(request)
                )
                continue
            _log.error(
                "write.integrity_error",
                action=action,
                violation=violation,
                attempt=attempt,
                request_id=request_id_of(request),
                exc_info=True,
            )
            raise ApiError("an internal error occurred; it has been logged", code="internal_error") from None
    raise AssertionError("unreachable")


def _is_unique_violation(error: IntegrityError) -> bool:
    """True for a unique/primary key violation (possibly a lost race), False for FK, NOT NULL, CHECK."""
    driver_error = error.orig
    return (
        getattr(driver_error, "sqlite_errorname", None) in _SQLITE_UNIQUE
        or getattr(driver_error, "sqlstate", None) == _POSTGRES_UNIQUE
    )


def _violation(error: IntegrityError) -> str:
    """The driver's first line: names the constraint (PostgreSQL's DETAIL line with values stays out)."""
    lines = str(error.orig).strip().splitlines()
    return lines[0] if lines else type(error.orig).__name__
