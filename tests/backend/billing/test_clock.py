from datetime import UTC, datetime, timedelta

import pytest

from backend.domain.clock import ManualClock, SystemClock, ensure_utc


def test_manual_clock_moves_only_when_told() -> None:
    clock = ManualClock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    assert clock.now() == datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
    assert clock.advance(hours=1, minutes=30) == datetime(2026, 3, 2, 10, 30, tzinfo=UTC)
    clock.set(datetime(2026, 3, 3))
    assert clock.now() == datetime(2026, 3, 3, tzinfo=UTC)
    with pytest.raises(ValueError):
        clock.advance(timedelta(seconds=-1))


def test_system_clock_is_aware_utc() -> None:
    assert SystemClock().now().tzinfo is UTC


def test_ensure_utc_treats_naive_as_utc() -> None:
    assert ensure_utc(datetime(2026, 1, 1, 12)) == datetime(2026, 1, 1, 12, tzinfo=UTC)
