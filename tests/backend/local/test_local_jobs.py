"""The jobs API speaks Slurm, on a real 2-node local cluster (root, Debian's Slurm 22.05 daemons): an array
job's tasks carry their array's id, a 2-node `--gres=gpu:4` job counts its GPUs over both nodes, a
cancelled job is CANCELLED (not failed), an array's tasks not started yet are one record with their
task list (`1234_[3-5]`); and accounting's `sacct`, where the cluster keeps it, read the same way. The
store is not what is tested here, so SQLite only."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from backend.provisioning.driver import Job
from backend.provisioning.drivers.local.driver import LocalDriver
from backend.provisioning.drivers.local.namespaces import run
from backend.provisioning.drivers.local.observe import SACCT, parse_sacct
from tests.backend.engine.conftest import sessions
from tests.backend.local.test_local_driver_day2 import _cluster, _poll
from tests.backend.local.test_local_driver_nodes import _ssh, driver

__all__ = ["driver", "sessions"]  # fixtures, used here
GPUS_PER_NODE = 4  # of the 8 each local node declares (Gres=gpu:h100:8)


def _ssh_output(key: Path, host: str, command: str) -> str:
    """What `command` prints as the cluster's user on `host`, as it prints it (lines and spaces kept)."""
    done = run(["ssh", "-i", str(key), "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "-o", "LogLevel=ERROR", f"ubuntu@{host}",
                command], check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _submit(key: Path, login: str, options: str) -> int:
    submitted = _ssh(key, login, f"sbatch --parsable --mem=1G {options}")
    assert len(submitted) == 1 and submitted[0].isdigit(), submitted
    return int(submitted[0])


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_local_jobs_array_tasks_gpu_totals_and_cancelled_jobs_read_as_slurm_says(
    admin: TestClient, sessions: sessionmaker[Session], driver: LocalDriver, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, cluster, login = _cluster(admin, sessions, driver, tmp_path, monkeypatch, "jobs")
    url = f"/v1/clusters/{cluster['id']}/jobs"
    key = tmp_path / "key"
    wide = _submit(key, login, f"-J wide -N2 --gres=gpu:{GPUS_PER_NODE} --wrap 'sleep 60'")
    array = _submit(key, login, "-J sweep --array=0-2 --wrap 'sleep 1'")
    victim = _submit(key, login, "-J victim --wrap 'sleep 300'")
    assert _ssh(key, login, f"scancel {victim}") == []

    def table() -> dict[str, Any]:
        return dict(admin.get(url).json())

    def state(body: dict[str, Any], job_id: int) -> str | None:
        return next((j["state"] for j in body["items"] if j["job_id"] == job_id), None)

    def settled(body: dict[str, Any]) -> bool:
        tasks = [j for j in body["items"] if j["array_job_id"] == array]
        return (state(body, wide) == "running" and state(body, victim) == "cancelled"
                and len(tasks) == 3 and all(j["state"] == "completed" for j in tasks))

    body = _poll(table, settled, seconds=60)
    by_id = {j["job_id"]: j for j in body["items"]}
    running = by_id[wide]  # Slurm's TRES: gres/gpu = 4 per node x 2 nodes
    assert (running["gpus"], running["nodes"], running["array_job_id"], running["array_task_id"]) == (
        2 * GPUS_PER_NODE, "jobs-[0-1]", None, None), running
    tasks = sorted((j for j in body["items"] if j["array_job_id"] == array), key=lambda j: j["array_task_id"])
    assert [j["array_task_id"] for j in tasks] == [0, 1, 2] and {j["name"] for j in tasks} == {"sweep"}
    assert len({j["job_id"] for j in tasks}) == 3 and all(j["gpus"] == 0 and j["ended_at"] for j in tasks)
    cancelled = by_id[victim]
    assert cancelled["state"] == "cancelled" and cancelled["ended_at"], cancelled
    counts = body["counts"]
    assert (counts["cancelled"], counts["running"], counts["failed"]) == (1, 1, 0)
    assert counts["completed"] >= 3
    only = admin.get(url, params={"state": "cancelled"}).json()
    assert [j["job_id"] for j in only["items"]] == [victim] and only["counts"] == body["counts"]

    # Accounting (slurmdbd, where the cluster keeps it) tells the same story through `sacct`, parsed as
    # the driver does when the jobs have left slurmctld's memory.
    accounting = " ".join(_ssh(key, login, "scontrol show config | grep ^AccountingStorageType"))
    if accounting.endswith("accounting_storage/slurmdbd"):
        def accounted() -> dict[int, Job]:
            return {j.job_id: j for j in parse_sacct(_ssh_output(key, login, shlex.join(SACCT)))}

        history = _poll(accounted, lambda jobs: {wide, victim} <= set(jobs) and sum(
            j.array_job_id == array and j.state == "COMPLETED" for j in jobs.values()) == 3, seconds=30)
        assert sorted(j.array_task_id for j in history.values() if j.array_job_id == array) == [0, 1, 2]
        assert (history[wide].state, history[wide].gpus, history[wide].node_count) == (
            "RUNNING", 2 * GPUS_PER_NODE, 2), history[wide]
        assert history[victim].state == "CANCELLED", history[victim]  # sacct: `CANCELLED by <uid>`
    else:
        assert "accounting_storage/none" in accounting, accounting

    _ssh(key, login, f"scancel {wide}")
    ended = _poll(table, lambda b: state(b, wide) in ("completing", "cancelled"))
    assert next(j for j in ended["items"] if j["job_id"] == wide)["gpus"] == 2 * GPUS_PER_NODE

    # An array too big for the cluster (a task takes a node's 8 GPUs): tasks 1 and 2 run, 3-5 wait in one
    # record under the array's own id, as squeue shows `<id>_[3-5]`.
    big = _submit(key, login, "-J big --array=1-5 --gres=gpu:8 --wrap 'sleep 300'")

    def split(body: dict[str, Any]) -> bool:
        mine = [j for j in body["items"] if j["array_job_id"] == big]
        return sorted((j["array_task_id"] or 0, j["state"]) for j in mine) == [
            (0, "pending"), (1, "running"), (2, "running")]

    arrays = [j for j in _poll(table, split, seconds=30)["items"] if j["array_job_id"] == big]
    rest = next(j for j in arrays if j["array_task_id"] is None)
    assert (rest["job_id"], rest["array_tasks"], rest["nodes"]) == (big, "3-5", ""), rest
    assert all(j["array_tasks"] is None and j["gpus"] == 8 for j in arrays if j is not rest), arrays
    assert f"{big}_[3-5]" in _ssh(key, login, f"squeue -h -j {big} -o %i")
    _ssh(key, login, f"scancel {big}")
