"""Migration 0013_reserved_ips on a database of the previous revision holding data: existing clusters keep
everything on their floating addresses, the reserved IP tables exist (empty); downgrading restores the
previous schema with the data."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.script import ScriptDirectory

from backend.settings import Settings
from backend.store.db import make_engine
from backend.store.migrate import MIGRATIONS_DIR, alembic_config
from tests.backend.engine.test_engine_secrets import _insert
from tests.backend.fresh_databases import empty_database

REVISION = "0013_reserved_ips"


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with empty_database(request.param, tmp_path) as url:
        yield url


def test_migration_0013_keeps_clusters_and_downgrades_with_the_data(empty_url: str, tmp_path: Path) -> None:
    engine = make_engine(Settings(database_url=empty_url, data_dir=tmp_path / "data"))
    config = alembic_config(engine)
    previous = ScriptDirectory(str(MIGRATIONS_DIR)).get_revision(REVISION).down_revision
    assert isinstance(previous, str)
    try:
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, previous)
            _insert(connection, "projects", {"id": "prj_1", "name": "legacy"})
            _insert(connection, "clusters", {"id": "cls_1", "project_id": "prj_1", "name": "train",
                                             "node_count": 3, "labels": {}})
            command.upgrade(config, REVISION)
            inspector = sa.inspect(connection)
            assert {"reserved_ips", "reserved_ip_events"} <= set(inspector.get_table_names())
            row = connection.execute(sa.text("SELECT node_count, reserved_ip_id FROM clusters")).one()
            assert tuple(row) == (3, None)
            command.downgrade(config, previous)
            inspector = sa.inspect(connection)
            assert "reserved_ip_id" not in {c["name"] for c in inspector.get_columns("clusters")}
            assert "reserved_ip_micros" not in {c["name"] for c in inspector.get_columns("billing_invoices")}
            assert "reserved_ips" not in inspector.get_table_names()
            assert connection.execute(sa.text("SELECT node_count FROM clusters")).scalar_one() == 3
    finally:
        engine.dispose()
