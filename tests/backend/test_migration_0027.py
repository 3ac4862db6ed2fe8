"""Migration 0027_container_images on a database of the previous revision holding a cluster with its engine
state and a node: the existing cluster declares no images (`{}`), has no registry credentials and an empty
import record; the rows that refer to the cluster survive (no table rebuild), and downgrading drops the
columns and keeps the rows."""

from __future__ import annotations

import json
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

REVISION = "0027_container_images"


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with empty_database(request.param, tmp_path) as url:
        yield url


def _json(value: object) -> object:
    return json.loads(value) if isinstance(value, str) else value


def test_migration_0027_declares_no_images_for_existing_clusters_and_downgrades(
    empty_url: str, tmp_path: Path
) -> None:
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
            declared = connection.execute(sa.text(
                "SELECT container_images, registry_credentials, registry_usernames FROM clusters")).one()
            assert (_json(declared[0]), declared[1], _json(declared[2])) == ({}, None, {})
            state = connection.execute(sa.text(
                "SELECT images, images_token, images_seq, images_failed FROM engine_clusters")).one()
            assert (_json(state[0]), state[1], state[2], state[3]) == ({}, None, 0, None)
            assert connection.execute(sa.text("SELECT name FROM engine_nodes")).scalar_one() == "train-0"
            command.downgrade(config, previous)
            columns = {c["name"] for c in sa.inspect(connection).get_columns("clusters")}
            assert not columns & {"container_images", "registry_credentials", "registry_usernames"}
            state_columns = {c["name"] for c in sa.inspect(connection).get_columns("engine_clusters")}
            assert not state_columns & {"images", "images_token", "images_seq", "images_failed"}
            assert connection.execute(sa.text("SELECT name FROM engine_nodes")).scalar_one() == "train-0"
    finally:
        engine.dispose()
