"""The local driver under the engine on real nodes (root, Debian's daemons): the paths the Terraform
acceptance test does not walk. The store is not what is tested here, so SQLite only."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from backend.provisioning.drivers.local.driver import LocalDriver, tear_down
from backend.provisioning.drivers.local.namespaces import LocalCluster, run
from backend.provisioning.engine import pause_cluster, resume_cluster
from backend.provisioning.settings import EngineSettings, use
from backend.provisioning.worker import EngineWorker
from tests.backend.engine.conftest import FAST, create, get, sessions

__all__ = ["sessions"]  # fixture of the engine tests, used here


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalDriver]:
    root = Path("/var/tmp") / f"gpucloud-local-driver-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("GPUCLOUD_DRIVER", "local")  # what the API reports (login) follows the driver
    use(EngineSettings())  # in force now; the process_configuration fixture puts the old ones back
    local = LocalDriver(root)
    try:
        yield local
    finally:
        assert local.wait_idle(), "operations still running"
        for cluster_dir in (root / "clusters").glob("*") if (root / "clusters").exists() else []:
            tear_down(LocalCluster(root, cluster_dir.name, "10.0.0.0/22"))
        subprocess.run(["umount", str(root / "ns")], check=False, capture_output=True)
        subprocess.run(["rm", "-rf", str(root)], check=False)


def _until(worker: EngineWorker, admin: TestClient, cluster_id: str, wanted: Any,
           seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while True:
        body = get(admin, cluster_id)
        if wanted(body):
            return
        assert time.monotonic() < deadline, (body["status"], body["phase"], body["status_reason"])
        worker.run_once()
        time.sleep(0.05)


def _converged(count: int) -> Any:
    return lambda body: (body["phase"] == "Ready" and len(body["nodes"]) == count
                         and all(node["status"] == "RUNNING" for node in body["nodes"]))


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_local_driver_single_node_slurm_cluster_grows_into_a_cluster(
    admin: TestClient, sessions: sessionmaker[Session], driver: LocalDriver, tmp_path: Path
) -> None:
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "key")])
    key = admin.post("/v1/ssh-keys", json={"name": "k", "public_key": (tmp_path / "key.pub").read_text()})
    assert key.status_code == 201, key.text
    worker = EngineWorker(sessions, EngineSettings.model_validate(FAST), driver=driver)
    cluster = create(admin, name="g", node_count=1, orchestrator="slurm", ssh_key_ids=[key.json()["id"]])
    _until(worker, admin, cluster["id"], _converged(1))
    assert _ssh(tmp_path / "key", get(admin, cluster["id"])["login"]["public_ip"], "srun hostname") == ["g-0"]

    # The controller moves from the node to a new jumphost; the node keeps its slurmd and stays healthy.
    assert admin.patch(f"/v1/clusters/{cluster['id']}", json={"node_count": 2}).status_code == 200
    time.sleep(0.1)
    _until(worker, admin, cluster["id"], _converged(2))
    for _ in range(15):  # a few health reads: no node fails after the move
        worker.run_once()
        time.sleep(0.1)
    body = get(admin, cluster["id"])
    assert [n["status"] for n in body["nodes"]] == ["RUNNING", "RUNNING"], body["status_reason"]
    login = body["login"]["public_ip"]
    assert sorted(_ssh(tmp_path / "key", login, "srun -N2 --mem=1G hostname")) == ["g-0", "g-1"]
    assert _ssh(tmp_path / "key", login, "hostname") == ["g-jumphost"]
    # One controller: the node's own slurmctld was stopped when the jumphost's started.
    local = driver.cluster(cluster["id"], body["fabric"]["subnet"])
    controllers = {instance: bool(local.node(instance, "0.0.0.0").running("slurmctld"))
                   for instance in local.node_names()}
    assert controllers == {"g-0.1": False, "g-1.1": False, "g-jumphost": True}


def _ssh(key: Path, host: str, command: str) -> list[str]:
    done = run(["ssh", "-i", str(key), "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "-o", "LogLevel=ERROR", f"ubuntu@{host}",
                command], check=False, timeout=60)
    return done.stdout.split()


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_local_driver_pause_stops_the_daemons_and_resume_brings_the_nodes_back(
    admin: TestClient, sessions: sessionmaker[Session], driver: LocalDriver, tmp_path: Path
) -> None:
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "key")])
    key = admin.post("/v1/ssh-keys", json={"name": "k", "public_key": (tmp_path / "key.pub").read_text()})
    worker = EngineWorker(sessions, EngineSettings.model_validate(FAST), driver=driver)
    cluster = create(admin, name="p", node_count=1, orchestrator="slurm", ssh_key_ids=[key.json()["id"]])
    _until(worker, admin, cluster["id"], _converged(1))
    local = driver.cluster(cluster["id"], get(admin, cluster["id"])["fabric"]["subnet"])
    [instance] = local.node_names()

    with sessions.begin() as session:
        pause_cluster(session, cluster["id"], "credits exhausted")
    _until(worker, admin, cluster["id"], lambda body: [n["status"] for n in body["nodes"]] == ["PAUSED"])
    assert driver.wait_idle()
    assert local.node(instance, "0.0.0.0").pids() == []  # powered off: no daemon, the node's files kept

    with sessions.begin() as session:
        resume_cluster(session, cluster["id"], "credits added")
    _until(worker, admin, cluster["id"], _converged(1))
    assert _ssh(tmp_path / "key", get(admin, cluster["id"])["login"]["public_ip"], "srun hostname") == ["p-0"]
