"""Migration 0023_node_events on a database of the previous revision holding a cluster: the node history
table exists (empty) and takes events, which go with their cluster; downgrading drops it and keeps the
cluster."""

from __future__ import annotations

import datetime as dt
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

REVISION = "0023_node_events"


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with empty_database(request.param, tmp_path) as url:
        yield url


def test_migration_0023_adds_an_empty_node_history_and_downgrades(empty_url: str, tmp_path: Path) -> None:
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
                                             "node_count": 2, "labels": {}})
            command.upgrade(config, REVISION)
            assert connection.execute(sa.text("SELECT COUNT(*) FROM engine_node_events")).scalar_one() == 0
            _insert(connection, "engine_node_events", {
                "cluster_id": "cls_1", "node_name": "train-1", "node_id": "nod_1", "kind": "xid", "code": 79,
                "detail": "XID 79: GPU 3 has fallen off the bus", "actor": "engine",
                "at": dt.datetime(2026, 12, 3, 8, tzinfo=dt.UTC)})
            row = connection.execute(sa.text("SELECT node_name, kind, code FROM engine_node_events")).one()
            assert tuple(row) == ("train-1", "xid", 79)
            indexes = {i["name"] for i in sa.inspect(connection).get_indexes("engine_node_events")}
            assert "ix_engine_node_events_cluster_node" in indexes
            command.downgrade(config, previous)
            assert "engine_node_events" not in sa.inspect(connection).get_table_names()
            assert connection.execute(sa.text("SELECT node_count FROM clusters")).scalar_one() == 2
    finally:
        engine.dispose()
