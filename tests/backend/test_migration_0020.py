"""Migration 0020_reservation_labels on a database of the previous head holding a reservation: it has no
labels after the upgrade (so unscoped keys see it as before, team-scoped ones do not); downgrading drops
the column and keeps the reservation."""

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

REVISION = "0020_reservation_labels"


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with empty_database(request.param, tmp_path) as url:
        yield url


def test_migration_0020_existing_reservations_have_no_labels(empty_url: str, tmp_path: Path) -> None:
    engine = make_engine(Settings(database_url=empty_url, data_dir=tmp_path / "data"))
    config = alembic_config(engine)
    previous = ScriptDirectory(str(MIGRATIONS_DIR)).get_revision(REVISION).down_revision
    assert isinstance(previous, str)
    try:
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, previous)
            _insert(connection, "projects", {"id": "prj_1", "name": "legacy"})
            reservation = {"id": "rsv_1", "project_id": "prj_1", "node_count": 2, "discount": 0,
                           "gpu_hour_usd": 1}
            _insert(connection, "capacity_reservations", reservation)
            command.upgrade(config, REVISION)
            labels = connection.execute(sa.text("SELECT labels FROM capacity_reservations")).scalar_one()
            assert (json.loads(labels) if isinstance(labels, str) else labels) == {}
            command.downgrade(config, previous)
            columns = {c["name"] for c in sa.inspect(connection).get_columns("capacity_reservations")}
            assert "labels" not in columns
            count = connection.execute(sa.text("SELECT node_count FROM capacity_reservations")).scalar_one()
            assert count == 2
    finally:
        engine.dispose()
