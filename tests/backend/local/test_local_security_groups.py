"""Security groups enforced on real nodes (nftables in each node's namespace) under the local driver: a
group without SSH from this machine makes ssh to the login node time out, adding the rule in place lets
it in again, and the cluster's nodes reach each other whatever the rules say (srun across them)."""

from __future__ import annotations

import ipaddress
import subprocess
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from backend.provisioning.drivers.local.driver import LocalDriver
from backend.provisioning.worker import EngineWorker
from tests.backend.engine.conftest import sessions
from tests.backend.local.test_local_driver_day2 import _cluster
from tests.backend.local.test_local_driver_nodes import _ssh, driver

__all__ = ["driver", "sessions"]  # fixtures, used here


def _ssh_result(key: Path, host: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ssh", "-i", str(key), "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
         "-o", "BatchMode=yes", "-o", "ConnectTimeout=2", "-o", "LogLevel=ERROR", f"ubuntu@{host}", "true"],
        capture_output=True, text=True, timeout=30, check=False,
    )


def _until_ssh(worker: EngineWorker, key: Path, host: str, *, answers: bool) -> str:
    """Run the engine until ssh to `host` answers (or times out); the last ssh's stderr."""
    deadline = time.monotonic() + 90
    while True:
        for _ in range(20):
            worker.run_once()
        done = _ssh_result(key, host)
        if (done.returncode == 0) == answers:
            return done.stderr
        assert time.monotonic() < deadline, done.stderr
        time.sleep(0.2)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_local_security_group_blocks_ssh_until_a_rule_allows_it_nodes_still_talk(
    admin: TestClient, sessions: sessionmaker[Session], driver: LocalDriver, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    worker, cluster, login = _cluster(admin, sessions, driver, tmp_path, monkeypatch, "fw")
    key = tmp_path / "key"
    assert _ssh_result(key, login).returncode == 0  # the default group: SSH from anywhere
    ping = {"protocol": "icmp", "cidr_blocks": ["0.0.0.0/0"]}
    group = admin.post("/v1/security-groups", json={"name": "closed", "ingress": [ping]})
    assert group.status_code == 201, group.text
    group_id = group.json()["id"]
    attached = admin.patch(f"/v1/clusters/{cluster['id']}", json={"security_group_ids": [group_id]})
    assert attached.status_code == 200, attached.text
    stderr = _until_ssh(worker, key, login, answers=False)
    assert "timed out" in stderr, stderr

    host = ipaddress.ip_interface(f"{login}/22").network.network_address + 1  # this machine on the bridge
    ssh_in = {"protocol": "tcp", "from_port": 22, "cidr_blocks": [f"{host}/32"]}
    opened = admin.patch(f"/v1/security-groups/{group_id}", json={"ingress": [ping, ssh_in]})
    assert opened.status_code == 200, opened.text
    _until_ssh(worker, key, login, answers=True)
    # Inside the cluster nothing was cut: the jumphost reaches the workers (Slurm) and they run a step.
    assert sorted(_ssh(key, login, "srun -N2 hostname")) == ["fw-0", "fw-1"]
    workers = [node["private_ip"] for node in admin.get(f"/v1/clusters/{cluster['id']}").json()["nodes"]]
    # A port no rule names (slurmd's), opened from the jumphost to a worker.
    probe = f"timeout 3 bash -c '</dev/tcp/{workers[1]}/6818' && echo reached"
    assert _ssh(key, login, probe) == ["reached"]
