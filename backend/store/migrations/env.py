"""Alembic environment: the metadata of every `backend.store.*models` module, one connection per run."""

from __future__ import annotations

import importlib
import pkgutil

from alembic import context
from sqlalchemy import Connection

import backend.store
from backend.store.base import Base

# Import every models module (core, engine, billing) so autogenerate and checks see all tables.
for module in pkgutil.iter_modules(backend.store.__path__):
    if module.name.endswith("models"):
        importlib.import_module(f"backend.store.{module.name}")

target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


connection = context.config.attributes.get("connection")
if connection is None:
    # Run by the `alembic` command (a process of its own): the keys of sealed columns come from its
    # GPUCLOUD_* environment, as in any other command of the backend.
    from sqlalchemy import create_engine

    from backend.settings import Settings
    from backend.store.secrets import bind_settings

    engine = create_engine(context.config.get_main_option("sqlalchemy.url") or "")
    bind_settings(engine.dialect, Settings())
    with engine.connect() as conn:
        _run(conn)
    engine.dispose()
else:
    _run(connection)
