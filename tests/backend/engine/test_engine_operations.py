"""Operating the engine: dead workers pruned, their heartbeat age and the queue lag on /metrics, and the
production layout of docs/operations.md run for real (replicas and workers on one PostgreSQL)."""

from __future__ import annotations

import datetime as dt
import os
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from backend.provisioning.worker import EngineWorker
from backend.settings import Settings
from backend.store.db import make_engine, make_session_factory
from backend.store.engine_models import Worker, WorkItem
from backend.store.secrets import generate_key
from tests.backend.conftest import make_tenant
from tests.backend.engine.conftest import create
from tests.backend.engine.test_engine_crash import BIN, _free_port
from tests.backend.fresh_databases import empty_postgres_database


def _add_worker_row(sessions: sessionmaker[Session], worker_id: str, seconds_ago: float) -> None:
    beat = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=seconds_ago)
    with sessions.begin() as session:
        session.add(Worker(id=worker_id, started_at=beat, heartbeat_at=beat, passes=0))


def test_worker_heartbeat_prunes_workers_dead_longer_than_the_prune_age(
    make_worker: Callable[..., EngineWorker], sessions: sessionmaker[Session]
) -> None:
    _add_worker_row(sessions, "dead-long-ago", seconds_ago=3600)
    _add_worker_row(sessions, "just-missed-a-beat", seconds_ago=20)
    worker = make_worker(engine_worker_prune_seconds=60)
    worker.heartbeat()
    with sessions() as session:
        assert set(session.scalars(select(Worker.id))) == {"just-missed-a-beat", worker.id}


def test_metrics_expose_worker_heartbeat_age_and_queue_lag(
    admin: TestClient, client: TestClient, sessions: sessionmaker[Session]
) -> None:
    _add_worker_row(sessions, "silent-worker", seconds_ago=42)
    cluster = create(admin)  # due now; no worker runs in this app
    with sessions.begin() as session:  # and waiting for a worker for a minute already
        item = session.get(WorkItem, cluster["id"])
        assert item is not None and item.due_at is not None
        item.due_at -= dt.timedelta(minutes=1)
    body = client.get("/metrics").text
    age = re.search(r'_heartbeat_age_seconds\{worker="silent-worker"\} ([0-9.e+]+)', body)
    assert age is not None and 42 <= float(age.group(1)) < 60
    lag = re.search(r"^gpucloud_engine_queue_lag_seconds ([0-9.e+-]+)$", body, re.MULTILINE)
    assert lag is not None and 60 <= float(lag.group(1)) < 120


def _start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen([str(BIN), *args], env=env, stdout=out, stderr=subprocess.STDOUT)


def _wait_healthy(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60  # the start of a process on a loaded CI machine
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()[-3000:]
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"serve did not start:\n{log.read_text()[-3000:]}")


def _worker_ids(database_url: str) -> set[str]:
    engine = make_engine(Settings(database_url=database_url))
    try:
        with make_session_factory(engine)() as session:
            return set(session.scalars(select(Worker.id)))
    finally:
        engine.dispose()


def test_layout_replicas_and_workers_on_one_postgresql_converge_after_a_worker_dies(tmp_path: Path) -> None:
    """docs/operations.md's layout: `migrate` once, two `serve` replicas without embedded worker or meter,
    two `worker`s and a `billing-run`, every process with its own data dir and the one shared secret key."""
    with empty_postgres_database() as database_url:
        shared = {
            **os.environ,
            "GPUCLOUD_DATABASE_URL": database_url,
            "GPUCLOUD_SECRET_KEY": generate_key(),
            "GPUCLOUD_EMBEDDED_WORKER": "false",
            "GPUCLOUD_EMBEDDED_BILLING": "false",
            "GPUCLOUD_DB_POOL_SIZE": "4",
            "GPUCLOUD_DB_MAX_OVERFLOW": "2",
            "GPUCLOUD_SIMULATION_SPEED": "600",
            "GPUCLOUD_SIMULATION_BOOT_FAILURE_RATE": "0",
            "GPUCLOUD_SIMULATION_ACCEPTANCE_FAILURE_RATE": "0",
            "GPUCLOUD_ENGINE_LEASE_SECONDS": "1.5",
            "GPUCLOUD_ENGINE_POLL_SECONDS": "0.05",
            "GPUCLOUD_ENGINE_WORKER_PRUNE_SECONDS": "3",
            "GPUCLOUD_LOG_LEVEL": "warning",
        }

        def env(name: str) -> dict[str, str]:
            return {**shared, "GPUCLOUD_DATA_DIR": str(tmp_path / name)}

        log = tmp_path / "processes.log"
        migrated = subprocess.run([str(BIN), "migrate"], env=env("migrate"), capture_output=True, check=False)
        assert migrated.returncode == 0, migrated.stderr
        ports = [_free_port(), _free_port()]
        replicas = [_start(["serve", "--port", str(p)], env(f"serve{i}"), log) for i, p in enumerate(ports)]
        workers = [_start(["worker"], env(f"worker{i}"), log) for i in range(2)]
        meter = _start(["billing-run"], env("billing"), log)
        processes = [*replicas, *workers, meter]
        tenant = make_tenant(Settings(database_url=database_url, data_dir=tmp_path / "cli"), "layout")
        headers = {"Authorization": f"Bearer {tenant.admin_key}"}
        apis = [httpx.Client(base_url=f"http://127.0.0.1:{p}", headers=headers, timeout=10) for p in ports]
        try:
            for port, replica in zip(ports, replicas, strict=True):
                _wait_healthy(port, replica, log)
            ids = []
            for i in range(4):  # alternate replicas, as a load balancer would
                body = {"name": f"job{i}", "region": "us-east-1", "instance_type": "8xH100", "node_count": 2,
                        "orchestrator": "kubernetes" if i == 0 else "slurm"}
                key = {"Idempotency-Key": uuid.uuid4().hex}
                created = apis[i % 2].post("/v1/clusters", json=body, headers=key)
                assert created.status_code == 201, created.text
                # The load balancer retries a POST on the other replica: same key, same cluster.
                retried = apis[(i + 1) % 2].post("/v1/clusters", json=body, headers=key)
                assert retried.json()["id"] == created.json()["id"]
                ids.append(created.json()["id"])
            deadline = time.monotonic() + 60
            while len(_worker_ids(database_url)) < 2:
                assert time.monotonic() < deadline, "workers did not register"
                time.sleep(0.05)
            victim = workers[0]
            victim_ids = {w for w in _worker_ids(database_url) if f":{victim.pid}:" in w}
            assert len(victim_ids) == 1
            victim.send_signal(signal.SIGKILL)  # mid bring-up: its leases expire, the other worker takes over
            victim.wait(timeout=10)
            deadline = time.monotonic() + 60
            while (statuses := [apis[0].get(f"/v1/clusters/{c}").json()["status"] for c in ids]) != [
                "RUNNING"
            ] * len(ids):
                assert time.monotonic() < deadline, statuses
                time.sleep(0.1)
            while victim_ids & _worker_ids(database_url):
                assert time.monotonic() < deadline, "the dead worker was not pruned"
                time.sleep(0.1)
            # The token one replica sealed opens in the other: every process shares GPUCLOUD_SECRET_KEY.
            kubeconfigs = {api.get(f"/v1/clusters/{ids[0]}/credentials").json()["kubeconfig"] for api in apis}
            assert len(kubeconfigs) == 1 and "token:" in kubeconfigs.pop()
            metrics = apis[1].get("/metrics").text
            assert f':{workers[1].pid}:' in metrics and "gpucloud_engine_queue_lag_seconds" in metrics
            assert meter.poll() is None, log.read_text()[-3000:]
        finally:
            for api in apis:
                api.close()
            for process in processes:
                if process.poll() is None:
                    process.terminate()
            for process in processes:
                process.wait(timeout=20)
        # SIGTERM stops a worker and the meter cleanly (uvicorn re-raises it after shutting down: -15).
        assert [workers[1].returncode, meter.returncode] == [0, 0]
        assert {r.returncode for r in replicas} <= {0, -signal.SIGTERM}
