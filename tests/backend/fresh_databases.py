"""Empty (unmigrated) databases for tests of migrations and of processes that migrate or refuse to start."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from tests.backend.conftest import _postgres_admin_url


@contextmanager
def empty_postgres_database() -> Iterator[str]:
    """The URL of a new, empty PostgreSQL database on the test server, dropped afterwards."""
    admin_url = make_url(_postgres_admin_url())
    name = f"gpucloud_empty_{uuid.uuid4().hex[:16]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield admin_url.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@contextmanager
def empty_database(store: str, directory: Path) -> Iterator[str]:
    """An empty database of `store` ("sqlite" or "postgresql")."""
    if store == "sqlite":
        yield f"sqlite:///{directory / 'empty.db'}"
        return
    with empty_postgres_database() as url:
        yield url
