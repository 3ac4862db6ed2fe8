"""Day 2 under the local driver on real nodes (root, Debian's daemons): Slurm's own jobs, slurmctld's and
slurmd's logs and the node agent's readings through the API, and a crashed node repaired in place. The
store is not what is tested here, so SQLite only."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from backend import cli
from backend.api import cluster_nodes, cluster_workload
from backend.provisioning.drivers.local.driver import LocalDriver
from backend.provisioning.drivers.local.namespaces import run
from backend.provisioning.node_config import slurm_control
from backend.provisioning.settings import EngineSettings, use
from backend.provisioning.worker import EngineWorker
from backend.store.engine_models import NodeTransition
from tests.backend.engine.conftest import FAST, create, get, sessions
from tests.backend.local.test_local_driver_nodes import _converged, _ssh, _until, driver

__all__ = ["driver", "sessions"]  # fixtures, used here


def _cluster(admin: TestClient, sessions: sessionmaker[Session], driver: LocalDriver, tmp_path: Path,
             monkeypatch: pytest.MonkeyPatch, name: str) -> tuple[EngineWorker, dict[str, Any], str]:
    """A running 2-node Slurm cluster, the API reading through the test's driver; (worker, cluster, login)."""
    for module in (cluster_nodes, cluster_workload):
        monkeypatch.setattr(module, "driver", lambda _request: driver)
    # A block of its own: other runs of the local driver on this machine may hold 10.0.0.0/22.
    block = secrets.randbelow(16 * 64)
    monkeypatch.setenv("GPUCLOUD_LOCAL_ADDRESS_RANGE", f"172.{16 + block // 64}.{block % 64 * 4}.0/22")
    use(EngineSettings())  # in force now; the process_configuration fixture puts the old ones back
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "key")])
    key = admin.post("/v1/ssh-keys", json={"name": "k", "public_key": (tmp_path / "key.pub").read_text()})
    worker = EngineWorker(sessions, EngineSettings.model_validate(FAST), driver=driver)
    cluster = create(admin, name=name, node_count=2, orchestrator="slurm", ssh_key_ids=[key.json()["id"]])
    _until(worker, admin, cluster["id"], _converged(2))
    return worker, cluster, get(admin, cluster["id"])["login"]["public_ip"]


def _poll(read: Callable[[], Any], wanted: Callable[[Any], bool], seconds: float = 20) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        value = read()
        if wanted(value):
            return value
        assert time.monotonic() < deadline, value
        time.sleep(0.3)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_local_driver_jobs_logs_and_readings_come_from_the_real_nodes(
    admin: TestClient, sessions: sessionmaker[Session], driver: LocalDriver, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    worker, cluster, login = _cluster(admin, sessions, driver, tmp_path, monkeypatch, "obs")
    url = f"/v1/clusters/{cluster['id']}"
    submitted = _ssh(tmp_path / "key", login, "sbatch --gpus=1 -J day2-probe --wrap 'sleep 6'")
    assert submitted[:3] == ["Submitted", "batch", "job"], submitted
    job_id = int(submitted[3])

    def job() -> dict[str, Any]:
        body = admin.get(f"{url}/jobs").json()
        return next((j for j in body["items"] if j["job_id"] == job_id), {"state": None, "body": body})

    running = _poll(job, lambda j: j["state"] == "running")
    assert running["name"] == "day2-probe" and running["user"] == "ubuntu" and running["partition"] == "gpu"
    assert running["gpus"] == 1 and running["nodes"] in ("obs-0", "obs-1") and running["started_at"]
    assert running["time_limit_seconds"] == 3600  # the partition's DefaultTime
    body = admin.get(f"{url}/jobs", params={"state": "running"}).json()
    assert body["counts"]["running"] == 1
    [partition] = body["partitions"]  # slurmctld's own view: one of the 16 GPUs is allocated
    assert {k: partition[k] for k in ("name", "nodes", "gpus_total", "gpus_available", "default_time",
                                      "max_time", "state")} == {
        "name": "gpu", "nodes": 2, "gpus_total": 16, "gpus_available": 15, "default_time": "01:00:00",
        "max_time": "7-00:00:00", "state": "UP"}
    states = {n["name"]: n["orchestrator_state"] for n in admin.get(f"{url}/nodes").json()["items"]}
    assert states[running["nodes"]] == "MIXED" and list(states.values()).count("IDLE") == 1, states  # Slurm's
    completed = _poll(job, lambda j: j["state"] == "completed")
    assert completed["ended_at"] and completed["run_time_seconds"] >= 5, completed
    body = admin.get(f"{url}/jobs", params={"state": "completed"}).json()
    assert [j["job_id"] for j in body["items"]] == [job_id] and body["counts"]["running"] == 0

    controller = admin.get(f"{url}/logs", params={"source": "controller", "tail": 500}).json()["lines"]
    assert any(f"_slurm_rpc_submit_batch_job: JobId={job_id} " in line for line in controller), controller
    assert any(f"_job_complete: JobId={job_id} done" in line for line in controller)
    node = admin.get(f"{url}/logs", params={"source": running["nodes"]}).json()["lines"]
    assert any(f"Launching batch job {job_id} " in line for line in node), node
    last_two = admin.get(f"{url}/logs", params={"source": "controller", "tail": 2}).json()["lines"]
    assert last_two == controller[-2:]

    nodes = admin.get(f"{url}/nodes").json()["items"]
    assert [n["name"] for n in nodes] == ["obs-0", "obs-1"]
    for reading in nodes:  # what is real: no GPU numbers on a node without a GPU, said so; its host's memory
        assert reading["gpus"] is None and "nvidia-smi not found" in reading["gpus_unavailable_reason"]
        assert reading["host"]["memory_total_mib"] > 0 and reading["host"]["cpu_count"] >= 1
        assert reading["health"] == "healthy" and reading["xid_events"] == []

    # The metrics sampler asks the same agents: no GPU, so no sample is made up (null, not 0).
    assert worker.collect_metrics() == 2
    metrics = admin.get(f"{url}/metrics", params={"window": "5m"}).json()
    assert {series["node"] for series in metrics["series"]} == {"obs-0", "obs-1"}
    assert all(value is None for series in metrics["series"] for value in series["gpu_utilization_pct"])


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_local_driver_crashed_node_is_replaced_in_place_and_srun_runs_again(
    admin: TestClient, sessions: sessionmaker[Session], driver: LocalDriver, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, database_url: str, capsys: pytest.CaptureFixture[str],
) -> None:
    worker, cluster, login = _cluster(admin, sessions, driver, tmp_path, monkeypatch, "rep")
    url = f"/v1/clusters/{cluster['id']}"
    before = {n["name"]: n["instance_id"] for n in admin.get(f"{url}/nodes").json()["items"]}
    # What an operator types: `gpucloud-backend fault` on this machine's data directory and database.
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "local").symlink_to(driver.root)
    monkeypatch.setenv("GPUCLOUD_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("GPUCLOUD_DATABASE_URL", database_url)
    assert cli.main(["fault", "--cluster", cluster["id"], "--node", "rep-1", "crash"]) == 0
    assert "crash on rep-1: slurmd killed (1 process(es))" in capsys.readouterr().out

    def repaired(body: dict[str, Any]) -> bool:
        assert body["status"] == "RUNNING", body["status_reason"]  # the cluster never leaves RUNNING
        replaced = admin.get(f"{url}/nodes").json()["items"][1]["instance_id"] != before["rep-1"]
        return bool(_converged(2)(body)) and replaced

    _until(worker, admin, cluster["id"], repaired)
    with sessions() as session:
        transitions = select(NodeTransition).where(NodeTransition.cluster_id == cluster["id"])
        history = [(t.node_name, t.to_status, t.reason)
                   for t in session.scalars(transitions.order_by(NodeTransition.id))]
    assert ("rep-1", "FAILED", "hardware fault: slurmd is not running (node crashed)") in history, history
    # The other node never left RUNNING once up.
    assert [status for name, status, _ in history if name == "rep-0"][-1:] == ["RUNNING"]
    assert [status for name, status, _ in history if name == "rep-0"].count("RUNNING") == 1
    after = {n["name"]: n["instance_id"] for n in admin.get(f"{url}/nodes").json()["items"]}
    assert after["rep-0"] == before["rep-0"] and after["rep-1"] != before["rep-1"]
    assert sorted(_ssh(tmp_path / "key", login, "srun -N2 --mem=1G hostname")) == ["rep-0", "rep-1"]
    local = driver.cluster(cluster["id"], get(admin, cluster["id"])["fabric"]["subnet"])
    assert local.node_names() == ["rep-0.1", "rep-1.2", "rep-jumphost"]  # the failed machine is gone
    # The repair drained rep-1 in slurmctld before its machine went (the new one resumed it on joining).
    controller = admin.get(f"{url}/logs", params={"source": "controller", "tail": 2000}).json()["lines"]
    assert any("rep-1" in line and f"{slurm_control.REPAIR_REASON}: replaced after a fault" in line
               for line in controller), controller[-40:]

    # Node actions drain / resume reach Slurm: `scontrol update` on the controller, read back.
    def orchestrator_state(name: str) -> str:
        items = admin.get(f"{url}/nodes").json()["items"]
        return str(next(n["orchestrator_state"] for n in items if n["name"] == name))

    def carried(name: str, state: str) -> Callable[[dict[str, Any]], bool]:
        return lambda _: orchestrator_state(name) == state

    assert admin.post(f"{url}/nodes/rep-0/actions", json={"action": "drain"}).status_code == 202
    _until(worker, admin, cluster["id"], carried("rep-0", "DRAIN"), seconds=30)
    shown = " ".join(_ssh(tmp_path / "key", login, "scontrol show node rep-0 -o"))
    assert f"Reason={slurm_control.ACTION_REASON}" in shown and "DRAIN" in shown, shown
    assert admin.post(f"{url}/nodes/rep-0/actions", json={"action": "resume"}).status_code == 202
    _until(worker, admin, cluster["id"], carried("rep-0", "IDLE"), seconds=30)
