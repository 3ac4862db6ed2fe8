"""Per-API-key rate limiting with fixed windows counted in the database (shared by every replica).

Each replica counts locally and adds its count to the window's row in the database from a
background thread, every `sync_every / 2` requests or `sync_seconds`, so requests do not wait for
the database. A request waits for a sync only when `sync_every` requests are unsynced (the background
fell behind) or the budget is nearly spent (within `sync_every` of the limit); so replicas together
overshoot by at most `sync_every` each. `sync_every=1` counts every request in the database before
its answer.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog
from sqlalchemy import delete
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, sessionmaker

from backend.domain.clock import SYSTEM_CLOCK, Clock
from backend.domain.errors import RateLimited
from backend.store.models import RateLimitCounter

_log = structlog.get_logger("gpucloud.api")


@dataclass
class _Window:
    start: int
    stored: int = 0  # the window's total in the database at the last sync (all replicas)
    pending: int = 0  # this replica's requests not yet added to the database
    syncing: int = 0  # this replica's requests being added by the sync in flight
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
        # Background syncs start at half the batch, so that a request waits for one only when they
        # fall behind: fewer than `sync_every` requests are ever unsynced, as with inline syncs.
        self._background_every = max(1, self._sync_every // 2)
        self._sync_seconds = sync_seconds
        self._windows: dict[str, _Window] = {}
        self._lock = threading.Lock()
        # One sync at a time: a request's sync near the budget waits for a background one in flight,
        # so it learns a total that includes every request this replica counted before it.
        self._sync_lock = threading.Lock()
        self._background = _BackgroundSyncs(self.sync)

    def close(self) -> None:
        """Stop the background syncs (at shutdown, before the database goes): what is still pending is
        this replica's overshoot allowance, not lost budget."""
        self._background.stop()

    def count(self, api_key_id: str) -> bool:
        """Count one request locally; True when the caller must `sync` (database I/O) before `check`.
        A periodic sync that is due is left to the background thread."""
        if self._limit <= 0:
            return False
        now = time.time()
        start = int(now // self._window) * self._window
        with self._lock:
            window = self._windows.get(api_key_id)
            if window is None or window.start != start:
                window = self._windows[api_key_id] = _Window(start=start, synced_at=time.monotonic())
            window.pending += 1
            unsynced = window.syncing + window.pending
            if (
                unsynced >= self._sync_every
                or window.stored + unsynced >= self._limit - self._sync_every
            ):
                return True  # the background syncs fell behind, or the budget is nearly spent
            due = (
                window.pending >= self._background_every
                or time.monotonic() - window.synced_at >= self._sync_seconds
            )
        if due:
            self._background.request(api_key_id)
        return False

    def sync(self, api_key_id: str) -> None:
        """Add this replica's pending count to the database and learn the window's total."""
        with self._sync_lock:
            with self._lock:
                window = self._windows.get(api_key_id)
                if window is None or window.pending == 0:
                    return
                start, pending = window.start, window.pending
                window.pending, window.syncing = 0, pending
                window.synced_at = time.monotonic()  # not due again while this sync runs
            try:
                total = self._store(api_key_id, start, pending)
            except Exception:
                with self._lock:
                    window.syncing = 0
                    if window.start == start:
                        window.pending += pending  # counted again by the next sync
                raise
            with self._lock:
                window.syncing = 0
                if window.start == start:
                    window.stored, window.synced_at = max(window.stored, total), time.monotonic()

    def _store(self, api_key_id: str, start: int, pending: int) -> int:
        with self._sessions.begin() as session:
            total = self._increment(session, api_key_id, start, pending)
            if total == pending:  # first requests of a new window: forget this key's older windows
                session.execute(
                    delete(RateLimitCounter).where(
                        RateLimitCounter.api_key_id == api_key_id, RateLimitCounter.window_start < start
                    )
                )
        return total

    def check(self, api_key_id: str) -> None:
        """Raise RateLimited when the key's window budget is spent."""
        if self._limit <= 0:
            return
        window = self._windows.get(api_key_id)
        if window is None or window.stored + window.syncing + window.pending <= self._limit:
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


class _BackgroundSyncs:
    """Runs the periodic syncs off the request path: one daemon thread, started when a sync is first
    due and ended after `idle_seconds` without one (an idle app holds no thread)."""

    def __init__(self, sync: Callable[[str], None], idle_seconds: float = 5.0) -> None:
        self._sync = sync
        self._idle_seconds = idle_seconds
        self._due: dict[str, None] = {}  # insertion-ordered set: each key at most once
        self._wake = threading.Condition()
        self._running = False
        self._stopped = False
        self._thread: threading.Thread | None = None

    def request(self, api_key_id: str) -> None:
        """Sync `api_key_id` soon (no-op when it is already queued)."""
        with self._wake:
            if self._stopped or api_key_id in self._due:
                return
            self._due[api_key_id] = None
            if self._running:
                self._wake.notify()
                return
            self._running = True
            self._thread = threading.Thread(target=self._run, name="rate-limit-sync", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Drop what is queued and wait for a sync in flight, so no connection outlives the app."""
        with self._wake:
            self._stopped = True
            self._due.clear()
            self._wake.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            with self._wake:
                if not self._due:
                    self._wake.wait(self._idle_seconds)
                if not self._due:
                    self._running = False
                    return
                api_key_id = next(iter(self._due))
                del self._due[api_key_id]
            try:
                self._sync(api_key_id)
            except Exception:  # the count stays pending and is added by the next sync
                _log.warning("rate_limit.sync_failed", api_key_id=api_key_id, exc_info=True)


class AddressRateLimiter:
    """Allows `limit` unauthenticated requests per client address per `window_seconds`.

    Counted in memory, per replica, on purpose: a request without a valid key must not cost a database
    write. Memory stays bounded: the counts are dropped when a new window starts, and once
    `max_addresses` addresses are counted in one window the newcomers share a single budget.
    """

    OVERFLOW = "(other addresses)"

    def __init__(self, *, limit: int, window_seconds: int, max_addresses: int = 100_000,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self._limit = limit
        self._clock = clock
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
            return max(1, math.ceil(self._start + self._window - self._clock.now().timestamp()))

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
        start = int(self._clock.now().timestamp() // self._window) * self._window
        if start != self._start:
            self._start, self._counts = start, {}
