"""The store: migrations reach every table of the models, SQLite pragmas are in force."""

from __future__ import annotations

from sqlalchemy import inspect, text

from backend.settings import Settings
from backend.store import models
from backend.store.base import Base
from backend.store.db import make_engine


def test_store_migrations_create_every_core_table(settings: Settings) -> None:
    engine = make_engine(settings)
    tables = set(inspect(engine).get_table_names())
    engine.dispose()
    core_tables = {table.name for table in Base.metadata.tables.values() if table.name in tables}
    expected = {
        m.__tablename__
        for m in (
            models.Project,
            models.ApiKey,
            models.SshKey,
            models.Volume,
            models.Cluster,
            models.IdempotencyRecord,
            models.AuditEvent,
            models.RateLimitCounter,
            models.ClusterSshKey,
            models.ClusterVolume,
        )
    }
    assert expected <= core_tables
    assert "alembic_version" in tables


def test_store_sqlite_pragmas_wal_busy_timeout_foreign_keys(tmp_path) -> None:  # type: ignore[no-untyped-def]
    engine = make_engine(Settings(data_dir=tmp_path, database_url=""))
    with engine.connect() as connection:
        assert connection.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert connection.execute(text("PRAGMA busy_timeout")).scalar() == 15_000
        assert connection.execute(text("PRAGMA foreign_keys")).scalar() == 1
    engine.dispose()
    assert (tmp_path / "gpucloud.db").exists()
