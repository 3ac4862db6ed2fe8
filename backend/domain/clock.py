"""The one time source: a `Clock` is injected wherever time is read (engine, billing, services).

Production runs on `SystemClock`; tests and simulations drive a `ManualClock` by hand, so they walk
through phases, leases, terms and grace periods without sleeping. Every datetime is aware UTC.
Nothing here does I/O: reading the wall clock is the one effect, and only `SystemClock` has it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, aware UTC."""
        ...


class SystemClock:
    """Wall-clock UTC time."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class ManualClock:
    """A clock that only moves when told to (tests, simulations)."""

    def __init__(self, start: datetime) -> None:
        self._now = ensure_utc(start)

    def now(self) -> datetime:
        return self._now

    def set(self, moment: datetime) -> None:
        """Jump to `moment` (forwards or backwards: a test may replay a moment)."""
        self._now = ensure_utc(moment)

    def advance(self, delta: timedelta | None = None, **kwargs: float) -> datetime:
        """Move forward by `delta` or by timedelta keyword arguments (`hours=2`); returns the new time."""
        step = delta if delta is not None else timedelta(**kwargs)
        if step < timedelta(0):
            raise ValueError("a ManualClock never goes backwards")
        self._now = self._now + step
        return self._now


SYSTEM_CLOCK: Clock = SystemClock()


def utcnow() -> datetime:
    """The system clock's time, for code not yet handed a `Clock` (prefer an injected one)."""
    return SYSTEM_CLOCK.now()


def ensure_utc(moment: datetime) -> datetime:
    """Aware UTC datetime; naive values (SQLite returns them) are taken to be UTC already."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)
