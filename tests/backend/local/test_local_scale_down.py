"""A scale-down under the local driver on real nodes (root, Debian's daemons) lets the job running on the
node it removes finish (issue 28): the node is drained, keeps its job, and is released once the job
completed; the job on the node that stays is untouched. SQLite only (the store is not what is tested)."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from backend.api import cluster_nodes, cluster_workload
from backend.api import clusters as cluster_routes
from backend.provisioning.drivers.local.driver import LocalDriver
from backend.provisioning.drivers.local.namespaces import run
from backend.provisioning.node_config import slurm_jobs
from backend.provisioning.node_config.shell import CommandResult, NodeShell
from backend.provisioning.settings import EngineSettings, use
from backend.provisioning.worker import EngineWorker
from tests.backend.engine.conftest import FAST, create, get, sessions
from tests.backend.local.test_local_driver_nodes import _converged, _ssh, _until, driver

__all__ = ["driver", "sessions"]  # fixtures, used here


def _jobs(admin: TestClient, cluster_id: str) -> dict[int, dict[str, Any]]:
    return {j["job_id"]: j for j in admin.get(f"/v1/clusters/{cluster_id}/jobs").json()["items"]}


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_local_scale_down_lets_the_job_on_the_removed_node_complete(
    admin: TestClient, sessions: sessionmaker[Session], driver: LocalDriver, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for module in (cluster_nodes, cluster_workload, cluster_routes):  # the preview reads jobs too
        monkeypatch.setattr(module, "driver", lambda _request: driver)
    block = secrets.randbelow(16 * 64)  # a block of its own: other local-driver runs may hold 10.0.0.0/22
    monkeypatch.setenv("GPUCLOUD_LOCAL_ADDRESS_RANGE", f"172.{16 + block // 64}.{block % 64 * 4}.0/22")
    use(EngineSettings())
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "key")])
    key = admin.post("/v1/ssh-keys", json={"name": "k", "public_key": (tmp_path / "key.pub").read_text()})
    # The scale-down reads a draining node's jobs every idle_check_seconds: often here.
    worker = EngineWorker(sessions, EngineSettings.model_validate({**FAST, "idle_check_seconds": 1}),
                          driver=driver)
    cluster = create(admin, name="sd", node_count=2, orchestrator="slurm", ssh_key_ids=[key.json()["id"]],
                     scale_down_grace_minutes=10)
    _until(worker, admin, cluster["id"], _converged(2))
    login = get(admin, cluster["id"])["login"]["public_ip"]
    ids = []
    for node, seconds in (("sd-0", 300), ("sd-1", 20)):  # both busy: the newest, sd-1, goes
        command = f"sbatch --gpus=1 -w {node} -J on-{node} --wrap 'sleep {seconds}'"
        said = _ssh(tmp_path / "key", login, command)
        assert said[:3] == ["Submitted", "batch", "job"], said
        ids.append(int(said[3]))
    _until(worker, admin, cluster["id"], lambda _: all(
        _jobs(admin, cluster["id"]).get(i, {}).get("state") == "running" for i in ids))

    preview = admin.get(f"/v1/clusters/{cluster['id']}/scale-down-preview", params={"node_count": 1}).json()
    assert [(n["name"], [j["job_id"] for j in n["running_jobs"]]) for n in preview["nodes"]] == [
        ("sd-1", [ids[1]])]
    assert admin.patch(f"/v1/clusters/{cluster['id']}", json={"node_count": 1}).status_code == 200

    def members(body: dict[str, Any]) -> list[str]:
        return sorted(n["name"] for n in body["nodes"] if n["status"] == "RUNNING")

    # Drained, still serving its job; then released once the job completed (not NODE_FAIL, not requeued).
    _until(worker, admin, cluster["id"], lambda body: members(body) == ["sd-0"], seconds=120)
    jobs = _jobs(admin, cluster["id"])
    assert jobs[ids[1]]["state"] == "completed", jobs[ids[1]]
    assert jobs[ids[0]]["state"] == "running", jobs[ids[0]]

    # Past the grace the engine requeues what still runs (driver operation node_requeue): the commands,
    # on the real controller, put the job on sd-0 back in the queue, once.
    controller = LoginShell(tmp_path / "key", login)
    assert slurm_jobs.requeue_node_jobs(controller, "sd-0") == [str(ids[0])]
    state = _ssh(tmp_path / "key", login, f"squeue -h -j {ids[0]} -o %T")
    assert state == ["PENDING"], state
    assert slurm_jobs.requeue_node_jobs(controller, "sd-0") == []  # nothing holds the node any more
    _ssh(tmp_path / "key", login, f"scancel {ids[0]}")


class LoginShell(NodeShell):
    """The controller as the cluster's user sees it (ssh to the login node): squeue, and scontrol on
    the user's own jobs."""

    def __init__(self, key: Path, host: str) -> None:
        self.name, self.key, self.host = "login", key, host

    def _execute(self, remote_command: str, stdin: bytes | None, timeout: float) -> CommandResult:
        done = run(["ssh", "-i", str(self.key), "-o", "StrictHostKeyChecking=no", "-o",
                    "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR",
                    f"ubuntu@{self.host}", remote_command], check=False, timeout=timeout)
        return CommandResult(done.returncode, done.stdout, done.stderr)
