"""SIGKILL the real `gpucloud-backend serve` mid-provisioning, restart it, and check it converges with
no duplicate nodes and no leaked capacity, partition keys or IPs (SQLite and PostgreSQL)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import func, select

from backend.provisioning import capacity
from backend.settings import Settings
from backend.store.db import make_engine, make_session_factory
from backend.store.engine_models import Allocation, EngineCluster, EngineNode, SimulatedOperation, Step
from backend.store.models import Cluster
from tests.backend.conftest import make_tenant

BIN = Path(sys.executable).with_name("gpucloud-backend")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _serve(
    database_url: str, data_dir: Path, port: int, log: Path, extra: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "GPUCLOUD_DATABASE_URL": database_url,
        "GPUCLOUD_DATA_DIR": str(data_dir),
        "GPUCLOUD_SIMULATION_SPEED": "600",
        "GPUCLOUD_SIMULATION_BOOT_FAILURE_RATE": "0.2",
        "GPUCLOUD_SIMULATION_ACCEPTANCE_FAILURE_RATE": "0.05",
        "GPUCLOUD_SIMULATION_SEED": "3",
        "GPUCLOUD_ENGINE_LEASE_SECONDS": "1.5",
        "GPUCLOUD_ENGINE_POLL_SECONDS": "0.05",
        **(extra or {}),
    }
    with log.open("ab") as out:  # the child keeps its own descriptor
        process = subprocess.Popen(
            [str(BIN), "serve", "--port", str(port)], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    process.kill()
    raise AssertionError(f"serve did not start:\n{log.read_text()[-3000:]}")


def _statuses(api: httpx.Client, ids: list[str]) -> dict[str, str]:
    return {cid: api.get(f"/v1/clusters/{cid}").json().get("status", "gone") for cid in ids}


def _wait(api: httpx.Client, ids: list[str], done: set[str], timeout: float) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        statuses = _statuses(api, ids)
        if set(statuses.values()) <= done:
            return statuses
        time.sleep(0.1)
    raise AssertionError(f"not converged: {statuses}")


def _invariants(database_url: str) -> dict[str, Any]:
    engine = make_engine(Settings(database_url=database_url))
    with make_session_factory(engine)() as session:
        clusters = session.scalars(select(Cluster)).all()
        for cluster in clusters:
            members = session.scalars(
                select(EngineNode).where(
                    EngineNode.cluster_id == cluster.id, EngineNode.active_name.is_not(None)
                )
            ).all()
            if cluster.status == "RUNNING":
                assert sorted(n.name for n in members) == [
                    f"{cluster.name}-{i}" for i in range(cluster.node_count)
                ]
        live = session.scalars(select(EngineNode).where(EngineNode.status != "DESTROYED")).all()
        slots = session.scalars(select(Allocation).where(Allocation.kind == "slot")).all()
        # Every held slot belongs to a live node, every live node holds exactly one slot.
        assert sorted(a.node_id or "" for a in slots) == sorted(n.id for n in live)
        # The free-slot counters agree with the rows: a killed transaction took its counts with it.
        assert capacity.mismatches(session) == []
        finished = set(session.scalars(select(EngineCluster.cluster_id).where(EngineCluster.finished)))
        leaked = session.scalars(select(Allocation).where(Allocation.cluster_id.in_(finished))).all()
        assert leaked == []
        pkeys = session.scalars(select(Allocation.value).where(Allocation.kind == "partition_key")).all()
        assert (
            len(pkeys)
            == len(set(pkeys))
            == len(set(session.scalars(select(EngineCluster.partition_key).where(~EngineCluster.finished))))
        )
        # Driver calls were idempotent: one datacenter operation per engine step, no duplicates.
        steps = session.scalar(select(func.count()).select_from(Step))
        ops = session.scalar(select(func.count()).select_from(SimulatedOperation))
        assert steps == ops
        boots = session.execute(
            select(SimulatedOperation.client_token).where(SimulatedOperation.kind == "node_boot")
        ).all()
        nodes_ever = session.scalar(select(func.count()).select_from(EngineNode))
        assert len(boots) <= nodes_ever
        result = {"clusters": len(clusters), "live_nodes": len(live), "steps": steps}
    engine.dispose()
    return result


def test_engine_converges_after_sigkill_of_serve(database_url: str, tmp_path: Path) -> None:
    tenant = make_tenant(Settings(database_url=database_url, data_dir=tmp_path), "crash")
    port, log = _free_port(), tmp_path / "serve.log"
    server = _serve(database_url, tmp_path, port, log)
    headers = {"Authorization": f"Bearer {tenant.admin_key}"}
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=10) as api:
            ids = []
            for i in range(4):
                response = api.post(
                    "/v1/clusters",
                    json={
                        "name": f"job{i}",
                        "region": "us-east-1",
                        "instance_type": "8xH100",
                        "node_count": 2,
                    },
                )
                assert response.status_code == 201, response.text
                ids.append(response.json()["id"])
            # Kill twice in the middle of bring-up: while nodes boot, then while they configure.
            for wanted in ("PROVISIONING", "CONFIGURING"):
                deadline = time.monotonic() + 20
                while wanted not in _statuses(api, ids).values() and time.monotonic() < deadline:
                    time.sleep(0.02)
                server.send_signal(signal.SIGKILL)
                server.wait(timeout=10)
                server = _serve(database_url, tmp_path, port, log)
            statuses = _wait(api, ids, {"RUNNING", "FAILED"}, timeout=60)
            assert "RUNNING" in statuses.values()
            _invariants(database_url)
            # And once more while everything is being torn down.
            for cid in ids:
                assert api.delete(f"/v1/clusters/{cid}").status_code in (200, 202)
            time.sleep(0.15)
            server.send_signal(signal.SIGKILL)
            server.wait(timeout=10)
            server = _serve(database_url, tmp_path, port, log)
            deadline = time.monotonic() + 60
            while any(api.get(f"/v1/clusters/{cid}").status_code != 404 for cid in ids):
                assert time.monotonic() < deadline, _statuses(api, ids)
                time.sleep(0.1)
        facts = _invariants(database_url)
        assert facts["live_nodes"] == 0
        engine = make_engine(Settings(database_url=database_url))
        with make_session_factory(engine)() as session:
            assert session.scalars(select(Allocation)).all() == []
        engine.dispose()
    finally:
        server.kill()
        server.wait(timeout=10)


def test_engine_converges_after_sigkill_during_a_node_repair(database_url: str, tmp_path: Path) -> None:
    tenant = make_tenant(Settings(database_url=database_url, data_dir=tmp_path), "crash")
    port, log = _free_port(), tmp_path / "serve.log"
    # Every RUNNING machine has an even chance of an XID within ~1 s (600 s simulated).
    faults = {"GPUCLOUD_SIMULATION_XID_RATE": "0.5", "GPUCLOUD_SIMULATION_XID_WINDOW_SECONDS": "600"}
    server = _serve(database_url, tmp_path, port, log, faults)
    headers = {"Authorization": f"Bearer {tenant.admin_key}"}
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=10) as api:
            body = {"name": "train", "region": "us-east-1", "instance_type": "8xH100", "node_count": 4}
            response = api.post("/v1/clusters", json=body)
            assert response.status_code == 201, response.text
            cid = response.json()["id"]
            for _ in range(2):  # kill twice while a failed node's replacement comes up
                deadline = time.monotonic() + 30
                while api.get(f"/v1/clusters/{cid}").json()["phase"] != "Repairing":
                    assert time.monotonic() < deadline, api.get(f"/v1/clusters/{cid}").json()
                    time.sleep(0.02)
                server.send_signal(signal.SIGKILL)
                server.wait(timeout=10)
                server = _serve(database_url, tmp_path, port, log, faults)
            deadline = time.monotonic() + 60
            while (cluster := api.get(f"/v1/clusters/{cid}").json())["phase"] == "Repairing":
                assert time.monotonic() < deadline, cluster
                time.sleep(0.1)
            # Converged: still RUNNING (a node whose daily repairs ran out stays failed: Degraded).
            assert cluster["status"] == "RUNNING" and cluster["phase"] in ("Ready", "Degraded"), cluster
            assert [n["name"] for n in cluster["nodes"] if n["status"] != "DESTROYING"] == [
                f"train-{i}" for i in range(4)
            ]
        server.send_signal(signal.SIGKILL)  # stop the faults before checking
        server.wait(timeout=10)
        _invariants(database_url)
        engine = make_engine(Settings(database_url=database_url))
        with make_session_factory(engine)() as session:
            repairs = session.scalar(select(func.count()).where(EngineNode.repair_of.is_not(None)))
            assert repairs is not None and repairs >= 1
            # Each repair took over its node's address: one private IP row per live node, none twice.
            ips = session.scalars(select(Allocation.value).where(Allocation.kind == "private_ip",
                                                                 Allocation.node_id.is_not(None))).all()
            assert len(ips) == len(set(ips)) == 4
        engine.dispose()
    finally:
        server.kill()
        server.wait(timeout=10)
