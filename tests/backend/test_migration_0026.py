"""Migration 0026_ssh_host_keys on a database of the previous revision holding a cluster and a node: the
host key columns arrive NULL (not known until the machine boots again), take a key, and downgrading
drops them and keeps the rows."""

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

REVISION = "0026_ssh_host_keys"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHostKeyOfTheNode"


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with empty_database(request.param, tmp_path) as url:
        yield url


def test_migration_0026_adds_null_host_keys_and_downgrades(empty_url: str, tmp_path: Path) -> None:
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
            _insert(connection, "engine_clusters", {"cluster_id": "cls_1", "fabric": "ib-east-a"})
            _insert(connection, "engine_nodes", {"id": "nod_1", "cluster_id": "cls_1", "name": "train-0"})
            command.upgrade(config, REVISION)
            assert connection.execute(sa.text("SELECT host_key FROM engine_nodes")).scalar_one() is None
            login_key = connection.execute(sa.text("SELECT login_host_key FROM engine_clusters")).scalar_one()
            assert login_key is None
            connection.execute(sa.text("UPDATE engine_nodes SET host_key = :key"), {"key": KEY})
            assert connection.execute(sa.text("SELECT host_key FROM engine_nodes")).scalar_one() == KEY
            command.downgrade(config, previous)
            columns = {c["name"] for c in sa.inspect(connection).get_columns("engine_nodes")}
            assert "host_key" not in columns and "name" in columns
            cluster_columns = {c["name"] for c in sa.inspect(connection).get_columns("engine_clusters")}
            assert "login_host_key" not in cluster_columns
            assert connection.execute(sa.text("SELECT name FROM engine_nodes")).scalar_one() == "train-0"
    finally:
        engine.dispose()
