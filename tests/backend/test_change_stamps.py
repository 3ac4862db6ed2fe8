"""Change stamps (backend/store/change_stamps.py): a commit by any other connection changes the stamp,
reads do not; PostgreSQL callers share a stamp query only when it was sent after they arrived."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from backend.settings import Settings
from backend.store.change_stamps import PostgresStamps, change_stamps
from backend.store.db import make_engine, make_session_factory


def test_a_commit_elsewhere_changes_the_stamp_and_a_read_does_not(settings: Settings) -> None:
    engine = make_engine(settings)
    other = make_engine(settings)
    stamps = change_stamps(engine)
    assert stamps is not None
    try:
        with make_session_factory(engine)() as session:
            before = stamps.before_read(session)
            session.execute(text("SELECT count(*) FROM projects")).scalar_one()
        assert asyncio.run(stamps.current()) == before
        with other.begin() as connection:
            connection.execute(text("INSERT INTO projects (id, name, created_at) VALUES "
                                    "('prj_stamp', 'stamp', CURRENT_TIMESTAMP)"))
        after = asyncio.run(stamps.current())
        assert after is not None and after != before
        with make_session_factory(engine)() as session:
            assert stamps.before_read(session) == after
    finally:
        stamps.close()
        engine.dispose()
        other.dispose()


def test_an_in_memory_sqlite_database_has_no_stamps(tmp_path: Path) -> None:
    assert change_stamps(create_engine("sqlite://")) is None
    assert change_stamps(create_engine(f"sqlite:///{tmp_path}/on-disk.db")) is not None


class _GatedStamps(PostgresStamps):
    """Stamps whose first query waits for a gate, each answering its own number."""

    def __init__(self) -> None:
        super().__init__(create_engine("postgresql+psycopg://nobody@127.0.0.1/none"))  # never connects
        self.queries = 0
        self.gate = asyncio.Event()

    async def _read(self) -> str | None:
        self.queries += 1
        number = self.queries
        if number == 1:
            await self.gate.wait()
        return str(number)


@pytest.mark.parametrize("late_callers", [1, 5])
def test_postgres_callers_share_only_a_query_sent_after_they_arrived(late_callers: int) -> None:
    async def scenario() -> tuple[str | None, list[str | None], int]:
        stamps = _GatedStamps()
        first = asyncio.ensure_future(stamps.current())
        while stamps.queries == 0:  # the first query is in flight
            await asyncio.sleep(0)
        late = [asyncio.ensure_future(stamps.current()) for _ in range(late_callers)]
        await asyncio.sleep(0)
        stamps.gate.set()
        return await first, list(await asyncio.gather(*late)), stamps.queries

    first, late, queries = asyncio.run(scenario())
    # The callers that arrived while query 1 was in flight got query 2, all of them the same one.
    assert first == "1" and late == ["2"] * late_callers and queries == 2
