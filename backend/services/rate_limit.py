"""Per-API-key rate limiting with fixed windows counted in the database (shared by every replica)."""

from __future__ import annotations

import math
import time

from sqlalchemy import delete
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, sessionmaker

from backend.domain.errors import RateLimited
from backend.store.models import RateLimitCounter


class RateLimiter:
    """Allows `limit` requests per key per `window_seconds`; the 429 carries Retry-After."""

    def __init__(self, *, sessions: sessionmaker[Session], limit: int, window_seconds: int) -> None:
        self._sessions = sessions
        self._limit = limit
        self._window = window_seconds

    def hit(self, api_key_id: str) -> None:
        """Count one request of `api_key_id`; raise RateLimited when the window's budget is spent."""
        if self._limit <= 0:
            return
        now = time.time()
        window_start = int(now // self._window) * self._window
        with self._sessions.begin() as session:
            count = self._increment(session, api_key_id, window_start)
            if count == 1:  # first request of a new window: forget this key's older windows
                session.execute(
                    delete(RateLimitCounter).where(
                        RateLimitCounter.api_key_id == api_key_id,
                        RateLimitCounter.window_start < window_start,
                    )
                )
        if count > self._limit:
            retry_after = max(1, math.ceil(window_start + self._window - now))
            raise RateLimited(
                f"rate limit of {self._limit} requests per {self._window} s exceeded; "
                f"retry in {retry_after} s",
                field="Authorization",
                headers={"Retry-After": str(retry_after)},
            )

    @staticmethod
    def _increment(session: Session, api_key_id: str, window_start: int) -> int:
        dialect = session.get_bind().dialect.name
        insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
        values = insert(RateLimitCounter).values(api_key_id=api_key_id, window_start=window_start, count=1)
        statement = values.on_conflict_do_update(
            index_elements=["api_key_id", "window_start"], set_={"count": RateLimitCounter.count + 1}
        ).returning(RateLimitCounter.count)
        return int(session.execute(statement).scalar_one())
