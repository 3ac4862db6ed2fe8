"""Migration 0019_reference_integrity on a database of the previous head: a cluster naming a reserved IP
that no longer exists (released while being attached, before this fix) lets go of it, one naming an
existing IP keeps it; on PostgreSQL the foreign key then refuses deleting an attached IP."""

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

REVISION = "0019_reference_integrity"


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with empty_database(request.param, tmp_path) as url:
        yield url


def test_migration_0019_clears_dangling_reserved_ips_and_adds_the_key(empty_url: str, tmp_path: Path) -> None:
    engine = make_engine(Settings(database_url=empty_url, data_dir=tmp_path / "data"))
    config = alembic_config(engine)
    previous = ScriptDirectory(str(MIGRATIONS_DIR)).get_revision(REVISION).down_revision
    assert isinstance(previous, str)
    try:
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, previous)
            _insert(connection, "projects", {"id": "prj_1", "name": "legacy"})
            _insert(connection, "reserved_ips", {"id": "rip_kept", "project_id": "prj_1",
                                                 "region": "us-east-1", "address": "198.18.0.7"})
            for cluster_id, reserved_ip_id in (("cls_kept", "rip_kept"), ("cls_dangling", "rip_gone")):
                _insert(connection, "clusters", {"id": cluster_id, "project_id": "prj_1", "name": cluster_id,
                                                 "node_count": 1, "labels": {},
                                                 "reserved_ip_id": reserved_ip_id})
            command.upgrade(config, REVISION)
            rows = {cluster_id: ip_id for cluster_id, ip_id in
                    connection.execute(sa.text("SELECT id, reserved_ip_id FROM clusters"))}
            assert rows == {"cls_kept": "rip_kept", "cls_dangling": None}
            keys = sa.inspect(connection).get_foreign_keys("clusters")
            on_ip = [key for key in keys if key["referred_table"] == "reserved_ips"]
            if connection.dialect.name == "postgresql":
                assert [key["constrained_columns"] for key in on_ip] == [["reserved_ip_id"]]
                with pytest.raises(sa.exc.IntegrityError), connection.begin_nested():
                    connection.execute(sa.text("DELETE FROM reserved_ips WHERE id = 'rip_kept'"))
            command.downgrade(config, previous)
            keys = sa.inspect(connection).get_foreign_keys("clusters")
            assert not [key for key in keys if key["referred_table"] == "reserved_ips"]
    finally:
        engine.dispose()
