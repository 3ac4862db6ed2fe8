"""Idempotency records: a POST's response stored under its Idempotency-Key for replay (>= 24 h).

A retry can arrive while the first request with its key is still running (a load balancer retries a
slow POST on another replica). `hold_key` makes it wait for that one: on PostgreSQL a transaction-scoped
advisory lock on (project, key), taken first thing in the write transaction, so the retry's transaction
waits until the first commits (and then finds its record to replay) or rolls back (and then runs
itself). A claimer that dies loses its connection and with it the lock: no stale claims to clean up.
SQLite needs nothing: a write transaction takes the database's write lock at BEGIN, across processes.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import bindparam, delete, insert, select, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from backend.domain.clock import utcnow
from backend.domain.errors import Conflict, Unprocessable
from backend.store.db import execute_core
from backend.store.models import IdempotencyRecord

# Expired records are deleted by the first POST after this many seconds (per process), not by every POST.
PURGE_EVERY_SECONDS = 60.0
_purge = {"last": -PURGE_EVERY_SECONDS}
_purge_guard = threading.Lock()


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


def hold_key(*, session: Session, project_id: str, key: str, wait_seconds: float) -> None:
    """Wait (at most `wait_seconds`) until no other transaction holds `key`, and hold it until this one
    ends; 409 `idempotency_key_in_flight` when the first request is still running after that."""
    if session.get_bind().dialect.name != "postgresql":
        return
    digest = hashlib.sha256(f"idempotency\0{project_id}\0{key}".encode()).digest()
    lock_id = int.from_bytes(digest[:8], "big", signed=True)
    # Nearly always the key is free: one round trip takes it. Otherwise wait for it, bounded.
    if session.execute(text("SELECT pg_try_advisory_xact_lock(:lock_id)"), {"lock_id": lock_id}).scalar_one():
        return
    previous = session.execute(
        text("SELECT current_setting('lock_timeout'), set_config('lock_timeout', :wait, true)"),
        {"wait": f"{max(1, int(wait_seconds * 1000))}ms"},
    ).scalar_one()
    try:
        session.execute(
            text("SELECT pg_advisory_xact_lock(:lock_id), set_config('lock_timeout', :previous, true)"),
            {"lock_id": lock_id, "previous": previous},
        )
    except OperationalError as error:
        if getattr(error.orig, "sqlstate", None) != "55P03":  # lock_not_available
            raise
        raise Conflict(
            f"a request with this Idempotency-Key is still in progress after {wait_seconds:g} s; retry "
            "later to get its response",
            field="Idempotency-Key",
            code="idempotency_key_in_flight",
            headers={"Retry-After": "1"},
        ) from None


# Prebuilt column statements run on the session's connection (`execute_core`): every keyed POST runs
# them, and the ORM's entity loading and flush are most of their cost.
_RECORD = select(
    IdempotencyRecord.id, IdempotencyRecord.request_fingerprint, IdempotencyRecord.response_status,
    IdempotencyRecord.response_body, IdempotencyRecord.response_headers, IdempotencyRecord.expires_at,
).where(IdempotencyRecord.project_id == bindparam("project_id"), IdempotencyRecord.key == bindparam("key"))
_DELETE_RECORD = delete(IdempotencyRecord).where(IdempotencyRecord.id == bindparam("record_id"))
_INSERT_RECORD = insert(IdempotencyRecord)


def find_replay(*, session: Session, project_id: str, key: str, fingerprint: str) -> StoredResponse | None:
    """The stored response for `key`, or None; 422 if the key was used for a different request."""
    record = execute_core(session, _RECORD, {"project_id": project_id, "key": key}).one_or_none()
    if record is None:
        return None
    if record.expires_at <= utcnow():
        # Expired (the periodic purge has not reached it yet): the key is free again.
        execute_core(session, _DELETE_RECORD, {"record_id": record.id})
        return None
    if record.request_fingerprint != fingerprint:
        raise Unprocessable(
            "this Idempotency-Key was already used with a different request; use a new key",
            field="Idempotency-Key",
            code="idempotency_key_reused",
        )
    return StoredResponse(record.response_status, record.response_body, dict(record.response_headers))


def _purge_expired(session: Session, now: datetime) -> None:
    """Delete the expired records, if this process has not done so in the last `PURGE_EVERY_SECONDS`."""
    with _purge_guard:
        tick = time.monotonic()
        if tick - _purge["last"] < PURGE_EVERY_SECONDS:
            return
        _purge["last"] = tick
    session.execute(delete(IdempotencyRecord).where(IdempotencyRecord.expires_at <= now))


def save_response(
    *, session: Session, project_id: str, key: str, fingerprint: str, response: StoredResponse, ttl_hours: int
) -> None:
    """Store `response` under `key` in the current transaction; expired records go (an indexed delete,
    at most once every `PURGE_EVERY_SECONDS` per process: `find_replay` frees an expired key itself)."""
    now = utcnow()
    _purge_expired(session, now)
    execute_core(session, _INSERT_RECORD, {
        "project_id": project_id,
        "key": key,
        "request_fingerprint": fingerprint,
        "response_status": response.status,
        "response_body": response.body,
        "response_headers": response.headers,
        "created_at": now,
        "expires_at": now + timedelta(hours=ttl_hours),
    })
