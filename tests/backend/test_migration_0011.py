"""Migration 0011_ttl_budgets on a database of the previous head holding data: existing clusters keep
everything and have no expiry, the budget tables exist (empty); downgrading restores the previous schema
with the data."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.script import ScriptDirectory

from backend.settings import Settings
from backend.store.db import make_engine, make_session_factory
from backend.store.migrate import MIGRATIONS_DIR, alembic_config, upgrade_to_head
from backend.store.models import Cluster
from tests.backend.engine.test_engine_secrets import _insert
from tests.backend.fresh_databases import empty_database

REVISION = "0011_ttl_budgets"


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with empty_database(request.param, tmp_path) as url:
        yield url


def test_migration_0011_keeps_existing_clusters_without_an_expiry(empty_url: str, tmp_path: Path) -> None:
    engine = make_engine(Settings(database_url=empty_url, data_dir=tmp_path / "data"))
    config = alembic_config(engine)
    previous = ScriptDirectory(str(MIGRATIONS_DIR)).get_revision(REVISION).down_revision
    assert isinstance(previous, str)
    try:
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, previous)
            _insert(connection, "projects", {"id": "prj_1", "name": "legacy"})
            _insert(
                connection,
                "clusters",
                {
                    "id": "cls_1",
                    "project_id": "prj_1",
                    "name": "train",
                    "node_count": 3,
                    "labels": {"team": "nlp"},
                },
            )
        upgrade_to_head(engine)
        tables = set(sa.inspect(engine).get_table_names())
        assert {"billing_budgets", "billing_budget_alerts"} <= tables
        with make_session_factory(engine)() as session:
            cluster = session.get(Cluster, "cls_1")
            assert cluster is not None
            assert (cluster.name, cluster.node_count, cluster.labels) == ("train", 3, {"team": "nlp"})
            assert (cluster.ttl, cluster.expires_at, cluster.idle_teardown_minutes) == (None, None, None)
            assert cluster.expiry_blocked_at is None
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            command.downgrade(config, previous)
            columns = {c["name"] for c in sa.inspect(connection).get_columns("clusters")}
            assert "expires_at" not in columns and "ttl" not in columns
            assert "billing_budgets" not in sa.inspect(connection).get_table_names()
            assert connection.execute(sa.text("SELECT node_count FROM clusters")).scalar_one() == 3
    finally:
        engine.dispose()
