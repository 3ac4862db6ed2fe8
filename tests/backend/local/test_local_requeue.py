"""Repair takes the jobs with it (issue 28), on real Slurm daemons (root, Debian's daemons): a node whose
slurmd is killed (`kill -9`, the `crash` fault) is set DOWN in slurmctld as soon as the health watch finds
it, so its batch jobs are requeued at once instead of staying RUNNING on a dead machine, and they run
again on the node's replacement; a restart (node action) requeues the jobs of the node first, and keeps
an operator's drain; a credit pause, which powers the nodes off, requeues their jobs before, and they run
again after the resume. SQLite only (the store is not what is tested here)."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from backend.api import cluster_nodes, cluster_workload
from backend.provisioning.drivers.local.driver import LocalDriver
from backend.provisioning.drivers.local.faults import inject_fault
from backend.provisioning.drivers.local.namespaces import run
from backend.provisioning.engine import pause_cluster, resume_cluster
from backend.provisioning.node_config import slurm_control
from backend.provisioning.settings import EngineSettings, use
from backend.provisioning.worker import EngineWorker
from tests.backend.engine.conftest import FAST, create, get, sessions
from tests.backend.local.test_local_driver_nodes import _converged, _ssh, _until, driver

__all__ = ["driver", "sessions"]  # fixtures, used here

# First run: a marker, then a long sleep (the job is "running" when the node dies). Second run: done.
SINGLE = ("if [ -e $HOME/single.ran ]; then hostname > $HOME/single.done; "
          "else touch $HOME/single.ran; sleep 600; fi")
PAIR = ("if [ -e $HOME/pair.ran ]; then srun hostname | sort > $HOME/pair.done; "
        "else touch $HOME/pair.ran; srun sleep 600; fi")
THIRD = ("if [ -e $HOME/third.ran ]; then hostname > $HOME/third.done; "
         "else touch $HOME/third.ran; sleep 600; fi")
PAUSED = ("if [ -e $HOME/paused.ran ]; then hostname > $HOME/paused.done; "
          "else touch $HOME/paused.ran; sleep 600; fi")


def _cluster(admin: TestClient, sessions: sessionmaker[Session], driver: LocalDriver, tmp_path: Path,
             monkeypatch: pytest.MonkeyPatch, name: str) -> tuple[EngineWorker, dict[str, Any], str]:
    """A running 2-node Slurm cluster (node_repair = auto), the API reading through the test's driver;
    (worker, cluster, login). As tests/backend/local/test_local_driver_day2.py builds it, with room for a
    loaded machine."""
    for module in (cluster_nodes, cluster_workload):
        monkeypatch.setattr(module, "driver", lambda _request: driver)
    # A block of its own: other runs of the local driver on this machine may hold 10.0.0.0/22.
    block = secrets.randbelow(16 * 64)
    monkeypatch.setenv("GPUCLOUD_LOCAL_ADDRESS_RANGE", f"172.{16 + block // 64}.{block % 64 * 4}.0/22")
    use(EngineSettings())  # in force now; the process_configuration fixture puts the old ones back
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "key")])
    key = admin.post("/v1/ssh-keys", json={"name": "k", "public_key": (tmp_path / "key.pub").read_text()})
    worker = EngineWorker(sessions, EngineSettings.model_validate(FAST), driver=driver)
    cluster = create(admin, name=name, node_count=2, orchestrator="slurm", node_repair="auto",
                     ssh_key_ids=[key.json()["id"]])
    _until(worker, admin, cluster["id"], _converged(2), seconds=240)
    return worker, cluster, get(admin, cluster["id"])["login"]["public_ip"]


def _job(key: Path, login: str, job_id: int) -> dict[str, str]:
    """`scontrol show job` as the cluster's user, as fields (JobState, Restarts, NodeList, BatchHost...)."""
    words = _ssh(key, login, f"scontrol show job {job_id} -o")
    return dict(word.split("=", 1) for word in words if "=" in word)


def _wait(worker: EngineWorker, read: Callable[[], Any], wanted: Callable[[Any], bool], seconds: float
          ) -> Any:
    """Poll `read` until `wanted`, the engine worker running meanwhile (health watch, repair)."""
    deadline = time.monotonic() + seconds
    while True:
        value = read()
        if wanted(value):
            return value
        assert time.monotonic() < deadline, value
        worker.run_once()
        time.sleep(0.3)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_local_crashed_node_requeues_its_jobs_which_finish_on_the_repaired_node(
    admin: TestClient, sessions: sessionmaker[Session], driver: LocalDriver, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    worker, cluster, login = _cluster(admin, sessions, driver, tmp_path, monkeypatch, "rq")
    assert cluster["node_repair"] == "auto"
    key, url = tmp_path / "key", f"/v1/clusters/{cluster['id']}"
    before = {n["name"]: n["instance_id"] for n in admin.get(f"{url}/nodes").json()["items"]}
    # A job whose batch host is rq-1, and a 2-node job (batch host rq-0) with a step on rq-1 as well.
    single = _ssh(key, login, f"sbatch --requeue -N1 -w rq-1 --mem=100M -J single --wrap '{SINGLE}'")
    pair = _ssh(key, login, f"sbatch --requeue -N2 --ntasks-per-node=1 -w rq-0,rq-1 --mem=100M -J pair "
                            f"--wrap '{PAIR}'")
    assert single[:3] == ["Submitted", "batch", "job"] and pair[:3] == single[:3], (single, pair)
    jobs = {"single": int(single[3]), "pair": int(pair[3])}
    started = _wait(worker, lambda: _ssh(key, login, "ls"),
                    lambda names: {"single.ran", "pair.ran"} <= set(names), 60)
    assert "single.done" not in started
    for job_id in jobs.values():
        shown = _job(key, login, job_id)
        assert shown["JobState"] == "RUNNING" and shown["Restarts"] == "0", shown
    assert _job(key, login, jobs["single"])["BatchHost"] == "rq-1"
    assert _job(key, login, jobs["pair"])["BatchHost"] == "rq-0"

    # slurmd on rq-1 dies (SIGKILL): the job scripts are not told anything by Slurm itself for minutes.
    with sessions() as session:
        said = inject_fault(session, driver, cluster["id"], "rq-1", "crash")
    assert "slurmd killed (1 process(es))" in said, said
    crashed = time.monotonic()

    # The engine's health watch finds it within seconds and sets rq-1 DOWN: both jobs are requeued.
    def states() -> dict[str, dict[str, str]]:
        return {name: _job(key, login, job_id) for name, job_id in jobs.items()}

    requeued = _wait(worker, states, lambda s: all(j.get("Restarts") == "1" and j.get("JobState") != "RUNNING"
                                                   for j in s.values()), 60)
    assert time.monotonic() - crashed < 30, "requeued only after slurmctld's own SlurmdTimeout"
    assert all(j["JobState"] in ("PENDING", "REQUEUED", "COMPLETING", "CONFIGURING")
               for j in requeued.values()), requeued
    # The API reads Slurm: the job is not running any more there either.
    api = {j["job_id"]: j["state"] for j in admin.get(f"{url}/jobs").json()["items"]}
    assert api.get(jobs["single"]) != "running" and api.get(jobs["pair"]) != "running", api
    controller = admin.get(f"{url}/logs", params={"source": "controller", "tail": 2000}).json()["lines"]
    assert any("rq-1" in line and f"{slurm_control.REPAIR_REASON}: slurmd is not running" in line
               for line in controller), controller[-40:]

    # The node is replaced in place, resumed in Slurm, and the requeued jobs run again and complete
    # (a requeued job waits out Slurm's job credential lifetime first: AuthInfo=cred_expire, 30 s here).
    _wait(worker, lambda: get(admin, cluster["id"]), _converged(2), 180)
    after = {n["name"]: n["instance_id"] for n in admin.get(f"{url}/nodes").json()["items"]}
    assert after["rq-0"] == before["rq-0"] and after["rq-1"] != before["rq-1"]
    # The repaired node's history says what happened: the fault the health watch found, then the repair.
    history = [e["kind"] for e in admin.get(f"{url}/nodes/rq-1/events").json()["items"]]
    assert history[:3] == ["repair_finished", "repair_started", "slurmd_down"], history
    done = _wait(worker, lambda: _ssh(key, login, "cat single.done pair.done 2>/dev/null"),
                 lambda words: len(words) == 3, 300)
    assert done == ["rq-1", "rq-0", "rq-1"], done  # single ran on the repaired rq-1, pair on both
    finished = _wait(worker, states, lambda s: all(j.get("JobState") == "COMPLETED" for j in s.values()), 60)
    assert all(j["Restarts"] == "1" for j in finished.values()), finished
    node = " ".join(_ssh(key, login, "scontrol show node rq-1 -o"))
    assert "State=IDLE " in node and slurm_control.REPAIR_REASON not in node, node  # resumed, not drained

    # A restart (node action) of a node an operator drained through the API, a job still running on it:
    # the job is requeued before the machine goes down, the operator's drain outlives the restart.
    third = _ssh(key, login, f"sbatch --requeue -N1 -w rq-0 --mem=100M -J third --wrap '{THIRD}'")
    jobs = {"third": int(third[3])}
    _wait(worker, lambda: _ssh(key, login, "ls"), lambda names: "third.ran" in names, 60)
    assert admin.post(f"{url}/nodes/rq-0/actions", json={"action": "drain"}).status_code == 202
    _wait(worker, lambda: _ssh(key, login, "scontrol show node rq-0 -o"),
          lambda words: f"Reason={slurm_control.ACTION_REASON}" in " ".join(words), 30)
    assert _job(key, login, jobs["third"])["JobState"] == "RUNNING"  # a drain lets it finish
    assert admin.post(f"{url}/nodes/rq-0/actions", json={"action": "restart"}).status_code == 202
    restarted = _wait(worker, states, lambda s: s["third"].get("Restarts") == "1"
                      and s["third"].get("JobState") != "RUNNING", 60)
    _wait(worker, lambda: get(admin, cluster["id"]), _converged(2), 180)
    node = " ".join(_ssh(key, login, "scontrol show node rq-0 -o"))
    assert "State=IDLE+DRAIN " in node and f"Reason={slurm_control.ACTION_REASON}" in node, node
    assert next(n for n in admin.get(f"{url}/nodes").json()["items"] if n["name"] == "rq-0")["drained"]
    assert _job(key, login, jobs["third"])["JobState"] == "PENDING", restarted  # waits for a node


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_local_pause_requeues_the_jobs_of_the_nodes_it_powers_off_and_they_run_after_the_resume(
    admin: TestClient, sessions: sessionmaker[Session], driver: LocalDriver, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    worker, cluster, login = _cluster(admin, sessions, driver, tmp_path, monkeypatch, "pz")
    key, url = tmp_path / "key", f"/v1/clusters/{cluster['id']}"
    # A batch job on a worker node, requeueable by Slurm's default (JobRequeue=1: no --requeue).
    submitted = _ssh(key, login, f"sbatch -N1 -w pz-1 --mem=100M -J paused --wrap '{PAUSED}'")
    assert submitted[:3] == ["Submitted", "batch", "job"], submitted
    job_id = int(submitted[3])
    _wait(worker, lambda: _ssh(key, login, "ls"), lambda names: "paused.ran" in names, 60)
    assert _job(key, login, job_id)["JobState"] == "RUNNING"

    # Credits run out: the nodes are powered off (the jumphost, slurmctld's, keeps running). Slurm is told
    # before pz-1's machine stops: the job is requeued, not left RUNNING on a machine that is off.
    with sessions.begin() as session:
        pause_cluster(session, cluster["id"], "credits exhausted")
    _wait(worker, lambda: [n["status"] for n in get(admin, cluster["id"])["nodes"]],
          lambda statuses: statuses == ["PAUSED", "PAUSED"], 60)
    assert driver.wait_idle()
    requeued = _job(key, login, job_id)
    assert requeued["Restarts"] == "1" and requeued["JobState"] in ("PENDING", "REQUEUED"), requeued
    node = " ".join(_ssh(key, login, "scontrol show node pz-1 -o"))
    assert "State=DOWN+DRAIN" in node, node  # down while its machine is off, not idle
    assert f"Reason={slurm_control.REPAIR_REASON}: powered off (credits exhausted)" in node, node
    api = {j["job_id"]: j["state"] for j in admin.get(f"{url}/jobs").json()["items"]}
    assert api[job_id] in ("pending", "requeued"), api

    # Resumed: the nodes boot again, Slurm resumes them as they join, the job runs again and completes.
    with sessions.begin() as session:
        resume_cluster(session, cluster["id"], "credits added")
    _wait(worker, lambda: get(admin, cluster["id"]), _converged(2), 180)
    done = _wait(worker, lambda: _ssh(key, login, "cat paused.done 2>/dev/null"),
                 lambda words: len(words) == 1, 120)
    assert done[0] in ("pz-0", "pz-1"), done
    finished = _wait(worker, lambda: _job(key, login, job_id), lambda j: j.get("JobState") == "COMPLETED", 60)
    assert finished["Restarts"] == "1", finished
    for name in ("pz-0", "pz-1"):
        node = " ".join(_ssh(key, login, f"scontrol show node {name} -o"))
        assert "State=IDLE " in node and slurm_control.REPAIR_REASON not in node, node
