"""The HTTP edge of a write: parse `Idempotency-Key`, fingerprint the request, run the operation in the
services' unit of work (backend.services.unit_of_work: transaction, idempotency, audit, races) and
render what it answers as the Response."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from fastapi import Request
from pydantic import BaseModel
from pydantic_core import to_jsonable_python
from sqlalchemy.orm import Session
from starlette.responses import Response

from backend.api.problems import request_id_of
from backend.api.schemas import WRITE_ONLY
from backend.api.state import app_state
from backend.domain.errors import BadRequest
from backend.services import idempotency
from backend.services.auth import Principal
from backend.services.unit_of_work import IdempotencyClaim, UnitOfWork, WriteOutcome, WriteResult

__all__ = ["WriteOutcome", "run_write"]

_KEY_PATTERN = re.compile(r"^[\x21-\x7e]{1,255}$")
# What every write's audit record shows for a write-only field (`backend.api.schemas.WRITE_ONLY`).
RECORDED_SECRET = "(write-only: not recorded)"


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


def _recorded(value: Any) -> Any:
    """`value` as the audit log keeps it: the fields a request set, write-only ones replaced."""
    if isinstance(value, BaseModel):
        fields = type(value).model_fields
        return {name: RECORDED_SECRET if fields[name].json_schema_extra == WRITE_ONLY and
                getattr(value, name) is not None else _recorded(getattr(value, name))
                for name in value.model_fields_set}
    if isinstance(value, dict):
        return {key: _recorded(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_recorded(item) for item in value]
    return to_jsonable_python(value)


def _response(result: WriteResult) -> Response:
    stored = result.response
    headers = dict(stored.headers)
    if result.replayed:
        headers["Idempotent-Replayed"] = "true"
    if stored.status == 204 or not stored.body:
        return Response(status_code=stored.status, headers=headers)
    return Response(stored.body, status_code=stored.status, media_type="application/json", headers=headers)


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
    payload = _recorded(body) if body is not None else None
    claim = None
    if key is not None:
        # The whole body, secrets included: a retry with another password is another request.
        fingerprinted = json.dumps(body.model_dump(mode="json", exclude_unset=True) if body else None,
                                   sort_keys=True)
        if principal.scope is not None:
            # Idempotency keys are per project: another team's request under the same key is not replayed.
            fingerprinted += f"\nscope={principal.scope}"
        fingerprint = idempotency.request_fingerprint(
            method=request.method, path=request.url.path, body=fingerprinted.encode()
        )
        claim = IdempotencyClaim(key, fingerprint)
    unit = UnitOfWork(state.write_sessions, idempotency_ttl_hours=state.settings.idempotency_ttl_hours)
    result = unit.run(
        principal=principal, action=action, operation=operation, request_id=request_id_of(request),
        claim=claim, payload=payload,
    )
    return _response(result)
