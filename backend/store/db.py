"""Database engine and session factory: SQLite (WAL, busy timeout, foreign keys) or PostgreSQL."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sqlalchemy import CursorResult, Engine, Executable, create_engine, event
from sqlalchemy.engine import make_url
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
    else:
        engine = create_engine(url, pool_pre_ping=True, **_pool_options(settings))
    bind_settings(engine.dialect, settings)  # encrypted columns use this configuration's keys
    return engine


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
    """Sessions that keep loaded attributes after commit; `write` ones take SQLite's write lock at BEGIN.

    Read sessions on PostgreSQL run in autocommit: under READ COMMITTED every statement takes its own
    snapshot anyway, so a read transaction only adds a BEGIN and a ROLLBACK round trip per request.
    (SQLite keeps its read transaction: there it is one consistent snapshot, and costs no round trip.)
    """
    bind: Engine
    if write:
        bind = engine.execution_options(sqlite_begin="IMMEDIATE")
    elif engine.dialect.name == "postgresql":
        bind = engine.execution_options(isolation_level="AUTOCOMMIT")
    else:
        bind = engine
    return sessionmaker(bind=bind, expire_on_commit=False)


def execute_core(session: Session, statement: Executable, params: Mapping[str, Any]) -> CursorResult[Any]:
    """Run a column-only select on the session's connection, skipping the ORM execution layer (a third
    of the cost on the hot read path); flushes first, as `session.execute` would autoflush."""
    if session.autoflush:
        session.flush()
    return session.connection().execute(statement, dict(params))
