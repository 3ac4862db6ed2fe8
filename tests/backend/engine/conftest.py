"""Engine test helpers: a worker on the test database, driven pass by pass at simulated max speed on a
manual clock (time passes when a test or `drain` moves it, never by sleeping)."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from backend.app import create_app
from backend.domain import catalog as catalog_module
from backend.domain.catalog import Catalog, catalog_to_dict
from backend.domain.clock import SYSTEM_CLOCK, Clock, ManualClock
from backend.provisioning.settings import EngineSettings
from backend.provisioning.worker import EngineWorker
from backend.runtime import build_runtime
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
def clock() -> ManualClock:
    """The engine's clock in a test: it starts at the wall clock's time and moves only when told."""
    return ManualClock(SYSTEM_CLOCK.now())


@pytest.fixture
def app(settings: Settings, clock: ManualClock) -> Iterator[FastAPI]:
    """The app on a runtime with the engine's manual clock (the node, metrics, jobs and logs routes read
    the runtime's clock and driver)."""
    application = create_app(build_runtime(settings, clock=clock))
    yield application
    application.state.gpucloud.engine.dispose()


@pytest.fixture
def make_worker(sessions: sessionmaker[Session], clock: ManualClock) -> Callable[..., EngineWorker]:
    """Workers on the test's manual clock (`clock=SYSTEM_CLOCK` for one run in a real thread)."""
    manual = clock

    def build(*, clock: Clock | None = None, **overrides: Any) -> EngineWorker:
        return EngineWorker(sessions, EngineSettings(**{**FAST, **overrides}), clock=clock or manual)

    return build


STEP = dt.timedelta(microseconds=1)  # claims need a lease strictly expired


def catch_up(clock: ManualClock) -> None:
    """Move `clock` to the wall clock's time if it is behind: the app under test stamps its writes (a
    wake-up's due time) with the system clock, and the engine must not see them in its future."""
    clock.set(max(clock.now(), SYSTEM_CLOCK.now()))


def drain(worker: EngineWorker, *, catch_up_with_wall: bool = True, timeout: float = 60.0) -> int:
    """Run passes until nothing is due within the worker's poll interval; returns the passes run.

    On a ManualClock (after `catch_up`, unless the app shares the clock) the clock is moved to each next
    due time instead of sleeping. On the system clock (the local driver's real nodes, whose operations
    run in threads) it sleeps until then."""
    clock = worker.clock
    if isinstance(clock, ManualClock) and catch_up_with_wall:
        catch_up(clock)
    poll = dt.timedelta(seconds=worker.settings.engine_poll_seconds)
    deadline = time.monotonic() + timeout
    passes = 0
    while time.monotonic() < deadline:
        result = worker.run_once()
        passes += result.committed
        if result.claimed == 0:
            due = worker.next_due_at()
            now = clock.now()
            if due is None or due - now >= poll:
                return passes
            if isinstance(clock, ManualClock):
                clock.set(max(due, now) + STEP)
            else:
                time.sleep(max(0.0, (due - now).total_seconds()) + 0.001)
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
    monkeypatch.setattr(catalog_module, "_in_force", [catalog_module.catalog_from_dict(doc)])
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
