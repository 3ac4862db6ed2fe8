"""Engine test helpers: a worker on the test database, driven pass by pass at simulated max speed."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from backend.domain import catalog as catalog_module
from backend.domain.catalog import Catalog, catalog_to_dict
from backend.provisioning.settings import EngineSettings
from backend.provisioning.worker import EngineWorker
from backend.settings import Settings
from backend.store.db import make_engine, make_session_factory

FAST = {
    "simulation_speed": 1e9,
    "simulation_boot_failure_rate": 0.0,
    "simulation_acceptance_failure_rate": 0.0,
    "simulation_xid_rate": 0.0,
    "engine_lease_seconds": 5.0,
}


@pytest.fixture
def sessions(settings: Settings) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(settings)
    yield make_session_factory(engine, write=True)
    engine.dispose()


@pytest.fixture
def make_worker(sessions: sessionmaker[Session]) -> Callable[..., EngineWorker]:
    def build(**overrides: Any) -> EngineWorker:
        return EngineWorker(sessions, EngineSettings(**{**FAST, **overrides}))

    return build


def drain(worker: EngineWorker, *, timeout: float = 20.0) -> int:
    """Run passes until nothing is due (waiting for timers in between); returns the passes run."""
    deadline = time.monotonic() + timeout
    passes = 0
    while time.monotonic() < deadline:
        result = worker.run_once()
        passes += result.committed
        if result.claimed == 0:
            wait = worker.next_due_in()
            if wait >= worker.settings.engine_poll_seconds:
                return passes
            time.sleep(wait + 0.001)
    raise AssertionError("engine did not go idle")


def cluster_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "train",
        "region": "us-east-1",
        "instance_type": "8xH100",
        "node_count": 2,
    }
    body.update(overrides)
    return body


def get(admin: TestClient, cluster_id: str) -> dict[str, Any]:
    response = admin.get(f"/v1/clusters/{cluster_id}")
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


def create(admin: TestClient, **overrides: Any) -> dict[str, Any]:
    response = admin.post("/v1/clusters", json=cluster_body(**overrides))
    assert response.status_code in (200, 201, 202), response.text
    data: dict[str, Any] = response.json()
    return data


def install_catalog(monkeypatch: pytest.MonkeyPatch, directory: Path, pools: dict[str, int]) -> Catalog:
    """Make the us-east-1 InfiniBand fabric hold only `pools` (before the app is built: it reads the
    catalog once)."""
    doc = catalog_to_dict(catalog_module._builtin_catalog())
    for fabric in doc["fabrics"]:
        if fabric["name"] == "ib-east-a":
            fabric["pools"] = pools
    path = directory / "catalog.json"
    path.write_text(json.dumps(doc))
    monkeypatch.setenv("GPUCLOUD_CATALOG_FILE", str(path))
    monkeypatch.setattr(catalog_module, "_cache", {})
    return catalog_module.default_catalog()


@pytest.fixture
def three_h100(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Catalog:
    return install_catalog(monkeypatch, tmp_path, {"8xH100": 3})


@pytest.fixture
def two_h100(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Catalog:
    return install_catalog(monkeypatch, tmp_path, {"8xH100": 2})


def ssh_public_key() -> str:
    key = ed25519.Ed25519PrivateKey.generate().public_key()
    return key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
