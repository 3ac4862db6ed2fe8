"""Secrets at rest: Kubernetes admin tokens are sealed with AES-256-GCM in the database, served
unchanged, sealed by the migration from the previous revision, and re-sealed by `rotate-secret-key`."""

from __future__ import annotations

import datetime as dt
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.script import ScriptDirectory
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from backend.app import create_app
from backend.cli import main
from backend.provisioning.worker import EngineWorker
from backend.settings import Settings
from backend.store.db import make_engine, make_session_factory
from backend.store.engine_models import EngineCluster
from backend.store.migrate import MIGRATIONS_DIR, alembic_config, upgrade_to_head
from backend.store.secrets import KEY_FILE, SecretKeyError, generate_key, key_id, keyring
from tests.backend.conftest import Tenant
from tests.backend.engine.conftest import create, drain
from tests.backend.fresh_databases import empty_database

SECRETS_REVISION = "0006_secrets_at_rest"
KEY_A, KEY_B = generate_key(), generate_key()


def _raw_token(settings: Settings, cluster_id: str) -> str:
    engine = make_engine(settings)
    try:
        with engine.connect() as connection:
            query = sa.text("SELECT kube_admin_token FROM engine_clusters WHERE cluster_id = :id")
            value = connection.execute(query, {"id": cluster_id}).scalar_one()
    finally:
        engine.dispose()
    assert isinstance(value, str)
    return value


@contextmanager
def _session(settings: Settings) -> Iterator[Session]:
    engine = make_engine(settings)
    try:
        with make_session_factory(engine)() as session:
            yield session
    finally:
        engine.dispose()


def _kubernetes_cluster(admin: TestClient, make_worker: Callable[..., EngineWorker]) -> tuple[str, str]:
    """A running Kubernetes cluster's id and the admin token its kubeconfig serves."""
    cluster = create(admin, name="kube", orchestrator="kubernetes")
    drain(make_worker())
    response = admin.get(f"/v1/clusters/{cluster['id']}/credentials")
    assert response.status_code == 200, response.text
    token = response.json()["kubeconfig"].split("token: ")[1].split()[0].strip("'\"")
    return cluster["id"], token


def test_secrets_token_is_sealed_at_rest_and_served_unchanged(
    admin: TestClient, make_worker: Callable[..., EngineWorker], settings: Settings
) -> None:
    cluster_id, token = _kubernetes_cluster(admin, make_worker)
    stored = _raw_token(settings, cluster_id)
    key_file = settings.data_dir / KEY_FILE
    assert stored.startswith(f"gcs1:{key_id(keyring(settings).current)}:") and token not in stored
    assert len(token) >= 40 and stat.S_IMODE(key_file.stat().st_mode) == 0o600
    # Served the same on every read (a fresh nonce per seal, one plaintext).
    again = admin.get(f"/v1/clusters/{cluster_id}/credentials").json()["kubeconfig"]
    assert f"token: {token}" in again or token in again


def test_secrets_wrong_key_is_a_clear_error_that_names_the_keys(
    admin: TestClient, make_worker: Callable[..., EngineWorker], settings: Settings, tenant: Tenant
) -> None:
    cluster_id, token = _kubernetes_cluster(admin, make_worker)
    with_key_a = settings.model_copy(update={"secret_key": KEY_A})  # not the key file that sealed it
    with _session(with_key_a) as session:
        state = session.get(EngineCluster, cluster_id)
        assert state is not None
        with pytest.raises(SecretKeyError) as caught:
            _ = state.kube_admin_token
    message = str(caught.value)
    assert key_id(keyring(settings).current) in message and key_id(keyring(with_key_a).current) in message
    assert "GPUCLOUD_SECRET_KEY" in message and token not in message
    # Through the API: a problem document that says what to fix, never the token.
    app = create_app(with_key_a)
    with TestClient(app, headers={"Authorization": f"Bearer {tenant.admin_key}"}) as wrong_key:
        response = wrong_key.get(f"/v1/clusters/{cluster_id}/credentials")
    app.state.gpucloud.engine.dispose()
    assert response.status_code == 500 and response.json()["code"] == "secret_key_unavailable"
    assert "GPUCLOUD_SECRET_KEY" in response.json()["detail"] and token not in response.text
    with pytest.raises(SecretKeyError, match="GPUCLOUD_SECRET_KEY is not a secret key"):
        keyring(settings.model_copy(update={"secret_key": "too-short"}))


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with empty_database(request.param, tmp_path) as url:
        yield url


def _insert(connection: sa.Connection, table_name: str, values: dict[str, Any]) -> None:
    """Insert a row with `values`, every other required column filled by type (the schema of the
    revision the database is at, whatever the models say now)."""
    table = sa.Table(table_name, sa.MetaData(), autoload_with=connection)
    filler: dict[type, Any] = {
        sa.Boolean: False, sa.Integer: 1, sa.DateTime: dt.datetime.now(dt.UTC), sa.JSON: {}, sa.String: "x",
    }
    row = dict(values)
    for column in table.columns:
        if column.name in row or column.nullable or column.server_default is not None:
            continue
        row[column.name] = next(v for t, v in filler.items() if isinstance(column.type, t))
    connection.execute(table.insert().values(row))


def test_secrets_migration_seals_the_plaintext_tokens_of_the_previous_revision(
    empty_url: str, tmp_path: Path
) -> None:
    settings = Settings(database_url=empty_url, data_dir=tmp_path / "data", secret_key=KEY_A)
    engine = make_engine(settings)
    config = alembic_config(engine)
    previous = ScriptDirectory(str(MIGRATIONS_DIR)).get_revision(SECRETS_REVISION).down_revision
    assert isinstance(previous, str)
    plaintext = "plain-admin-token-" + "x" * 25
    try:
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, previous)
            _insert(connection, "projects", {"id": "prj_1", "name": "legacy"})
            for cluster_id, token in (("cls_kube", plaintext), ("cls_slurm", None)):
                _insert(connection, "clusters", {"id": cluster_id, "project_id": "prj_1", "name": cluster_id})
                _insert(connection, "engine_clusters", {"cluster_id": cluster_id, "kube_admin_token": token})
        upgrade_to_head(engine)
        stored = _raw_token(settings, "cls_kube")
        assert stored.startswith(f"gcs1:{key_id(keyring(settings).current)}:") and plaintext not in stored
        with make_session_factory(engine)() as session:
            assert session.get(EngineCluster, "cls_kube").kube_admin_token == plaintext  # type: ignore[union-attr]
            assert session.get(EngineCluster, "cls_slurm").kube_admin_token is None  # type: ignore[union-attr]
        upgrade_to_head(engine)  # nothing sealed twice
        assert _raw_token(settings, "cls_kube") == stored
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            command.downgrade(config, previous)
        assert _raw_token(settings, "cls_kube") == plaintext
    finally:
        engine.dispose()


def test_cli_rotate_secret_key_reseals_every_secret_with_the_new_key(
    admin: TestClient,
    make_worker: Callable[..., EngineWorker],
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cluster_id, token = _kubernetes_cluster(admin, make_worker)  # sealed with the data dir's key file
    old_key = (settings.data_dir / KEY_FILE).read_text().strip()
    monkeypatch.setenv("GPUCLOUD_DATABASE_URL", settings.resolved_database_url)
    monkeypatch.setenv("GPUCLOUD_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("GPUCLOUD_SECRET_KEY", KEY_B)
    monkeypatch.setenv("GPUCLOUD_SECRET_KEYS_PREVIOUS", old_key)
    assert main(["rotate-secret-key"]) == 0
    assert "re-encrypted 1 of 1 stored secrets" in capsys.readouterr().err
    new_only = settings.model_copy(update={"secret_key": KEY_B})
    assert _raw_token(new_only, cluster_id).startswith(f"gcs1:{key_id(keyring(new_only).current)}:")
    with _session(new_only) as session:
        assert session.get(EngineCluster, cluster_id).kube_admin_token == token  # type: ignore[union-attr]
    assert main(["rotate-secret-key"]) == 0  # repeatable: nothing left to re-seal
    assert "re-encrypted 0 of 1" in capsys.readouterr().err
    monkeypatch.delenv("GPUCLOUD_SECRET_KEYS_PREVIOUS")
    with _session(settings) as session, pytest.raises(SecretKeyError):  # the old key alone: no longer
        _ = session.get(EngineCluster, cluster_id).kube_admin_token  # type: ignore[union-attr]
