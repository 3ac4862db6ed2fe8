"""The runtime: built once from one Settings at start; nothing reads the environment after that."""

from __future__ import annotations

import ast
import json
import shutil
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from backend import cli
from backend.app import create_app
from backend.billing import settings as billing_settings
from backend.billing.account import credit_standing
from backend.domain import catalog as catalog_module
from backend.domain.catalog import catalog_to_dict, default_catalog
from backend.provisioning import settings as engine_settings
from backend.runtime import build_runtime
from backend.settings import Settings
from backend.store.db import sqlite_writer
from backend.store.migrate import upgrade_to_head
from backend.store.secrets import SecretKeyError, keyring_of
from tests.backend.conftest import make_tenant

BACKEND = Path(__file__).resolve().parents[2] / "backend"
SETTINGS_CLASSES = {"Settings", "EngineSettings", "BillingSettings"}
# Where a process starts and so reads its configuration: the `gpucloud-backend` commands, and the
# `alembic` command's environment (a process of its own, for the keys of sealed columns).
START_MODULES = {"cli.py", "store/migrations/env.py"}
# Offline generators building an app on an in-memory store (`make generate`), not a serving process.
GENERATORS = {"openapi_export.py", "api/openapi.py", "api/role_matrix.py"}


def _first_run_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """GPUCLOUD_* variables of every section, a catalog file whose one pool is 3 nodes; the database."""
    doc = catalog_to_dict(catalog_module._builtin_catalog())
    doc["fabrics"][0]["pools"]["8xH100"] = 3
    catalog_file = tmp_path / "catalog.json"
    catalog_file.write_text(json.dumps(doc))
    database = tmp_path / "first.db"
    engine = create_engine(f"sqlite:///{database}")
    upgrade_to_head(engine)
    engine.dispose()
    for name, value in {
        "GPUCLOUD_DATABASE_URL": f"sqlite:///{database}", "GPUCLOUD_DATA_DIR": str(tmp_path / "data"),
        "GPUCLOUD_EMBEDDED_WORKER": "false", "GPUCLOUD_EMBEDDED_BILLING": "false",
        "GPUCLOUD_CATALOG_FILE": str(catalog_file), "GPUCLOUD_SIMULATION_SPEED": "600",
        "GPUCLOUD_ENGINE_BATCH_SIZE": "3", "GPUCLOUD_BILLING_INTERVAL_SECONDS": "7",
        "GPUCLOUD_BILLING_ATTACH_REFUSED_AFTER_HOURS": "5",
    }.items():
        monkeypatch.setenv(name, value)
    return database


def _change_everything(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """What an operator might do to the environment of a running process: none of it may take effect."""
    (tmp_path / "catalog.json").unlink()
    monkeypatch.delenv("GPUCLOUD_CATALOG_FILE")
    for name, value in {
        "GPUCLOUD_DATABASE_URL": f"sqlite:///{tmp_path / 'second.db'}", "GPUCLOUD_SIMULATION_SPEED": "1",
        "GPUCLOUD_ENGINE_BATCH_SIZE": "50", "GPUCLOUD_BILLING_INTERVAL_SECONDS": "3600",
        "GPUCLOUD_BILLING_ATTACH_REFUSED_AFTER_HOURS": "99", "GPUCLOUD_DRIVER": "no-such-driver",
    }.items():
        monkeypatch.setenv(name, value)


def test_runtime_keeps_the_settings_read_at_start(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    database = _first_run_environment(monkeypatch, tmp_path)
    runtime = build_runtime(Settings())
    _change_everything(monkeypatch, tmp_path)
    try:
        assert runtime.db.url.database == str(database)
        assert runtime.catalog.capacity("us-east-1", "ib-east-a", "8xH100") == 3
        # worker: the engine settings, catalog and driver of the start.
        worker = runtime.engine_worker()
        assert (worker.settings.simulation_speed, worker.settings.engine_batch_size) == (600, 3)
        assert worker.catalog is runtime.catalog and worker.driver is runtime.driver
        assert runtime.driver.name == "simulated"
        # billing-run: the metering loop's interval; the credit guards' policy.
        loop = runtime.metering_loop()
        assert runtime.billing.interval_seconds == 7 and billing_settings.configured() is runtime.billing
        assert loop.run_once().projects == 0
        # The engine and catalog deep in a request (admission, views) see the same values.
        assert engine_settings.configured().simulation_speed == 600
        assert default_catalog() is runtime.catalog
    finally:
        runtime.close()


def test_serve_keeps_the_settings_read_at_start(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _first_run_environment(monkeypatch, tmp_path)
    app = create_app(Settings())
    _change_everything(monkeypatch, tmp_path)
    state = app.state.gpucloud
    key = make_tenant(state.settings, "acme").admin_key
    with TestClient(app, headers={"Authorization": f"Bearer {key}"}) as client:
        answer = client.get("/v1/instance-types")
        assert answer.status_code == 200, answer.text
    h100 = next(item for item in answer.json()["items"] if item["name"] == "8xH100")
    # The catalog file of the start (since deleted), and the orchestrators of its driver (simulated).
    assert h100["availability"][0]["capacity_nodes"] == 3
    assert "kubernetes" in h100["rules"]["orchestrators_multi_node"]
    assert state.runtime.catalog is state.catalog is default_catalog()
    assert state.catalog.capacity("us-east-1", "ib-east-a", "8xH100") == 3
    assert state.runtime.settings.engine.simulation_speed == 600
    with state.read_sessions() as session:  # the guards' default: the billing settings of the start
        standing = credit_standing(session, project_id="prj_none", now=state.runtime.clock.now())
    assert standing.refuse_attach is False and billing_settings.configured().attach_refused_after_hours == 5


def test_settings_sections_keep_their_variable_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUCLOUD_DRIVER", "local")
    monkeypatch.setenv("GPUCLOUD_SIMULATION_SEED", "5")
    monkeypatch.setenv("GPUCLOUD_BILLING_SETTLE_SECONDS", "30")
    monkeypatch.setenv("GPUCLOUD_CATALOG_FILE", "")
    settings = Settings(port=9000)
    assert (settings.engine.driver, settings.engine.simulation_seed) == ("local", 5)
    assert settings.billing.settle_seconds == 30 and settings.catalog_file is None and settings.port == 9000
    monkeypatch.setenv("GPUCLOUD_LOCAL_ADDRESS_RANGE", "10.0.0.0/24")
    with pytest.raises(ValueError, match="local_address_range"):
        Settings()


def test_a_command_names_a_catalog_file_it_cannot_use(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GPUCLOUD_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("GPUCLOUD_CATALOG_FILE", str(tmp_path / "missing.json"))
    assert cli.main(["migrate"]) == 1
    assert "GPUCLOUD_CATALOG_FILE" in capsys.readouterr().err and not (tmp_path / "data").exists()
    (tmp_path / "bad.json").write_text('{"regions": "nope"}')
    monkeypatch.setenv("GPUCLOUD_CATALOG_FILE", str(tmp_path / "bad.json"))
    assert cli.main(["migrate"]) == 1
    assert "bad.json" in capsys.readouterr().err


def test_a_sealed_column_needs_an_engine_with_keys() -> None:
    bare = create_engine("sqlite://")
    with pytest.raises(SecretKeyError, match="make_engine"):
        keyring_of(bare.dialect)
    bare.dispose()


# Programs the backend installs on nodes (files of their own, not imported by its processes).
NODE_PROGRAMS = {"provisioning/node_config/oci_runtime.py"}


def _modules() -> list[tuple[str, ast.Module]]:
    return [(str(path.relative_to(BACKEND)), ast.parse(path.read_text(encoding="utf-8")))
            for path in sorted(BACKEND.rglob("*.py"))]


def _environment_keys(tree: ast.Module) -> list[str | None]:
    """The keys each `os.environ` / `os.getenv` use reads (None: not a constant, e.g. the whole map)."""
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    keys: list[str | None] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv")):
            continue
        use = parents.get(node)
        if isinstance(use, ast.Attribute) and use.attr == "get":  # os.environ.get(key)
            use = parents.get(use)
        argument = use.slice if isinstance(use, ast.Subscript) else (
            use.args[0] if isinstance(use, ast.Call) and use.args else None)
        keys.append(argument.value if isinstance(argument, ast.Constant) and isinstance(argument.value, str)
                    else None)
    imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                and node.module == "os" for alias in node.names if alias.name in ("environ", "getenv")]
    return keys + [None for _ in imported]  # `from os import environ`: not followed, refused


def test_only_process_starts_read_settings_from_the_environment() -> None:
    built, subclassed, environment = [], [], []
    for name, tree in _modules():
        for node in ast.walk(tree):
            called = node.func if isinstance(node, ast.Call) else None
            if isinstance(called, ast.Name) and called.id in SETTINGS_CLASSES:
                built.append(name)
            if isinstance(node, ast.ClassDef) and any(
                    isinstance(base, ast.Name) and base.id == "BaseSettings" for base in node.bases):
                subclassed.append(name)
        if name in NODE_PROGRAMS:
            continue  # runs on a node in a job's or a session's environment, never in a backend process
        if any(key != "PATH" for key in _environment_keys(tree)):  # PATH: where the local driver finds tools
            environment.append(name)
    assert set(built) <= START_MODULES | GENERATORS, sorted(set(built) - START_MODULES - GENERATORS)
    assert set(subclassed) == {"settings.py"}
    assert environment == []


def test_the_runtime_engine_worker_reads_without_sqlite_s_write_lock_and_queues_its_writes(
    sqlite_template: Path, tmp_path: Path
) -> None:
    # The runtime hands the worker its write sessions. The autoscaler's reads stay open while the driver
    # is asked for jobs (over SSH on real nodes): they took SQLite's write lock from BEGIN IMMEDIATE, so
    # every other writer waited on them. Its writes queue with the process's other writers.
    path = tmp_path / "gpucloud.db"
    shutil.copyfile(sqlite_template, path)
    runtime = build_runtime(Settings(database_url=f"sqlite:///{path}", data_dir=tmp_path / "data"))
    worker = runtime.engine_worker()
    try:
        with worker.read_sessions() as session:
            assert session.execute(text("SELECT count(*) FROM clusters")).scalar() == 0
            other = sqlite3.connect(path, timeout=0)
            other.execute("BEGIN IMMEDIATE")  # "database is locked" when the read holds the write lock
            other.execute("ROLLBACK")
            other.close()
        # An API write holds the process's writer queue: the worker's heartbeat (a write) waits in it.
        finished: list[float] = []
        with sqlite_writer(runtime.write_sessions):
            beat = threading.Thread(target=lambda: (worker.heartbeat(), finished.append(time.monotonic())))
            beat.start()
            time.sleep(0.2)
            released = time.monotonic()
        beat.join(timeout=30)
        assert finished and finished[0] >= released
    finally:
        runtime.close()
