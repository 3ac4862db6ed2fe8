"""Engine throughput: 500 clusters of 2 x 8xH100 from create to RUNNING at maximum simulated speed.

Measured on SQLite (one worker) and PostgreSQL (one and two worker processes) in the same run: the
admission time (500 creates, each its own transaction, as the API does them), the bring-up wall time
until every cluster is RUNNING, and driver steps per second. Needs GPUCLOUD_TEST_POSTGRES_URL for the
PostgreSQL rows (`make bench` runs under scripts/with-postgres.sh); without it they are reported as
skipped with the reason.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, func, select, text
from sqlalchemy.engine import make_url

from backend.domain.catalog import catalog_to_dict
from backend.logging import configure_logging
from backend.provisioning.engine import request_reconcile
from backend.runtime import build_runtime
from backend.settings import Settings
from backend.store.db import make_engine
from backend.store.engine_models import Step
from backend.store.migrate import upgrade_to_head
from backend.store.models import Cluster, Project

from .admission_fleet import bench_catalog

CLUSTERS = int(os.environ.get("GPUCLOUD_BENCH_CLUSTERS", "500"))
NODES = 2
ENGINE_ENV = {
    "GPUCLOUD_SIMULATION_SPEED": "1e9",
    "GPUCLOUD_SIMULATION_BOOT_FAILURE_RATE": "0",
    "GPUCLOUD_SIMULATION_ACCEPTANCE_FAILURE_RATE": "0",
    "GPUCLOUD_ENGINE_POLL_SECONDS": "0.01",
    "GPUCLOUD_LOG_LEVEL": "warning",
}


def _catalog_file(directory: Path) -> Path:
    # us-east-1 with CLUSTERS * NODES + 64 nodes of 8xH100 and room for more than 512 cluster subnets.
    doc = catalog_to_dict(bench_catalog(CLUSTERS, extra=0))
    path = directory / "catalog.json"
    path.write_text(json.dumps(doc))
    return path


def _admit(url: str) -> float:
    runtime = build_runtime(Settings(database_url=url))  # the bench catalog (GPUCLOUD_CATALOG_FILE) in force
    engine, sessions = runtime.db, runtime.write_sessions
    now = dt.datetime.now(dt.UTC)
    with sessions.begin() as session:
        session.add(Project(id="prj_bench", name="bench", created_at=now))
    started = time.perf_counter()
    for i in range(CLUSTERS):
        with sessions.begin() as session:
            cluster = Cluster(
                id=f"cls_{i:026d}", project_id="prj_bench", name=f"bench{i}", region="us-east-1",
                instance_type="8xH100", node_count=NODES, orchestrator="slurm", interconnect="infiniband",
                billing_type="on_demand", labels={}, deletion_protection=False, status="PENDING",
                generation=1, created_at=now, updated_at=now,
            )
            session.add(cluster)
            session.flush()
            request_reconcile(session, cluster.id)
    elapsed = time.perf_counter() - started
    engine.dispose()
    return elapsed


def _bring_up(url: str, workers: int, env: dict[str, str]) -> dict[str, float]:
    engine = make_engine(Settings(database_url=url))
    started = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-m", "benchmarks.engine_throughput", "--worker", url],
                              env=env) for _ in range(workers)]
    try:
        while True:
            with engine.connect() as connection:
                running = connection.scalar(select(func.count()).select_from(Cluster)
                                            .where(Cluster.status == "RUNNING"))
            if running == CLUSTERS:
                break
            if any(p.poll() is not None for p in procs):
                raise RuntimeError("a worker process exited early")
            time.sleep(0.05)
        wall = time.perf_counter() - started
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)
    with engine.connect() as connection:
        steps = int(connection.scalar(select(func.count()).select_from(Step)) or 0)
    engine.dispose()
    return {"wall_s": round(wall, 2), "steps": steps, "steps_per_s": round(steps / wall, 1),
            "clusters_per_s": round(CLUSTERS / wall, 1)}


def _scenario(url: str, workers: int, env: dict[str, str]) -> dict[str, Any]:
    engine = make_engine(Settings(database_url=url))
    upgrade_to_head(engine)
    engine.dispose()
    admission = _admit(url)
    result = _bring_up(url, workers, env)
    return {"admission_s": round(admission, 2), **result}


def _postgres_database(admin_url: str) -> tuple[str, Any]:
    name = f"gpucloud_bench_{uuid.uuid4().hex[:10]}"
    admin = create_engine(make_url(admin_url), isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)

    def drop() -> None:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

    return url, drop


def run() -> dict[str, Any]:
    """Run every scenario, print one line each, return the figures."""
    configure_logging("warning")  # admission runs in this process: keep the figures readable
    results: dict[str, Any] = {"clusters": CLUSTERS, "nodes_per_cluster": NODES}
    with tempfile.TemporaryDirectory(prefix="gpucloud-bench-engine-") as tmp:
        directory = Path(tmp)
        os.environ["GPUCLOUD_CATALOG_FILE"] = str(_catalog_file(directory))
        env = {**os.environ, **ENGINE_ENV}
        scenarios: list[tuple[str, str | None, int]] = [("sqlite_1_worker", f"sqlite:///{directory}/e.db", 1)]
        pg = os.environ.get("GPUCLOUD_TEST_POSTGRES_URL")
        scenarios += [("postgresql_1_worker", pg, 1), ("postgresql_2_workers", pg, 2)]
        for label, base_url, workers in scenarios:
            if base_url is None:
                results[label] = {"skipped": "GPUCLOUD_TEST_POSTGRES_URL is not set"}
            elif base_url.startswith("postgresql"):
                url, drop = _postgres_database(base_url)
                try:
                    results[label] = _scenario(url, workers, env)
                finally:
                    drop()
            else:
                results[label] = _scenario(base_url, workers, env)
            print(f"   {label:22s} {results[label]}", flush=True)
        del os.environ["GPUCLOUD_CATALOG_FILE"]
    return results


def _worker_main(url: str) -> None:
    from backend.provisioning.worker import run_forever

    runtime = build_runtime(Settings(database_url=url, log_level="warning"))
    try:
        run_forever(runtime.engine_worker())
    finally:
        runtime.close()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        _worker_main(sys.argv[2])
    else:
        print(json.dumps(run(), indent=2))
