"""Migration 0010 (key scopes) on a store with data from the previous head: existing keys stay
unscoped and keep working, existing volumes and SSH keys get no team label (only unscoped keys see
them), and the schema matches the models (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from fastapi.testclient import TestClient
from sqlalchemy import text

from backend.app import create_app
from backend.domain import api_keys
from backend.domain.ids import new_id
from backend.settings import Settings
from backend.store.base import Base
from backend.store.db import make_engine
from backend.store.migrate import alembic_config
from tests.backend.access_keys import client_for, make_key
from tests.backend.fresh_databases import empty_database
from tests.backend.keys import ed25519_key

PREVIOUS_HEAD = "0009_credentials_lease"
VOLUME_ID, SSH_KEY_ID = new_id("volume"), new_id("ssh_key")


def migrate(settings: Settings, revision: str) -> None:
    engine = make_engine(settings)
    config = alembic_config(engine)
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def old_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Settings, str]]:
    """A store at the previous head holding a project, an admin key, a volume and an SSH key."""
    with empty_database(request.param, tmp_path) as url:
        settings = Settings(
            database_url=url,
            data_dir=tmp_path / "data",
            embedded_worker=False,
            embedded_billing=False,
            auth_cache_seconds=0,
        )
        migrate(settings, PREVIOUS_HEAD)
        key = api_keys.generate_api_key()
        now = datetime.now(UTC)
        rows = {
            "projects (id, name, created_at)": {"id": "prj_old", "name": "acme", "created_at": now},
            "api_keys (id, project_id, prefix, digest, role, created_at)": {
                "id": "key_old",
                "project_id": "prj_old",
                "prefix": api_keys.display_prefix(key),
                "digest": api_keys.digest(key),
                "role": "admin",
                "created_at": now,
            },
            "volumes (id, project_id, name, region, size_tib, status, generation, created_at, updated_at)": {
                "id": VOLUME_ID,
                "project_id": "prj_old",
                "name": "data",
                "region": "us-east-1",
                "size_tib": 1,
                "status": "available",
                "generation": 1,
                "created_at": now,
                "updated_at": now,
            },
            "ssh_keys (id, project_id, name, public_key, fingerprint, key_type, generation, created_at, "
            "updated_at)": {
                "id": SSH_KEY_ID,
                "project_id": "prj_old",
                "name": "laptop",
                "public_key": ed25519_key(),
                "fingerprint": "SHA256:old",
                "key_type": "ssh-ed25519",
                "generation": 1,
                "created_at": now,
                "updated_at": now,
            },
        }
        engine = make_engine(settings)
        with engine.begin() as connection:
            for table, values in rows.items():
                columns = ", ".join(f":{name}" for name in values)
                connection.execute(text(f"INSERT INTO {table} VALUES ({columns})"), values)
        engine.dispose()
        yield settings, key


def _new_column(diff: object) -> bool:
    return any(name in repr(diff) for name in ("scope_key", "scope_value", "'labels'"))


def test_key_scopes_migration_keeps_old_keys_unscoped_and_old_resources_teamless(
    old_store: tuple[Settings, str],
) -> None:
    settings, old_key = old_store
    migrate(settings, "head")
    engine = make_engine(settings)
    with engine.connect() as connection:
        scope = connection.execute(text("SELECT scope_key, scope_value FROM api_keys")).one()
        labels = [
            connection.execute(text(f"SELECT labels FROM {t}")).scalar_one() for t in ("volumes", "ssh_keys")
        ]
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        drift = [d for d in compare_metadata(context, Base.metadata) if _new_column(d)]
    engine.dispose()
    assert drift == []
    assert tuple(scope) == (None, None)
    assert [value if isinstance(value, dict) else json.loads(value) for value in labels] == [
        {},
        {},
    ]
    app = create_app(settings)
    try:
        with TestClient(app, raise_server_exceptions=False) as client:
            old = client_for(client, old_key)
            assert [v["id"] for v in old.get("/v1/volumes").json()["items"]] == [VOLUME_ID]
            assert old.get(f"/v1/ssh-keys/{SSH_KEY_ID}").status_code == 200
            team = client_for(client, make_key(settings, "acme", "admin", "team=nlp"))
            assert team.get("/v1/volumes").json()["items"] == []
            assert team.get(f"/v1/ssh-keys/{SSH_KEY_ID}").status_code == 404
            made = team.post("/v1/volumes", json={"name": "nlp", "region": "us-east-1", "size_tib": 1})
            assert made.status_code == 201
            assert [v["name"] for v in old.get("/v1/volumes").json()["items"]] == ["data", "nlp"]
    finally:
        app.state.gpucloud.engine.dispose()
