"""Day-2 reads on a 64-node cluster: `GET .../nodes` (health, orchestrator state, 8 GPU readings and XID
events per node), `GET .../metrics?window=1d` (a full day of samples for every node in the ring
buffer) and the cluster's own `GET` (every node with its health, what a Terraform refresh reads),
through the real app (TestClient, in process) on SQLite, and on PostgreSQL when
GPUCLOUD_TEST_POSTGRES_URL is set. Prints the median and p95 of 30 requests each."""

from __future__ import annotations

import datetime as dt
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from backend.app import create_app
from backend.logging import configure_logging
from backend.provisioning import node_metrics
from backend.provisioning.settings import EngineSettings
from backend.provisioning.worker import EngineWorker
from backend.services import auth
from backend.settings import Settings
from backend.store.db import make_engine, make_session_factory
from backend.store.migrate import upgrade_to_head

NODES = 64
REQUESTS = 30
FAST = EngineSettings(simulation_speed=1e9, simulation_boot_failure_rate=0.0,
                      simulation_acceptance_failure_rate=0.0, engine_poll_seconds=0.01)


def _timed(client: TestClient, url: str) -> tuple[float, float, int]:
    times = []
    size = 0
    for _ in range(REQUESTS):
        started = time.perf_counter()
        response = client.get(url)
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, response.text
        size = len(response.content)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.95) - 1], size


def _run(label: str, url: str, data_dir: Path) -> None:
    settings = Settings(database_url=url, data_dir=data_dir, embedded_worker=False, log_level="warning")
    engine = make_engine(settings)
    upgrade_to_head(engine)
    sessions = make_session_factory(engine, write=True)
    with sessions.begin() as session:
        auth.create_project(session=session, name="bench")
        session.flush()
        _, key = auth.create_api_key(session=session, project_name="bench", role="admin")
    app = create_app(settings)
    with TestClient(app, headers={"Authorization": f"Bearer {key}"}) as client:
        body = {"name": "big", "region": "us-east-1", "instance_type": "8xH100", "node_count": NODES}
        cluster = client.post("/v1/clusters", json=body).json()
        worker = EngineWorker(sessions, FAST)
        while worker.run_once().claimed or worker.next_due_in() < FAST.engine_poll_seconds:
            pass
        assert client.get(f"/v1/clusters/{cluster['id']}").json()["status"] == "RUNNING"
        now = dt.datetime.now(dt.UTC)
        day = [now - dt.timedelta(minutes=m) for m in range(24 * 60, -1, -1)]
        started = time.perf_counter()
        for index in range(NODES):
            with sessions.begin() as session:
                samples = [node_metrics.Sample(at, float((index + i) % 100), 500_000 + i)
                           for i, at in enumerate(day)]
                node_metrics.record(session, cluster["id"], f"big-{index}", samples)
        loaded = time.perf_counter() - started
        base = f"/v1/clusters/{cluster['id']}"
        nodes = _timed(client, f"{base}/nodes")
        metrics = _timed(client, f"{base}/metrics?window=1d")
        whole = _timed(client, base)  # the cluster with every node's health: the provider's one read
    app.state.gpucloud.engine.dispose()
    engine.dispose()
    print(f"{label}: {NODES} nodes, a day of 1-minute samples each loaded in {loaded:.1f} s")
    for name, (median, p95, size) in (("GET nodes", nodes), ("GET metrics?window=1d", metrics),
                                      ("GET cluster", whole)):
        print(f"  {name:24} median {median:6.1f} ms   p95 {p95:6.1f} ms   {size / 1024:6.0f} KiB")


def run() -> None:
    configure_logging("warning")
    with tempfile.TemporaryDirectory() as tmp:
        _run("SQLite", f"sqlite:///{Path(tmp) / 'bench.db'}", Path(tmp))
    base = os.environ.get("GPUCLOUD_TEST_POSTGRES_URL")
    if not base:
        print("PostgreSQL: skipped (GPUCLOUD_TEST_POSTGRES_URL not set)")
        return
    name = f"bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            _run("PostgreSQL", make_url(base).set(database=name).render_as_string(hide_password=False),
                 Path(tmp))
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
        admin.dispose()


if __name__ == "__main__":
    run()
