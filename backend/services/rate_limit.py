"""Per-API-key rate limiting with fixed windows counted in the database (shared by every replica).

Each replica counts locally and adds its count to the window's row in the database every
`sync_every` requests or `sync_seconds`, and on every request once the budget is nearly spent; so
requests rarely wait for the database and replicas together overshoot by at most `sync_every` each.
`sync_every=1` counts every request in the database.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

from sqlalchemy import delete
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, sessionmaker

from backend.domain.errors import RateLimited
from backend.store.models import RateLimitCounter


@dataclass
class _Window:
    start: int
    stored: int = 0  # the window's total in the database at the last sync (all replicas)
    pending: int = 0  # this replica's requests not yet added to the database
    synced_at: float = 0.0


class RateLimiter:
    """Allows `limit` requests per key per `window_seconds`; the 429 carries Retry-After."""

    def __init__(
        self,
        *,
        sessions: sessionmaker[Session],
        limit: int,
        window_seconds: int,
        sync_every: int = 1,
        sync_seconds: float = 0.5,
    ) -> None:
        self._sessions = sessions
        self._limit = limit
        self._window = window_seconds
        self._sync_every = max(1, sync_every)
        self._sync_seconds = sync_seconds
        self._windows: dict[str, _Window] = {}
        self._lock = threading.Lock()

    def count(self, api_key_id: str) -> bool:
        """Count one request locally; True when the caller must `sync` (database I/O) before `check`."""
        if self._limit <= 0:
            return False
        now = time.time()
        start = int(now // self._window) * self._window
        with self._lock:
            window = self._windows.get(api_key_id)
            if window is None or window.start != start:
                window = self._windows[api_key_id] = _Window(start=start, synced_at=time.monotonic())
            window.pending += 1
            return (
                window.pending >= self._sync_every
                or time.monotonic() - window.synced_at >= self._sync_seconds
                or window.stored + window.pending >= self._limit - self._sync_every
            )

    def sync(self, api_key_id: str) -> None:
        """Add this replica's pending count to the database and learn the window's total."""
        with self._lock:
            window = self._windows.get(api_key_id)
            if window is None or window.pending == 0:
                return
            start, pending = window.start, window.pending
            window.pending = 0
        with self._sessions.begin() as session:
            total = self._increment(session, api_key_id, start, pending)
            if total == pending:  # first requests of a new window: forget this key's older windows
                session.execute(
                    delete(RateLimitCounter).where(
                        RateLimitCounter.api_key_id == api_key_id, RateLimitCounter.window_start < start
                    )
                )
        with self._lock:
            if window.start == start:
                window.stored, window.synced_at = total, time.monotonic()

    def check(self, api_key_id: str) -> None:
        """Raise RateLimited when the key's window budget is spent."""
        if self._limit <= 0:
            return
        window = self._windows.get(api_key_id)
        if window is None or window.stored + window.pending <= self._limit:
            return
        retry_after = max(1, math.ceil(window.start + self._window - time.time()))
        raise RateLimited(
            f"rate limit of {self._limit} requests per {self._window} s exceeded; retry in {retry_after} s",
            field="Authorization",
            headers={"Retry-After": str(retry_after)},
        )

    def hit(self, api_key_id: str) -> None:
        """Count, sync when due and check, in one call (blocking I/O)."""
        if self.count(api_key_id):
            self.sync(api_key_id)
        self.check(api_key_id)

    @staticmethod
    def _increment(session: Session, api_key_id: str, window_start: int, amount: int) -> int:
        dialect = session.get_bind().dialect.name
        insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
        values = insert(RateLimitCounter).values(
            api_key_id=api_key_id, window_start=window_start, count=amount
        )
        statement = values.on_conflict_do_update(
            index_elements=["api_key_id", "window_start"], set_={"count": RateLimitCounter.count + amount}
        ).returning(RateLimitCounter.count)
        return int(session.execute(statement).scalar_one())


class AddressRateLimiter:
    """Allows `limit` unauthenticated requests per client address per `window_seconds`.

    Counted in memory, per replica, on purpose: a request without a valid key must not cost a database
    write. Memory stays bounded: the counts are dropped when a new window starts, and once
    `max_addresses` addresses are counted in one window the newcomers share a single budget.
    """

    OVERFLOW = "(other addresses)"

    def __init__(self, *, limit: int, window_seconds: int, max_addresses: int = 100_000) -> None:
        self._limit = limit
        self._window = max(1, window_seconds)
        self._max_addresses = max(1, max_addresses)
        self._start = 0
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    @property
    def tracked_addresses(self) -> int:
        """How many addresses the current window counts."""
        return len(self._counts)

    def count(self, address: str) -> None:
        """Count one unauthenticated request from `address`."""
        if self._limit <= 0:
            return
        with self._lock:
            self._roll()
            if address not in self._counts and len(self._counts) >= self._max_addresses:
                address = self.OVERFLOW
            self._counts[address] = self._counts.get(address, 0) + 1

    def retry_after(self, address: str) -> int | None:
        """Seconds until `address` may send unauthenticated requests again; None while it may."""
        if self._limit <= 0:
            return None
        with self._lock:
            self._roll()
            key = (
                address
                if address in self._counts or len(self._counts) < self._max_addresses
                else self.OVERFLOW
            )
            if self._counts.get(key, 0) < self._limit:
                return None
            return max(1, math.ceil(self._start + self._window - time.time()))

    def limited(self, address: str) -> RateLimited | None:
        """The 429 to answer when `address` spent its budget, else None."""
        retry_after = self.retry_after(address)
        if retry_after is None:
            return None
        return RateLimited(
            f"more than {self._limit} requests without a valid API key in {self._window} s from this "
            f"address; send `Authorization: Bearer gpc_...` or retry in {retry_after} s",
            field="Authorization",
            headers={"Retry-After": str(retry_after)},
        )

    def _roll(self) -> None:
        start = int(time.time() // self._window) * self._window
        if start != self._start:
            self._start, self._counts = start, {}
