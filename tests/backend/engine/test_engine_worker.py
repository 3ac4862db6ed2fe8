"""Workers: leases, heartbeats, fencing, and `gpucloud-backend worker` processes beside `serve`."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from backend.domain.clock import ManualClock
from backend.provisioning.worker import EngineWorker, PassResult
from backend.settings import Settings
from backend.store.engine_models import Worker, WorkItem
from tests.backend.conftest import make_tenant
from tests.backend.engine.conftest import catch_up, create, drain, get
from tests.backend.engine.test_engine_crash import BIN, _free_port, _serve


def test_worker_lease_heartbeat_and_fencing(
    admin: TestClient, make_worker: Callable[..., EngineWorker], sessions: sessionmaker[Session],
    clock: ManualClock
) -> None:
    cluster = create(admin)
    catch_up(clock)
    first = make_worker(engine_lease_seconds=0.3)
    second = make_worker()
    claimed = first._claim()
    assert [c for c, _ in claimed] == [cluster["id"]]
    assert second._claim() == []  # leased: nobody else takes it
    with sessions() as session:
        before = session.get(WorkItem, cluster["id"]).lease_expires_at  # type: ignore[union-attr]
    clock.advance(seconds=0.1)
    first.heartbeat()  # extends its lease from the new now
    with sessions() as session:
        item = session.get(WorkItem, cluster["id"])
        assert item is not None and item.lease_expires_at > before  # type: ignore[operator]
        assert session.get(Worker, first.id) is not None
    clock.advance(seconds=0.35)  # the first worker stalls past its lease
    taken = second._claim()
    assert [c for c, _ in taken] == [cluster["id"]] and taken[0][1] == claimed[0][1] + 1
    stale = PassResult()
    first._process(cluster["id"], claimed[0][1], stale)
    assert stale.committed == 0  # fenced: its token is no longer current
    fresh = PassResult()
    second._process(cluster["id"], taken[0][1], fresh)
    assert fresh.committed == 1
    drain(second)
    assert get(admin, cluster["id"])["status"] == "RUNNING"


def test_worker_processes_beside_serve_converge(database_url: str, tmp_path: Path) -> None:
    tenant = make_tenant(Settings(database_url=database_url, data_dir=tmp_path), "workers")
    port, log = _free_port(), tmp_path / "serve.log"
    env_extra = {"GPUCLOUD_EMBEDDED_WORKER": "false"}
    server = _serve(database_url, tmp_path, port, log, env_extra)
    env = {
        **os.environ,
        "GPUCLOUD_DATABASE_URL": database_url,
        "GPUCLOUD_SIMULATION_SPEED": "2000",
        "GPUCLOUD_SIMULATION_BOOT_FAILURE_RATE": "0",
        "GPUCLOUD_SIMULATION_ACCEPTANCE_FAILURE_RATE": "0",
        "GPUCLOUD_ENGINE_POLL_SECONDS": "0.05",
        "GPUCLOUD_LOG_LEVEL": "warning",
    }
    with (tmp_path / "workers.log").open("ab") as out:
        workers = [
            subprocess.Popen([str(BIN), "worker"], env=env, stdout=out, stderr=subprocess.STDOUT)
            for _ in range(2)
        ]
    try:
        with httpx.Client(
            base_url=f"http://127.0.0.1:{port}",
            timeout=10,
            headers={"Authorization": f"Bearer {tenant.admin_key}"},
        ) as api:
            ids = [
                api.post(
                    "/v1/clusters",
                    json={"name": f"w{i}", "region": "us-east-1", "instance_type": "8xH100", "node_count": 2},
                ).json()["id"]
                for i in range(3)
            ]
            deadline = time.monotonic() + 60
            while {api.get(f"/v1/clusters/{c}").json()["status"] for c in ids} != {"RUNNING"}:
                assert time.monotonic() < deadline
                time.sleep(0.1)
    finally:
        for process in [*workers, server]:
            process.terminate()
        for process in [*workers, server]:
            process.wait(timeout=20)
    assert [w.returncode for w in workers] == [0, 0]  # SIGTERM stops a worker cleanly
    from backend.store.db import make_engine, make_session_factory

    engine = make_engine(Settings(database_url=database_url))
    with make_session_factory(engine)() as session:
        assert len(session.scalars(select(Worker)).all()) >= 2
    engine.dispose()
