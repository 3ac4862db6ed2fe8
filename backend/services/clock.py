"""Wall-clock time for the services, in one place (UTC, aware)."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    """The current time in UTC."""
    return datetime.now(UTC)
