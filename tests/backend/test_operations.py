"""What running on several processes needs: pool size settings, the embedded billing meter apart from the
embedded worker, processes that refuse a schema other than their own, and migrations that serialise."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command
from alembic.script import ScriptDirectory
from fastapi.testclient import TestClient
from sqlalchemy import inspect, text
from sqlalchemy.engine import make_url

from backend.app import create_app
from backend.settings import Settings
from backend.store.db import make_engine
from backend.store.migrate import (
    MIGRATIONS_DIR,
    SchemaNotCurrent,
    alembic_config,
    check_schema_current,
    head_revision,
    upgrade_to_head,
)
from tests.backend.fresh_databases import empty_database, empty_postgres_database

BIN = [str(Path(sys.executable).with_name("gpucloud-backend"))]


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with empty_database(request.param, tmp_path) as url:
        yield url


def test_store_pool_size_and_overflow_come_from_settings(database_url: str) -> None:
    engine = make_engine(Settings(database_url=database_url, db_pool_size=3, db_max_overflow=2))
    try:
        assert engine.pool.size() == 3  # type: ignore[attr-defined]
        assert engine.pool._max_overflow == 2  # type: ignore[attr-defined]
    finally:
        engine.dispose()


def _threads_running_with(settings: Settings) -> set[str]:
    app = create_app(settings)
    with TestClient(app):
        names = {thread.name for thread in threading.enumerate()}
    app.state.gpucloud.engine.dispose()
    return names & {"engine-worker", "billing-metering"}


def test_app_embedded_billing_is_independent_of_the_embedded_worker(settings: Settings) -> None:
    billing_only = settings.model_copy(update={"embedded_worker": False, "embedded_billing": True})
    assert _threads_running_with(billing_only) == {"billing-metering"}
    worker_only = settings.model_copy(update={"embedded_worker": True, "embedded_billing": False})
    assert _threads_running_with(worker_only) == {"engine-worker"}


def test_migrate_check_refuses_a_schema_other_than_the_head(empty_url: str) -> None:
    engine = make_engine(Settings(database_url=empty_url))
    config = alembic_config(engine)
    head = head_revision()
    previous = ScriptDirectory(str(MIGRATIONS_DIR)).get_revision(head).down_revision
    assert isinstance(previous, str)
    try:
        with pytest.raises(SchemaNotCurrent, match="no gpucloud schema: run `gpucloud-backend migrate`"):
            check_schema_current(engine)
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, previous)
        with pytest.raises(SchemaNotCurrent, match=f"at revision {previous}, this version needs {head}"):
            check_schema_current(engine)
        upgrade_to_head(engine)
        check_schema_current(engine)
        with engine.begin() as connection:
            connection.execute(text("UPDATE alembic_version SET version_num = '9999_from_the_future'"))
        with pytest.raises(SchemaNotCurrent, match="migrated by a newer version"):
            check_schema_current(engine)
    finally:
        engine.dispose()


def test_cli_serve_and_worker_refuse_an_unmigrated_postgresql(tmp_path: Path) -> None:
    with empty_postgres_database() as url:
        # The test server trusts local connections: the password is ignored, and must not be printed.
        with_password = make_url(url).set(password="pw-not-to-print").render_as_string(hide_password=False)
        env = {**os.environ, "GPUCLOUD_DATABASE_URL": with_password, "GPUCLOUD_DATA_DIR": str(tmp_path)}
        for command_line in (["serve", "--port", "0"], ["worker"]):
            done = subprocess.run(
                [*BIN, *command_line], env=env, capture_output=True, text=True, timeout=60, check=False
            )
            assert done.returncode == 1, done.stderr
            assert "has no gpucloud schema: run `gpucloud-backend migrate` once" in done.stderr
            assert "pw-not-to-print" not in done.stderr


def test_migrate_concurrent_runs_serialise_on_postgresql() -> None:
    with empty_postgres_database() as url:
        engines = [make_engine(Settings(database_url=url)) for _ in range(3)]
        errors: list[BaseException] = []

        def migrate(index: int) -> None:
            try:
                upgrade_to_head(engines[index])
            except BaseException as error:  # collected and asserted below
                errors.append(error)

        threads = [threading.Thread(target=migrate, args=(i,)) for i in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        try:
            assert errors == []
            check_schema_current(engines[0])
            assert "engine_workers" in inspect(engines[0]).get_table_names()
        finally:
            for engine in engines:
                engine.dispose()
