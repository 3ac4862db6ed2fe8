"""Every timestamp has its zone: each DateTime column is a UtcDateTime, the API shows timestamps read
from SQLite with their zone, a value written in another zone reads back as the same instant, and
migration 0021 converts a naive PostgreSQL column."""

from __future__ import annotations

import importlib
import pkgutil
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.runtime.migration import MigrationContext
from fastapi.testclient import TestClient
from sqlalchemy.types import DateTime, TypeDecorator

import backend.store
from backend.settings import Settings
from backend.store.base import Base, UtcDateTime
from backend.store.db import make_engine
from backend.store.migrate import alembic_config

ZONED = ("Z", "+00:00")
REVISION = "0021_utc_timestamps"


def _all_datetime_columns() -> list[sa.Column[object]]:
    for module in pkgutil.iter_modules(backend.store.__path__):
        if module.name.endswith("models"):  # every model module, present and future
            importlib.import_module(f"backend.store.{module.name}")
    return [
        column
        for table in Base.metadata.tables.values()
        for column in table.columns
        if isinstance(column.type, DateTime)
        or (isinstance(column.type, TypeDecorator) and isinstance(column.type.impl_instance, DateTime))
    ]


def test_utc_every_datetime_column_is_utc_datetime() -> None:
    columns = _all_datetime_columns()
    assert len(columns) > 40  # the tables are there to check
    plain = [f"{c.table.name}.{c.name}" for c in columns if not isinstance(c.type, UtcDateTime)]
    assert plain == []


def test_utc_datetime_binds_utc_and_reads_aware() -> None:
    column_type = UtcDateTime()
    dialect = sa.create_engine("sqlite://").dialect
    offset = datetime.fromisoformat("2027-03-01T10:00:00+05:00")
    assert column_type.process_bind_param(offset, dialect) == datetime(2027, 3, 1, 5, tzinfo=UTC)
    assert column_type.process_bind_param(datetime(2027, 3, 1, 5), dialect) == datetime(
        2027, 3, 1, 5, tzinfo=UTC
    )
    read = column_type.process_result_value(datetime(2027, 3, 1, 5), dialect)
    assert read is not None and read.utcoffset() is not None and read == datetime(2027, 3, 1, 5, tzinfo=UTC)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_utc_budget_and_cluster_timestamps_carry_their_zone_on_sqlite(admin: TestClient) -> None:
    budget = admin.post("/v1/budgets", json={"name": "team", "amount_usd": "100"})
    assert budget.status_code == 201, budget.text
    cluster = admin.post(
        "/v1/clusters",
        json={"name": "utc", "region": "us-east-1", "instance_type": "8xH100", "ttl": "8h"},
    )
    assert cluster.status_code == 201, cluster.text
    # Read back (not the create's echo): these come from SQLite's zoneless text.
    read_budget = admin.get(f"/v1/budgets/{budget.json()['id']}").json()
    read_cluster = admin.get(f"/v1/clusters/{cluster.json()['id']}").json()
    for name, value in [
        ("budget.created_at", read_budget["created_at"]),
        ("budget.updated_at", read_budget["updated_at"]),
        ("cluster.created_at", read_cluster["created_at"]),
        ("cluster.expires_at", read_cluster["expires_at"]),
    ]:
        assert value.endswith(ZONED), f"{name} = {value!r} has no zone"
    listed = admin.get("/v1/budgets").json()["items"][0]
    assert listed["created_at"].endswith(ZONED)


def test_utc_reservation_start_in_another_zone_reads_back_as_the_same_instant(admin: TestClient) -> None:
    written = "2031-03-01T10:00:00+05:00"
    created = admin.post(
        "/v1/reservations",
        json={"name": "q1", "region": "us-east-1", "instance_type": "8xH100", "node_count": 1,
              "duration_days": 7, "starts_at": written},
    )
    assert created.status_code == 201, created.text
    read = admin.get(f"/v1/reservations/{created.json()['id']}").json()
    # SQLite kept the +05:00 wall time as if it were UTC before: five hours late.
    assert datetime.fromisoformat(read["starts_at"]) == datetime.fromisoformat(written)
    assert datetime.fromisoformat(read["ends_at"]) == datetime(2031, 3, 8, 5, tzinfo=UTC)


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_utc_migration_0021_converts_a_naive_postgres_column(settings: Settings) -> None:
    engine = make_engine(settings)
    try:
        with engine.begin() as connection:
            connection.execute(sa.text(
                "ALTER TABLE projects ALTER COLUMN created_at TYPE timestamp without time zone"))
            connection.execute(sa.text("INSERT INTO projects (id, name, created_at) "
                                       "VALUES ('prj_1', 'legacy', '2027-03-01 05:00:00')"))
            config = alembic_config(engine)
            config.attributes["connection"] = connection
            head = MigrationContext.configure(connection).get_current_revision()
            command.stamp(config, "0020_reservation_labels", purge=True)
            command.upgrade(config, REVISION)  # this step alone: later ones are not repeatable
            command.stamp(config, head or "head", purge=True)
        with engine.connect() as connection:
            data_type = connection.execute(sa.text(
                "SELECT data_type FROM information_schema.columns "
                "WHERE table_name = 'projects' AND column_name = 'created_at'")).scalar_one()
            naive = connection.execute(sa.text(
                "SELECT count(*) FROM information_schema.columns WHERE table_schema = current_schema() "
                "AND data_type = 'timestamp without time zone'")).scalar_one()
            created = connection.execute(sa.text("SELECT created_at FROM projects")).scalar_one()
        assert (data_type, naive) == ("timestamp with time zone", 0)
        assert created == datetime(2027, 3, 1, 5, tzinfo=UTC)
    finally:
        engine.dispose()
