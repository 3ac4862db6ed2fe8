"""The unit of work: one write transaction holding the change, its audit event and its idempotency
record, and the one place where what the database says about a race becomes a documented answer.

Idempotency: a POST whose `Idempotency-Key` was seen before replays the stored response (same request)
or answers 422 (different request); one arriving while the first is still running waits for it
(`idempotency.hold_key`) and then replays it.

Races: the services check ("does it exist?", "is it referenced?") and then act, in one transaction.
A concurrent transaction can commit between the check and the act; the database then refuses the act:
- a unique or foreign-key violation is retried once: the retry runs the checks again against what the
  winner committed and answers what they say (a replay, the service's own 404/409/422, or success);
  one that survives the retry is answered 409 when it is a business rule (a unique field, deleting what
  is still referenced) and is otherwise a bug: logged with its traceback, 500 with the request id;
- a deadlock or serialization failure (PostgreSQL 40P01/40001) is retried a few times, then 409
  `conflict_retry` with Retry-After.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import structlog
from pydantic import BaseModel
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from backend.domain.clock import utcnow
from backend.domain.errors import ApiError, Conflict
from backend.services import audit, idempotency
from backend.services.auth import Principal
from backend.services.idempotency import StoredResponse
from backend.store.audit_log import add_event
from backend.store.db_errors import DbFailure, classify

_log = structlog.get_logger("gpucloud.services")

# How long a retry waits for the first request with its Idempotency-Key (a load balancer's retry of a
# slow POST): as long as a request may take.
IDEMPOTENCY_WAIT_SECONDS = 30.0
# Deadlocks and serialization failures: this many attempts in all, with a short jittered backoff.
TRANSIENT_ATTEMPTS = 4
_BACKOFF_SECONDS = 0.02

# Unique constraints that are business rules, and the request field each one is about.
_BUSINESS_UNIQUE = {
    "uq_ssh_keys_project_fingerprint": ("public_key", "an SSH key with this fingerprint already exists"),
    "uq_projects_name": ("name", "a project with this name already exists"),
    "ix_clusters_reserved_ip_id": ("reserved_ip_id", "the reserved IP was attached to another cluster"),
}
# Referencing tables (a foreign-key violation's) -> what users call them.
_REFERENCING = {
    "clusters": "clusters",
    "cluster_volumes": "clusters",
    "cluster_ssh_keys": "clusters",
    "cluster_security_groups": "clusters",
}


@dataclass
class WriteOutcome:
    """What a write produced: the response body (None for 204) and what the audit log records."""

    resource_type: str
    resource_id: str | None
    body: BaseModel | None = None
    status: int = 200
    etag: str | None = None
    location: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def stored(self) -> StoredResponse:
        """The response as stored for replay."""
        headers = dict(self.headers)
        if self.etag:
            headers["ETag"] = self.etag
        if self.location:
            headers["Location"] = self.location
        body = self.body.model_dump_json() if self.body is not None else ""
        return StoredResponse(status=self.status, body=body, headers=headers)


@dataclass(frozen=True)
class IdempotencyClaim:
    """A request's Idempotency-Key and the fingerprint of what it asks."""

    key: str
    fingerprint: str


@dataclass(frozen=True)
class WriteResult:
    """The response to send, and whether it is a replay of an earlier request's."""

    response: StoredResponse
    replayed: bool = False


@dataclass(frozen=True)
class UnitOfWork:
    """Runs writes on `sessions` (write sessions: SQLite's take the write lock at BEGIN)."""

    sessions: sessionmaker[Session]
    idempotency_ttl_hours: int
    idempotency_wait_seconds: float = IDEMPOTENCY_WAIT_SECONDS

    def run(
        self,
        *,
        principal: Principal,
        action: str,
        operation: Callable[[Session], WriteOutcome],
        request_id: str | None = None,
        claim: IdempotencyClaim | None = None,
        payload: Mapping[str, Any] | None = None,
    ) -> WriteResult:
        """Run `operation` with audit and idempotency, retrying lost races; the response to send."""
        retried_integrity = False
        attempt = 0
        while True:
            attempt += 1
            try:
                return self._attempt(principal, action, operation, request_id, claim, payload)
            except DBAPIError as error:
                failure = classify(error)
                context = {"action": action, "violation": failure.summary, "request_id": request_id}
                if failure.kind in ("unique", "foreign_key") and not retried_integrity:
                    retried_integrity = True
                    _log.info("write.lost_race", **context)
                    continue
                if failure.kind == "transient" and attempt < TRANSIENT_ATTEMPTS:
                    _log.info("write.transient_failure", attempt=attempt, **context)
                    time.sleep(_BACKOFF_SECONDS * 2 ** (attempt - 1) * (1 + random.random()))
                    continue
                answer = _answer(failure)
                if answer is not None:
                    _log.info("write.conflict", code=answer.code, attempt=attempt, **context)
                    raise answer from None
                if failure.kind == "other":
                    raise
                _log.error("write.integrity_error", attempt=attempt, exc_info=True, **context)
                raise ApiError("an internal error occurred; it has been logged",
                               code="internal_error") from None

    def _attempt(
        self,
        principal: Principal,
        action: str,
        operation: Callable[[Session], WriteOutcome],
        request_id: str | None,
        claim: IdempotencyClaim | None,
        payload: Mapping[str, Any] | None,
    ) -> WriteResult:
        with self.sessions.begin() as session:
            if claim is not None:
                # First, before any other lock: a retry of a request in flight waits here, holding none.
                idempotency.hold_key(session=session, project_id=principal.project_id, key=claim.key,
                                     wait_seconds=self.idempotency_wait_seconds)
                replay = idempotency.find_replay(session=session, project_id=principal.project_id,
                                                 key=claim.key, fingerprint=claim.fingerprint)
                if replay is not None:
                    return WriteResult(replay, replayed=True)
            outcome = operation(session)
            stored = outcome.stored()
            if claim is not None:
                idempotency.save_response(
                    session=session, project_id=principal.project_id, key=claim.key,
                    fingerprint=claim.fingerprint, response=stored, ttl_hours=self.idempotency_ttl_hours,
                )
            audit.record_event(
                session=session, project_id=principal.project_id, actor=principal.key_prefix, action=action,
                resource_type=outcome.resource_type, resource_id=outcome.resource_id, request_id=request_id,
                details={"request": dict(payload) if payload is not None else None, "status": outcome.status},
            )
        return WriteResult(stored)


def _answer(failure: DbFailure) -> ApiError | None:
    """The documented answer to a race that retrying did not settle; None: a bug, not a race."""
    if failure.kind == "transient":
        return Conflict(
            "the request collided with concurrent changes to the same objects; retry it",
            code="conflict_retry",
            headers={"Retry-After": "1"},
        )
    if failure.kind == "unique" and failure.constraint in _BUSINESS_UNIQUE:
        field_name, message = _BUSINESS_UNIQUE[failure.constraint]
        return Conflict(f"{message} (a concurrent request made it)", field=field_name, code="conflict")
    if failure.kind == "foreign_key" and failure.deleting_referenced:
        users = _REFERENCING.get(failure.referenced_by or "", "other objects")
        return Conflict(
            f"it is still referenced by {users} (a concurrent request added the reference); remove the "
            "reference first",
            code="in_use",
            extra={"referenced_by": users},
        )
    return None


@dataclass
class OperatorWrite:
    """An operator command's transaction (`session`) and its audit trail (actor "cli")."""

    session: Session

    def audited(
        self, action: str, *, project_id: str, resource_type: str, resource_id: str | None,
        details: dict[str, Any] | None = None,
    ) -> None:
        """Record what the command did (flushes first, so new rows have their ids)."""
        self.session.flush()
        add_event(self.session, project_id=project_id, actor="cli", action=action,
                  resource_type=resource_type, resource_id=resource_id, at=utcnow(), details=details)


@contextmanager
def operator_write(sessions: sessionmaker[Session]) -> Iterator[OperatorWrite]:
    """A unit of work for an admin command: one transaction, committed when the block ends normally."""
    with sessions.begin() as session:
        yield OperatorWrite(session)
