"""Migration 0018_spot_capacity on a database of the previous head holding a cluster: it is on-demand after
the upgrade (server defaults); downgrading drops the spot columns and keeps the cluster."""

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

REVISION = "0018_spot_capacity"


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with empty_database(request.param, tmp_path) as url:
        yield url


def test_migration_0018_existing_clusters_are_on_demand(empty_url: str, tmp_path: Path) -> None:
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
            # Plain SQL: later migrations may add columns the models map.
            row = connection.execute(sa.text("SELECT name, capacity_type FROM clusters")).one()
            assert tuple(row) == ("train", "on_demand")
            command.downgrade(config, previous)
            inspector = sa.inspect(connection)
            assert "capacity_type" not in {c["name"] for c in inspector.get_columns("clusters")}
            assert "preempt_at" not in {c["name"] for c in inspector.get_columns("engine_nodes")}
            assert connection.execute(sa.text("SELECT node_count FROM clusters")).scalar_one() == 3
    finally:
        engine.dispose()
