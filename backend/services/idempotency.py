"""Idempotency records: a POST's response stored under its Idempotency-Key for replay (>= 24 h)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from backend.domain.errors import Unprocessable
from backend.services.clock import utcnow
from backend.store.models import IdempotencyRecord


@dataclass(frozen=True)
class StoredResponse:
    """A response as sent: status, JSON body text and the headers worth replaying."""

    status: int
    body: str
    headers: dict[str, str]


def request_fingerprint(*, method: str, path: str, body: bytes) -> str:
    """Digest of what a key was used for; JSON bodies are canonicalised so formatting does not matter."""
    try:
        canonical = json.dumps(json.loads(body), sort_keys=True, separators=(",", ":")).encode()
    except ValueError:
        canonical = body
    return hashlib.sha256(method.encode() + b" " + path.encode() + b"\n" + canonical).hexdigest()


def find_replay(*, session: Session, project_id: str, key: str, fingerprint: str) -> StoredResponse | None:
    """The stored response for `key`, or None; 422 if the key was used for a different request."""
    record = session.scalar(
        select(IdempotencyRecord).where(
            IdempotencyRecord.project_id == project_id,
            IdempotencyRecord.key == key,
            IdempotencyRecord.expires_at > utcnow(),
        )
    )
    if record is None:
        return None
    if record.request_fingerprint != fingerprint:
        raise Unprocessable(
            "this Idempotency-Key was already used with a different request; use a new key",
            field="Idempotency-Key",
            code="idempotency_key_reused",
        )
    return StoredResponse(record.response_status, record.response_body, dict(record.response_headers))


def save_response(
    *, session: Session, project_id: str, key: str, fingerprint: str, response: StoredResponse, ttl_hours: int
) -> None:
    """Store `response` under `key` in the current transaction; expired records go (an indexed delete)."""
    now = utcnow()
    session.execute(delete(IdempotencyRecord).where(IdempotencyRecord.expires_at <= now))
    session.add(
        IdempotencyRecord(
            project_id=project_id,
            key=key,
            request_fingerprint=fingerprint,
            response_status=response.status,
            response_body=response.body,
            response_headers=response.headers,
            created_at=now,
            expires_at=now + timedelta(hours=ttl_hours),
        )
    )
