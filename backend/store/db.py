"""Database engine and session factory: SQLite (WAL, busy timeout, foreign keys) or PostgreSQL."""

from __future__ import annotations

import contextlib
import os
import threading
import time
import weakref
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from sqlalchemy import CursorResult, Engine, Executable, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.orm import Session, sessionmaker

from backend.settings import Settings
from backend.store.secrets import bind_settings


def make_engine(settings: Settings) -> Engine:
    """Create the engine for the configured store; a missing SQLite file is created private (0600)."""
    url = make_url(settings.resolved_database_url)
    if url.get_backend_name() == "sqlite":
        on_disk = bool(url.database) and url.database != ":memory:"
        if on_disk:
            _create_private(Path(str(url.database)))
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": settings.sqlite_busy_timeout_ms / 1000},
            **(_pool_options(settings) if on_disk else {}),
        )
        _configure_sqlite(engine, settings.sqlite_busy_timeout_ms)
        _WRITER_LOCKS[engine.dialect] = (threading.RLock(), settings.sqlite_busy_timeout_ms / 1000)
    else:
        engine = create_engine(url, **_pool_options(settings))
        _ping_idle_connections(engine)
    bind_settings(engine.dialect, settings)  # encrypted columns use this configuration's keys
    return engine


# A pooled connection used this recently is taken as alive without a ping (see _ping_idle_connections).
PING_AFTER_IDLE_SECONDS = 1.0


def _ping_idle_connections(engine: Engine) -> None:
    """SQLAlchemy's pre-ping, but only for a connection idle PING_AFTER_IDLE_SECONDS or more: a connection
    a request gave back a moment ago is alive as far as a ping could tell (one may die between a ping and
    its use either way), and the ping was one round trip more on every request. A dead connection found by
    the ping is replaced before use, as with `pool_pre_ping` (a database restart, an idle timeout)."""

    @event.listens_for(engine, "connect")
    @event.listens_for(engine, "checkin")
    def _last_known_alive(_dbapi_connection: Any, record: Any) -> None:
        record.info["alive_at"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        alive_at = record.info.get("alive_at")
        if alive_at is not None and time.monotonic() - alive_at < PING_AFTER_IDLE_SECONDS:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as error:  # the pool replaces the connection and checks out another
            raise DisconnectionError("the pooled connection is gone") from error


def _create_private(database: Path) -> None:
    """Create a missing SQLite file 0600 (its directory 0700) before SQLite does with the umask's mode:
    SQLite gives its -wal and -shm files the database file's mode, so they are private too."""
    database.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(database, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def _pool_options(settings: Settings) -> dict[str, int]:
    return {"pool_size": settings.db_pool_size, "max_overflow": settings.db_max_overflow}


def _configure_sqlite(engine: Engine, busy_timeout_ms: int) -> None:
    # pysqlite's own transaction handling defers BEGIN; take control of it. A write transaction begins
    # IMMEDIATE (takes the write lock up front and waits busy_timeout for it) because a deferred
    # transaction that upgrades to writing fails at once with SQLITE_BUSY under WAL.
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        mode = connection.get_execution_options().get("sqlite_begin", "")
        connection.exec_driver_sql(f"BEGIN {mode}" if mode in ("IMMEDIATE", "EXCLUSIVE") else "BEGIN")


def make_session_factory(engine: Engine, *, write: bool = False) -> sessionmaker[Session]:
    """Sessions that keep loaded attributes after commit; `write` ones take SQLite's write lock at BEGIN
    (and their `begin()` blocks queue in the process first, see `sqlite_writer`).

    Read sessions on PostgreSQL run in autocommit: under READ COMMITTED every statement takes its own
    snapshot anyway, so a read transaction only adds a BEGIN and a ROLLBACK round trip per request.
    (SQLite keeps its read transaction: there it is one consistent snapshot, and costs no round trip.)
    """
    bind: Engine
    if write and engine.dialect in _WRITER_LOCKS:
        return _SqliteWriteSessions(bind=engine.execution_options(sqlite_begin="IMMEDIATE"),
                                    expire_on_commit=False)
    if write:
        bind = engine.execution_options(sqlite_begin="IMMEDIATE")
    elif engine.dialect.name == "postgresql":
        bind = engine.execution_options(isolation_level="AUTOCOMMIT")
    else:  # a plain BEGIN, also from a write factory's bind: a read never takes SQLite's write lock
        bind = engine.execution_options(sqlite_begin="DEFERRED")
    return sessionmaker(bind=bind, expire_on_commit=False)


# One lock per SQLite engine (keyed by its dialect, which its execution_options copies share) and the
# busy timeout its waiters give up after: see `sqlite_writer`.
_WRITER_LOCKS: weakref.WeakKeyDictionary[Any, tuple[threading.RLock, float]] = weakref.WeakKeyDictionary()


@contextlib.contextmanager
def sqlite_writer(sessions: sessionmaker[Session]) -> Iterator[None]:
    """Queue this process's write transactions on SQLite in Python, around `BEGIN IMMEDIATE` ... COMMIT
    (every `begin()` block of `make_session_factory(engine, write=True)`: the unit of work, the rate
    limiter's sync, the metering loop, operator commands; and `write_session`: the engine worker's and the
    host checks' writes).

    Without it every waiting writer polls SQLite's busy handler, whose sleeps grow to 100 ms per try, so
    a few unlucky writers of a busy process wait several rounds (a p99 of 0.5-1 s at 8 concurrent POSTs);
    with it one thread per process waits for SQLite's lock and the others are woken as soon as it is
    free. Other processes (a separate worker, billing runs) and write sessions made otherwise still meet
    SQLite's busy timeout; a waiter that does not get the lock within that timeout goes on to SQLite's
    own wait, as before (so a thread that waits for another while holding a write transaction, which
    SQLite would already refuse after the busy timeout, is not made a deadlock). Reentrant: a write
    opened inside another on the same thread goes to SQLite as it did without this.
    """
    bind = sessions.kw.get("bind")
    entry = _WRITER_LOCKS.get(bind.dialect) if bind is not None else None
    if entry is None:
        yield
        return
    lock, timeout = entry
    acquired = lock.acquire(timeout=timeout)
    try:
        yield
    finally:
        if acquired:
            lock.release()


@contextlib.contextmanager
def write_session(sessions: sessionmaker[Session]) -> Iterator[Session]:
    """A session of `sessions` for a write its caller commits (or rolls back) itself, queued with this
    process's other SQLite writers for its whole life (`sqlite_writer`); `sessions.begin()` is the same
    for a block that commits at its end."""
    with sqlite_writer(sessions), sessions() as session:
        yield session


class _SqliteWriteSessions(sessionmaker[Session]):
    """Write sessions on SQLite whose `begin()` blocks queue in this process (`sqlite_writer`)."""

    @contextlib.contextmanager
    def begin(self) -> Iterator[Session]:
        with sqlite_writer(self), super().begin() as session:
            yield session


def execute_core(session: Session, statement: Executable, params: Mapping[str, Any]) -> CursorResult[Any]:
    """Run a Core statement (a column-only select, an insert or delete) on the session's connection,
    skipping the ORM execution layer (a third of the cost on the hot read path); flushes first, as
    `session.execute` would autoflush."""
    if session.autoflush:
        session.flush()
    return session.connection().execute(statement, dict(params))
