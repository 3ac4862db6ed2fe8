"""Projects and API keys: creation, revocation, and authenticating a presented bearer key."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from backend.domain import api_keys
from backend.domain.access import ROLES, Scope
from backend.domain.clock import utcnow
from backend.domain.errors import Conflict, NotFound, Unauthorized, Unprocessable
from backend.domain.ids import new_id
from backend.store.models import ApiKey, Project


@dataclass(frozen=True)
class Principal:
    """Who is calling: an API key of a project with a role, and maybe a team scope."""

    api_key_id: str
    key_prefix: str
    project_id: str
    role: str
    scope: Scope | None = None


def create_project(*, session: Session, name: str) -> Project:
    """Create a project with a unique name."""
    if not name or len(name) > 128:
        raise Unprocessable("project name must be 1-128 characters", field="name")
    if session.scalar(select(Project.id).where(Project.name == name)) is not None:
        raise Conflict(f"project {name!r} already exists", field="name", code="already_exists")
    project = Project(id=new_id("project"), name=name, created_at=utcnow())
    session.add(project)
    return project


def create_api_key(
    *, session: Session, project_name: str, role: str, scope: Scope | None = None
) -> tuple[ApiKey, str]:
    """Create a key for a project, optionally limited to a team scope; returns the row and the
    plaintext key (shown once, never stored)."""
    if role not in ROLES:
        raise Unprocessable(f"role must be one of {', '.join(ROLES)}", field="role")
    project = session.scalar(select(Project).where(Project.name == project_name))
    if project is None:
        raise NotFound(f"no project named {project_name!r}", field="project")
    plaintext = api_keys.generate_api_key()
    row = ApiKey(
        id=new_id("api_key"),
        project_id=project.id,
        prefix=api_keys.display_prefix(plaintext),
        digest=api_keys.digest(plaintext),
        role=role,
        scope_key=scope.key if scope else None,
        scope_value=scope.value if scope else None,
        created_at=utcnow(),
    )
    session.add(row)
    return row, plaintext


def revoke_api_key(*, session: Session, prefix: str) -> ApiKey:
    """Revoke the key whose display prefix is `prefix`."""
    row = session.scalar(select(ApiKey).where(ApiKey.prefix == prefix))
    if row is None:
        raise NotFound(f"no API key with prefix {prefix!r}", field="prefix")
    if row.revoked_at is None:
        row.revoked_at = utcnow()
    return row


class Authenticator:
    """Turns a bearer key into a Principal; caches lookups for `cache_seconds` (0 disables).

    Unknown keys are cached too (so a flood of one invented key costs one lookup), which is why the
    cache is bounded: at most `max_cached_keys` entries, the oldest dropped first. Every entry lives
    `cache_seconds`, so insertion order is expiry order and expired entries are swept from the front.
    """

    def __init__(
        self, *, sessions: sessionmaker[Session], cache_seconds: float, max_cached_keys: int = 10_000
    ) -> None:
        self._sessions = sessions
        self._cache_seconds = cache_seconds
        self._max_cached_keys = max(1, max_cached_keys)
        self._cache: dict[str, tuple[float, str, Principal | None]] = {}
        self._lock = threading.Lock()

    @property
    def cached_keys(self) -> int:
        """How many lookups the cache holds now."""
        return len(self._cache)

    def authenticate_cached(self, key: str) -> Principal | None:
        """The principal from the cache without I/O; None when the database must be asked."""
        _check_format(key)
        cached = self._cache.get(api_keys.display_prefix(key)) if self._cache_seconds > 0 else None
        if cached is None or cached[0] <= time.monotonic():
            return None
        return _verified(key, cached[1], cached[2])

    def authenticate(self, key: str) -> Principal:
        """The principal of a valid, unrevoked key (cache, else database); 401 otherwise."""
        principal = self.authenticate_cached(key)
        if principal is not None:
            return principal
        prefix = api_keys.display_prefix(key)
        digest, loaded = self._load(prefix)
        if self._cache_seconds > 0:
            self._remember(prefix, digest, loaded)
        return _verified(key, digest, loaded)

    def _remember(self, prefix: str, digest: str, principal: Principal | None) -> None:
        now = time.monotonic()
        with self._lock:
            self._cache.pop(prefix, None)  # re-inserted at the end: the order stays the expiry order
            self._cache[prefix] = (now + self._cache_seconds, digest, principal)
            while self._cache:
                oldest = next(iter(self._cache))
                if len(self._cache) <= self._max_cached_keys and self._cache[oldest][0] > now:
                    break
                del self._cache[oldest]

    def _load(self, prefix: str) -> tuple[str, Principal | None]:
        with self._sessions() as session:
            row = session.scalar(select(ApiKey).where(ApiKey.prefix == prefix))
        if row is None or row.revoked_at is not None:
            return "", None
        scope = Scope(row.scope_key, row.scope_value) if row.scope_key and row.scope_value else None
        return row.digest, Principal(
            api_key_id=row.id, key_prefix=row.prefix, project_id=row.project_id, role=row.role, scope=scope
        )


def _unauthorized(detail: str) -> Unauthorized:
    return Unauthorized(
        detail, field="Authorization", code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"}
    )


def _check_format(key: str) -> None:
    if not api_keys.is_well_formed(key):
        raise _unauthorized("the API key is malformed (expected gpc_...)")


def _verified(key: str, digest: str, principal: Principal | None) -> Principal:
    if principal is None or not api_keys.matches(key, digest):
        raise _unauthorized("the API key is unknown or revoked")
    return principal
