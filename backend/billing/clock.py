"""Time source for billing: the system clock in production, a hand-driven clock in tests.

Every billing decision takes `now` from a `Clock` so tests can walk through hours, terms and grace
periods without sleeping. All datetimes are timezone-aware UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime: ...


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
        self._now = ensure_utc(moment)

    def advance(self, delta: timedelta | None = None, **kwargs: float) -> datetime:
        """Move forward by `delta` or by timedelta keyword arguments (`hours=2`); returns the new time."""
        step = delta if delta is not None else timedelta(**kwargs)
        if step < timedelta(0):
            raise ValueError("a ManualClock never goes backwards")
        self._now = self._now + step
        return self._now


def ensure_utc(moment: datetime) -> datetime:
    """Aware UTC datetime; naive values (SQLite returns them) are taken to be UTC already."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)
