"""PostgreSQL's pooled connections: one idle for a while is pinged before use and replaced when it is
gone (a database restart, an idle timeout); one given back a moment ago is used without the round trip
(backend/store/db.py, _ping_idle_connections)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import create_engine, text

from backend.settings import Settings
from backend.store import db


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_an_idle_dead_connection_is_replaced_and_a_fresh_one_is_not_pinged(
    settings: Settings, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = db.make_engine(settings)
    pings: list[Any] = []
    ping = engine.dialect.do_ping

    def counting_ping(dbapi_connection: Any) -> bool:
        pings.append(dbapi_connection)
        return ping(dbapi_connection)

    monkeypatch.setattr(engine.dialect, "do_ping", counting_ping)
    admin = create_engine(database_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            first_pid = connection.execute(text("SELECT pg_backend_pid()")).scalar_one()
        with engine.connect() as connection:  # given back a moment ago: no ping
            assert connection.execute(text("SELECT pg_backend_pid()")).scalar_one() == first_pid
        assert pings == []

        with admin.connect() as killer:
            killer.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": first_pid})
        monkeypatch.setattr(db, "PING_AFTER_IDLE_SECONDS", 0.0)  # the pooled connection counts as idle
        with engine.connect() as connection:
            replaced_pid = connection.execute(text("SELECT pg_backend_pid()")).scalar_one()
        assert replaced_pid != first_pid and len(pings) >= 1
    finally:
        admin.dispose()
        engine.dispose()
