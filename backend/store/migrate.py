"""Run the Alembic migrations programmatically (no alembic.ini needed at deploy time), and check that a
database is at the revision this code expects before a process serves from it."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, text

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
# pg_advisory_xact_lock key taken by every migration run: concurrent `migrate` runs (or replicas of a
# deployment job) queue behind each other and the later ones find nothing left to do.
MIGRATION_LOCK_KEY = 0x67707563_6D696772  # "gpucmigr"


class SchemaNotCurrent(RuntimeError):
    """The database is not at the revision this code expects: it must be migrated (or the code upgraded)."""


def alembic_config(engine: Engine) -> Config:
    """An Alembic config bound to `engine`'s URL with our migrations directory."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    url = engine.url.render_as_string(hide_password=False)
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade_to_head(engine: Engine) -> None:
    """Apply every migration not yet applied to the database behind `engine`."""
    config = alembic_config(engine)
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


def head_revision() -> str:
    """The newest revision this code knows."""
    script = ScriptDirectory(str(MIGRATIONS_DIR))
    head = script.get_current_head()
    assert head is not None
    return head


def check_schema_current(engine: Engine) -> None:
    """Raise `SchemaNotCurrent`, saying what to do, unless the database is at this code's head revision."""
    script = ScriptDirectory(str(MIGRATIONS_DIR))
    with engine.connect() as connection:
        current = MigrationContext.configure(connection).get_current_revision()
    head = head_revision()
    if current == head:
        return
    where = engine.url.render_as_string(hide_password=True)
    if current is None:
        raise SchemaNotCurrent(
            f"the database {where} has no gpucloud schema: run `gpucloud-backend migrate` once, then start "
            "the servers and workers"
        )
    known = {revision.revision for revision in script.walk_revisions()}
    if current in known:
        raise SchemaNotCurrent(
            f"the database {where} is at revision {current}, this version needs {head}: run "
            "`gpucloud-backend migrate` once (docs/operations.md, Upgrading), then start this version"
        )
    raise SchemaNotCurrent(
        f"the database {where} is at revision {current}, which this version does not know (it was "
        f"migrated by a newer version; this one needs {head}): run the newer version"
    )
