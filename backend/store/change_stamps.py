"""Change stamps: a value that tells whether anything was committed to the database since it was read.

A response built from what a read saw stays exact while the stamp is the same: a cache keyed on it is
never stale (backend/api/cluster_reads.py). Any commit anywhere (another table, another process or
replica) changes the stamp, so a stamp only ever says "maybe changed" too often, never too rarely.

- SQLite: `PRAGMA data_version` of one connection kept for it, which never writes: SQLite changes it
  whenever another connection, of any process, commits (a read of shared memory, a few microseconds).
- PostgreSQL: `pg_current_snapshot()`, which changes when any transaction that wrote completes
  (its xmax or in-progress list moves); read-only transactions leave it as it is. One round trip.

A stamp is read *before* the data it guards: a commit between the two makes the stamp outdated at once,
which costs one needless miss, never a stale answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from typing import Any, Protocol

from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

_PG_STAMP = "SELECT pg_current_snapshot()::text"


class ChangeStamps(Protocol):
    def before_read(self, session: Session) -> str:
        """The stamp, read before `session` reads the data it guards (in its thread)."""

    async def current(self) -> str | None:
        """The stamp now, from the event loop; None when it cannot be read (then nothing is served from
        a cache)."""

    def close(self) -> None:
        """Release the connection held for stamps."""


class SqliteStamps:
    """`PRAGMA data_version` on a connection of its own (stamps of different connections differ)."""

    def __init__(self, path: str) -> None:
        self._connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._lock = threading.Lock()

    def _read(self) -> str:
        with self._lock:
            return str(self._connection.execute("PRAGMA data_version").fetchone()[0])

    def before_read(self, session: Session) -> str:
        return self._read()

    async def current(self) -> str | None:
        try:
            return self._read()  # no I/O wait: SQLite reads the WAL index in shared memory
        except sqlite3.Error:
            return None

    def close(self) -> None:
        self._connection.close()


class PostgresStamps:
    """`pg_current_snapshot()`: in the reading session before its reads; from the event loop on an
    asynchronous connection of its own (made on first use, remade after an error).

    Callers from the loop share queries: every caller that arrives while one is in flight waits for the
    next, which all of them then take. That one is sent after each of them arrived, so its stamp is as
    fresh as one of their own (a query already in flight when a caller arrives might predate a commit
    the caller has seen, so it is never shared with that caller).
    """

    def __init__(self, engine: Engine) -> None:
        _, self._connect_kwargs = engine.dialect.create_connect_args(engine.url)
        self._connection: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock: asyncio.Lock | None = None
        self._next: asyncio.Future[str | None] | None = None  # the answer of the query to be sent next
        self._queries: set[asyncio.Task[None]] = set()

    def before_read(self, session: Session) -> str:
        return str(session.execute(text(_PG_STAMP)).scalar_one())

    async def current(self) -> str | None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a connection, a lock and a future belong to the loop they were made on
            self.close()
            self._loop, self._lock, self._next = loop, asyncio.Lock(), None
        if self._next is None:
            self._next = loop.create_future()
            task = loop.create_task(self._query())
            self._queries.add(task)  # the loop keeps only a weak reference to a task
            task.add_done_callback(self._queries.discard)
        return await asyncio.shield(self._next)

    async def _query(self) -> None:
        assert self._lock is not None
        async with self._lock:  # one query at a time on the connection
            answer, self._next = self._next, None  # who arrives from now on waits for the next query
            assert answer is not None
            try:
                answer.set_result(await self._read())
            except BaseException:
                answer.set_result(None)
                raise

    async def _read(self) -> str | None:
        try:
            if self._connection is None or self._connection.closed:
                import psycopg  # only PostgreSQL deployments have it

                self._connection = await psycopg.AsyncConnection.connect(
                    autocommit=True, **self._connect_kwargs
                )
            cursor = await self._connection.execute(_PG_STAMP)
            row = await cursor.fetchone()
        except Exception:  # the database is away: no stamp, so the route answers (and reports it)
            self.close()
            return None
        return None if row is None else str(row[0])

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            # Closed without its loop (which may be gone): the socket is dropped directly.
            with contextlib.suppress(Exception):
                connection.pgconn.finish()


def change_stamps(engine: Engine) -> ChangeStamps | None:
    """The stamps of `engine`'s database; None where there are none (an in-memory SQLite database,
    which no second connection can see)."""
    if engine.dialect.name == "postgresql":
        return PostgresStamps(engine)
    database = engine.url.database
    in_memory = not database or database == ":memory:" or "mode=memory" in database
    if engine.dialect.name == "sqlite" and not in_memory:
        return SqliteStamps(str(database))
    return None
