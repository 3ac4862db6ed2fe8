"""Admission cost against fleet size: per-cluster admission time on top of 200 and of 5,000 live clusters.

Each fleet is written straight into a fresh store (one bulk insert per table: the rows an admitted
2 x 8xH100 Slurm cluster holds, i.e. cluster, engine state, nodes, work item, and its slot, partition
key, subnet, public IP and private IP allocations), so only the admissions on top are timed. They run
as the API does them: `request_reconcile` in its own write transaction per cluster, one process, no
worker. The first create on each store (which counts its free slots once) is reported apart. The
fleets' admissions alternate in rounds, so the machine's load falls on both alike; the
figure is the median over rounds of each round's mean per cluster, and the ratio large / small is
the goal (< 1.5x: admission must not grow with the fleet).

Knobs: `GPUCLOUD_BENCH_FLEETS` (default `200,5000`), `GPUCLOUD_BENCH_ADMISSIONS` per round (default 20),
`GPUCLOUD_BENCH_ROUNDS` (default 9). SQLite always; PostgreSQL too when GPUCLOUD_TEST_POSTGRES_URL is set
(`make bench` sets it).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, insert, text
from sqlalchemy.engine import make_url

from backend.domain.catalog import Catalog, _builtin_catalog, catalog_from_dict, catalog_to_dict
from backend.logging import configure_logging
from backend.provisioning import allocator
from backend.provisioning.engine import request_reconcile
from backend.settings import Settings
from backend.store.db import make_engine, make_session_factory
from backend.store.engine_models import Allocation, EngineCluster, EngineNode, WorkItem
from backend.store.migrate import upgrade_to_head
from backend.store.models import Cluster, Project

from .stats import table

FLEETS = [int(n) for n in os.environ.get("GPUCLOUD_BENCH_FLEETS", "200,5000").split(",")]
ADMISSIONS = int(os.environ.get("GPUCLOUD_BENCH_ADMISSIONS", "20"))
ROUNDS = int(os.environ.get("GPUCLOUD_BENCH_ROUNDS", "9"))
NODES = 2
REGION, FABRIC, ITYPE = "us-east-1", "ib-east-a", "8xH100"
PROJECT = "prj_bench"


def bench_catalog(fleet: int, extra: int = ADMISSIONS * ROUNDS) -> Catalog:
    """The built-in us-east-1 with room for the fleet and `extra` clusters on top: the 8xH100 pool sized
    to them (so the installed fleet grows with the live one, as in a real cloud) and ib-east-a given a
    /9 (8,192 cluster subnets; the built-in /13 holds 512)."""
    doc = catalog_to_dict(_builtin_catalog())
    doc["regions"] = [{**r, "private_cidr": "10.0.0.0/8", "public_cidr": "198.18.0.0/15"}
                      for r in doc["regions"] if r["name"] == REGION]
    doc["fabrics"] = [f for f in doc["fabrics"] if f["region"] == REGION]
    for fabric, block in zip(doc["fabrics"], ("10.0.0.0/9", "10.128.0.0/13", "10.136.0.0/13"), strict=True):
        fabric["private_cidr"] = block
    ib = next(f for f in doc["fabrics"] if f["name"] == FABRIC)
    ib["pools"] = {ITYPE: (fleet + extra) * NODES + 64}
    return catalog_from_dict(doc)


def _fleet_rows(fleet: int, now: dt.datetime) -> dict[type[Any], list[dict[str, Any]]]:
    """The rows of `fleet` running clusters placed as admission would place them, one after another."""
    subnets = ipaddress.ip_network("10.0.0.0/9").subnets(new_prefix=22)
    public = ipaddress.ip_network("198.18.0.0/15").hosts()
    rows: dict[type[Any], list[dict[str, Any]]] = {
        Cluster: [], EngineCluster: [], EngineNode: [], WorkItem: [], Allocation: []}
    slot_pool = allocator.pool_name(REGION, FABRIC, ITYPE)
    for i in range(fleet):
        cid, name = f"cls_fleet{i:021d}", f"fleet{i}"
        subnet, public_ip = str(next(subnets)), str(next(public))
        net = ipaddress.ip_network(subnet)
        pkey = f"0x{i + 1:04x}"
        jumphost = str(net.network_address + 4)
        rows[Cluster].append(dict(
            id=cid, project_id=PROJECT, name=name, region=REGION, instance_type=ITYPE, node_count=NODES,
            orchestrator="slurm", interconnect="infiniband", billing_type="on_demand", labels={},
            deletion_protection=False, node_repair="auto", status="RUNNING", phase="Ready", generation=1,
            created_at=now, updated_at=now))
        rows[EngineCluster].append(dict(
            cluster_id=cid, fabric=FABRIC, hostname_prefix=name, subnet=subnet, partition_key=pkey,
            public_ip=public_ip, jumphost_ip=jumphost, control_plane="ready", current_batch=1,
            membership_version=1, finished=False))
        rows[WorkItem].append(dict(cluster_id=cid, due_at=None, fencing_token=1, passes=1))
        alloc = dict(cluster_id=cid, node_id=None, created_at=now)
        rows[Allocation] += [
            dict(kind=allocator.PARTITION_KEY, pool=f"{REGION}/{FABRIC}", value=pkey, **alloc),
            dict(kind=allocator.SUBNET, pool=allocator.ADDRESS_POOL, value=subnet, **alloc),
            dict(kind=allocator.PUBLIC_IP, pool=allocator.ADDRESS_POOL, value=public_ip, **alloc),
            dict(kind=allocator.PRIVATE_IP, pool=subnet, value=jumphost, **alloc),
        ]
        for index in range(NODES):
            node_id, slot = f"nod_fleet{i:012d}{index:05d}", i * NODES + index
            private_ip = str(net.network_address + 10 + index)
            rows[EngineNode].append(dict(
                id=node_id, cluster_id=cid, name=f"{name}-{index}", active_name=f"{name}-{index}",
                index=index, batch=1, region=REGION, fabric=FABRIC, instance_type=ITYPE, gpu_count=8,
                slot=slot, scalable_unit=slot // 32, private_ip=private_ip, public_ip=None,
                status="RUNNING", stage="ready", attempt=1, op_seq=5, applied_config={}, drained=False,
                created_at=now, updated_at=now))
            rows[Allocation] += [
                dict(alloc, kind=allocator.SLOT, pool=slot_pool, value=str(slot), node_id=node_id),
                dict(alloc, kind=allocator.PRIVATE_IP, pool=subnet, value=private_ip, node_id=node_id),
            ]
    return rows


def populate(engine: Engine, fleet: int) -> None:
    """Write the project and `fleet` live clusters in one transaction, a bulk insert per table."""
    now = dt.datetime.now(dt.UTC)
    with engine.begin() as connection:
        connection.execute(insert(Project), [dict(id=PROJECT, name="bench", created_at=now)])
        for model, rows in _fleet_rows(fleet, now).items():
            if rows:
                connection.execute(insert(model), rows)
    if engine.dialect.name == "postgresql":
        # Planner statistics, as autovacuum would gather for a store that grew to this size.
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            connection.execute(text("ANALYZE"))


class Fleet:
    """One store holding `size` live clusters; `admit(n)` times n more creates on top."""

    def __init__(self, url: str, size: int) -> None:
        self.size = size
        self.catalog = bench_catalog(size)
        self.engine = make_engine(Settings(database_url=url))
        upgrade_to_head(self.engine)
        populate(self.engine, size)
        self.sessions = make_session_factory(self.engine, write=True)
        self.admitted = 0

    def admit(self, count: int) -> float:
        """Seconds per cluster for `count` admissions, each in its own transaction as the API does."""
        now = dt.datetime.now(dt.UTC)
        started = time.perf_counter()
        for _ in range(count):
            i = self.admitted
            self.admitted += 1
            with self.sessions.begin() as session:
                cluster = Cluster(
                    id=f"cls_new{i:023d}", project_id=PROJECT, name=f"new{i}", region=REGION,
                    instance_type=ITYPE, node_count=NODES, orchestrator="slurm", interconnect="infiniband",
                    billing_type="on_demand", labels={}, deletion_protection=False, status="PENDING",
                    generation=1, created_at=now, updated_at=now,
                )
                session.add(cluster)
                session.flush()
                request_reconcile(session, cluster.id, catalog=self.catalog)
        return (time.perf_counter() - started) / count

    def close(self) -> None:
        self.engine.dispose()


def measure(urls: list[str]) -> dict[str, Any]:
    """Alternate rounds of admissions over one store per fleet size; median per-cluster ms per fleet."""
    fleets = [Fleet(url, size) for url, size in zip(urls, FLEETS, strict=True)]
    try:
        # The first create on each store counts the pool's free slots and moves the address pointers
        # past the bulk-inserted fleet (as the first create after the 0008 upgrade does): once per
        # store, reported apart, not part of the per-cluster figure.
        first = {fleet.size: round(fleet.admit(1) * 1000, 1) for fleet in fleets}
        fleets[0].admit(3)  # warm statement caches outside the timing
        per_round: dict[int, list[float]] = {f.size: [] for f in fleets}
        for round_ in range(ROUNDS):
            for fleet in fleets if round_ % 2 == 0 else reversed(fleets):
                per_round[fleet.size].append(fleet.admit(ADMISSIONS))
    finally:
        for fleet in fleets:
            fleet.close()
    ms = {size: statistics.median(values) * 1000 for size, values in per_round.items()}
    return {"ms_per_cluster": {size: round(v, 2) for size, v in ms.items()}, "first_create_ms": first,
            "rounds_ms": {size: [round(v * 1000, 2) for v in values] for size, values in per_round.items()},
            "ratio": round(ms[FLEETS[-1]] / ms[FLEETS[0]], 2)}


@contextmanager
def _postgres_databases(admin_url: str, count: int) -> Iterator[list[str]]:
    admin = create_engine(make_url(admin_url), isolation_level="AUTOCOMMIT")
    names = [f"gpucloud_bench_{uuid.uuid4().hex[:10]}" for _ in range(count)]
    try:
        with admin.connect() as connection:
            for name in names:
                connection.execute(text(f'CREATE DATABASE "{name}"'))
        yield [make_url(admin_url).set(database=n).render_as_string(hide_password=False) for n in names]
    finally:
        with admin.connect() as connection:
            for name in names:
                connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def run() -> dict[str, Any]:
    """Measure on SQLite (and PostgreSQL when configured), print a table, return the figures."""
    configure_logging("warning")
    results: dict[str, Any] = {"fleets": FLEETS, "admissions_per_round": ADMISSIONS, "rounds": ROUNDS,
                               "load_average": [round(x, 2) for x in os.getloadavg()]}
    with tempfile.TemporaryDirectory(prefix="gpucloud-bench-admission-") as tmp:
        results["sqlite"] = measure([f"sqlite:///{Path(tmp)}/fleet{size}.db" for size in FLEETS])
    pg = os.environ.get("GPUCLOUD_TEST_POSTGRES_URL")
    if pg is None:
        results["postgresql"] = {"skipped": "GPUCLOUD_TEST_POSTGRES_URL is not set"}
    else:
        with _postgres_databases(pg, len(FLEETS)) as urls:
            results["postgresql"] = measure(urls)
    results["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    rows = [[store, *(f"{results[store]['ms_per_cluster'][size]:.2f} ms" for size in FLEETS),
             f"{results[store]['ratio']:.2f}x"]
            for store in ("sqlite", "postgresql") if "ratio" in results[store]]
    header = ["store", *(f"{size:,} live clusters" for size in FLEETS),
              f"ratio {FLEETS[-1]:,} / {FLEETS[0]:,}"]
    print(table(header, rows))
    print(f"   per-cluster admission (2 x {ITYPE}), median of {ROUNDS} rounds x {ADMISSIONS} creates; target "
          f"ratio < 1.5x; load average {results['load_average']} -> {results['load_average_after']}")
    for store in ("sqlite", "postgresql"):
        print(f"   {store}: {results[store]}", flush=True)
    return results


if __name__ == "__main__":
    run()
