"""`GET .../jobs` (the modelled Slurm workload: job table, counts, partition card; reproducible from the
seed and consistent with the modelled GPU utilisation) and `GET .../logs` (controller and node logs)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable

from fastapi.testclient import TestClient

from backend.api.cluster_workload import _job_out
from backend.provisioning.driver import Job, NodeRun, TelemetryTarget
from backend.provisioning.drivers.simulated.telemetry import busy_gpus, node_telemetry
from backend.provisioning.drivers.simulated.workload import jobs, snapshot
from backend.provisioning.worker import EngineWorker
from tests.backend.engine.conftest import create, drain, get
from tests.backend.engine.test_engine_repair import _bring_up_then_fault, _seed_failing_once
from tests.backend.keys import ed25519_key

NOW = dt.datetime(2026, 11, 26, 12, 7, tzinfo=dt.UTC)
NODES = [NodeRun(f"train-{i}", i, 1, 8, NOW - dt.timedelta(hours=30), None, False) for i in range(4)]


def test_workload_is_reproducible_and_follows_the_gpu_model() -> None:
    first, again = jobs(3, "train", NODES, NOW), jobs(3, "train", NODES, NOW)
    other = jobs(4, "train", NODES, NOW)
    assert first == again and first != other
    states = {j.state for j in first}
    assert {"RUNNING", "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"} <= states  # Slurm's words
    minutes = (NOW + dt.timedelta(minutes=m) for m in range(-60, 60))
    assert any(j.state == "PENDING" for at in minutes for j in jobs(3, "train", NODES, at))  # a queue forms
    assert len({j.job_id for j in first}) == len(first)
    assert [j.job_id for j in first] == sorted((j.job_id for j in first), reverse=True)
    for job in first:  # an array task is its node's own job: the GPUs the model gives the node
        if job.array_task_id is not None and job.nodes == f"train-{job.array_task_id}":
            slot_start = job.submitted_at.replace(minute=job.submitted_at.minute // 15 * 15, second=0)
            assert job.gpus == busy_gpus(3, "train", job.nodes, 1, 8, slot_start)
        assert job.started_at is None or job.started_at >= NOW - dt.timedelta(hours=24, minutes=15)
    running = [j for j in first if j.state == "RUNNING"]
    assert all(j.started_at is not None and j.started_at <= NOW and j.ended_at is None for j in running)
    for job in first:
        if job.state == "TIMEOUT":  # killed at its time limit
            assert job.run_time(NOW) == job.time_limit and job.reason == "TimeLimit"
        if job.state == "CANCELLED":
            assert job.ended_at is not None and job.reason is None


def test_workload_array_jobs_are_one_task_per_node_of_one_array() -> None:
    arrays: dict[int, list[Job]] = {}
    for job in jobs(3, "train", NODES, NOW):
        assert (job.array_job_id is None) == (job.array_task_id is None)
        if job.array_job_id is not None:
            arrays.setdefault(job.array_job_id, []).append(job)
    assert arrays
    for array_id, tasks in arrays.items():
        assert len({j.array_task_id for j in tasks}) == len(tasks)
        assert min(j.job_id for j in tasks) == array_id  # an array's id is its first task's
        assert len({j.name for j in tasks}) == 1 and len({j.user for j in tasks}) == 1
        assert len({j.job_id for j in tasks}) == len(tasks) and all(j.job_id >= array_id for j in tasks)


def test_workload_a_new_node_reads_busy_exactly_with_its_running_jobs() -> None:
    """The GPU readings follow the schedule on a new node: idle until its first job starts (within a
    minute of it coming up, unless in a slot's last minutes), then exactly the GPUs of its jobs."""
    for minutes in range(0, 15 * 8, 7):  # wherever in its slot the node came up
        up = NOW - dt.timedelta(minutes=minutes)
        fresh = [NodeRun("train-0", 0, 1, 8, up, None, False)]
        schedule = snapshot(3, "train", fresh, NOW)
        running = [j for j in schedule.jobs if j.state == "RUNNING"]
        target = TelemetryTarget("train", "train-0", "i-1", 1, "8xH100", 8, None, up)
        reading = node_telemetry(3, None, target, NOW, allocated=schedule.allocated["train-0"])
        busy = [g for g in reading.gpus or [] if g.utilization_pct]
        assert len(busy) == sum(j.gpus for j in running), (minutes, running, busy)
        assert all(j.started_at is not None and j.started_at >= up for j in running)


def test_workload_a_failed_node_requeues_its_job_and_takes_no_new_one() -> None:
    """The engine sets a failed node DOWN in Slurm, which requeues its batch job: pending (BeginTime while
    slurmctld holds it, then Resources) under the same id, on no node; nothing new starts on the node."""
    failed_at = NOW - dt.timedelta(minutes=1)
    up = [NodeRun("train-0", 0, 1, 8, NOW - dt.timedelta(hours=30), None, False)]
    (was_running,) = [j for j in jobs(3, "train", up, failed_at) if j.state == "RUNNING"]
    down = [NodeRun("train-0", 0, 1, 8, NOW - dt.timedelta(hours=30), failed_at, True)]
    found = jobs(3, "train", down, NOW)
    assert not any(j.state == "RUNNING" for j in found)
    (requeued,) = [j for j in found if j.job_id == was_running.job_id]
    assert (requeued.state, requeued.reason, requeued.nodes, requeued.started_at) == (
        "PENDING", "BeginTime", "", None)
    assert all(j.started_at < failed_at for j in found if j.started_at is not None)
    later = jobs(3, "train", down, NOW + dt.timedelta(minutes=5))
    assert [j.reason for j in later if j.job_id == requeued.job_id] == ["Resources"]


def test_workload_a_requeued_job_runs_again_on_the_repaired_node() -> None:
    """The replacement (same name, next attempt) runs the requeued job once it is up, under the same id."""
    failed_at = NOW - dt.timedelta(minutes=1)
    up = [NodeRun("train-0", 0, 1, 8, NOW - dt.timedelta(hours=30), None, False)]
    (was_running,) = [j for j in jobs(3, "train", up, failed_at) if j.state == "RUNNING"]
    same = was_running.job_id
    coming = [NodeRun("train-0", 0, 2, 8, None, None, False, replaced_failure=failed_at)]
    waiting = [(j.state, j.nodes) for j in jobs(3, "train", coming, NOW) if j.job_id == same]
    assert waiting == [("PENDING", "")]
    up_at = NOW + dt.timedelta(minutes=1)
    back = [NodeRun("train-0", 0, 2, 8, up_at, None, False, replaced_failure=failed_at)]
    rerun = [j for j in jobs(3, "train", back, up_at + dt.timedelta(seconds=5)) if j.job_id == same]
    assert [(j.state, j.started_at, j.nodes) for j in rerun] == [("RUNNING", up_at, "train-0")]
    done = [j for j in jobs(3, "train", back, up_at + dt.timedelta(minutes=20)) if j.job_id == same]
    assert [j.state for j in done] == ["COMPLETED"] and done[0].ended_at is not None


def test_jobs_api_lists_the_job_table_counts_and_partition(
    admin: TestClient, member: TestClient, make_worker: Callable[..., EngineWorker]
) -> None:
    cluster = create(admin, node_count=2)
    drain(make_worker())
    response = member.get(f"/v1/clusters/{cluster['id']}/jobs")
    assert response.status_code == 200, response.text
    body = response.json()
    assert list(body["counts"]) == ["running", "pending", "completed", "failed", "cancelled", "timeout"]
    assert len(body["items"]) == sum(body["counts"].values())  # a fresh cluster: its first jobs only
    for job in body["items"]:
        assert job["partition"] == "gpu" and job["nodes"] in ("train-0", "train-1")
        assert 1 <= job["gpus"] <= 8 and job["state"] in ("running", "pending")
        assert set(job) >= {"array_job_id", "array_task_id", "reason"}
    (partition,) = body["partitions"]
    assert (partition["name"], partition["nodes"], partition["gpu_type"], partition["gpus_total"]) == (
        "gpu", 2, "H100 SXM 80GB", 16)
    assert (partition["default_time"], partition["max_time"], partition["state"]) == (
        "01:00:00", "7-00:00:00", "UP")
    running = sum(j["gpus"] for j in body["items"] if j["state"] == "running")
    assert partition["gpus_available"] == 16 - running
    only = admin.get(f"/v1/clusters/{cluster['id']}/jobs", params={"state": "pending"}).json()
    assert {j["state"] for j in only["items"]} <= {"pending"} and only["counts"] == body["counts"]
    assert admin.get(f"/v1/clusters/{cluster['id']}/jobs", params={"state": "done"}).status_code == 422
    assert admin.get(f"/v1/clusters/{cluster['id']}/jobs", params={"state": "RUNNING"}).status_code == 422
    none = admin.get(f"/v1/clusters/{cluster['id']}/jobs", params={"state": "node_fail"}).json()
    assert none["items"] == [] and none["counts"] == body["counts"]


def test_jobs_api_speaks_slurm_states_arrays_and_total_gpus() -> None:
    """Whatever state Slurm says reaches the API lower-cased (never mapped to failed); counts name every
    state a job is in; array tasks carry their ids; `gpus` is the job's total."""
    at = NOW
    base = Job(job_id=1, name="x", user="u", partition="gpu", nodes="train-[0-2]", gpus=12, state="RUNNING",
               submitted_at=at, started_at=at, ended_at=None, time_limit=dt.timedelta(hours=1), priority=1,
               reason=None, node_count=3)
    wire = [_job_out(dataclasses.replace(base, job_id=i, state=state), at) for i, state in enumerate(
        ("NODE_FAIL", "REQUEUED", "OUT_OF_MEMORY", "COMPLETING", "STAGE_OUT", "SOMETHING_NEW"))]
    assert [j.state for j in wire] == [
        "node_fail", "requeued", "out_of_memory", "completing", "stage_out", "something_new"]
    task = _job_out(dataclasses.replace(base, array_job_id=1234, array_task_id=5), at)
    assert (task.array_job_id, task.array_task_id, task.gpus) == (1234, 5, 12)
    holding = [s for s in ("RUNNING", "COMPLETING", "SUSPENDED", "PENDING", "REQUEUED", "COMPLETED")
               if dataclasses.replace(base, state=s).holds_nodes()]
    waiting = [s for s in ("RUNNING", "PENDING", "REQUEUED", "CANCELLED")
               if dataclasses.replace(base, state=s).is_waiting()]
    assert (holding, waiting) == (["RUNNING", "COMPLETING", "SUSPENDED"], ["PENDING", "REQUEUED"])


def test_logs_api_serves_controller_and_node_logs(
    admin: TestClient, make_worker: Callable[..., EngineWorker]
) -> None:
    seed = _seed_failing_once("train-1")
    before, worker = _bring_up_then_fault(admin, make_worker, seed, node_repair="manual")
    drain(worker)
    controller = admin.get(f"/v1/clusters/{before['id']}/logs", params={"source": "controller"})
    assert controller.status_code == 200, controller.text
    lines = controller.json()["lines"]
    assert any("slurmctld version 22.05" in line for line in lines)
    assert any("Nodes train-1 not responding, setting DOWN" in line and "XID" in line for line in lines)
    assert all(line.startswith("[20") for line in lines)
    assert lines == sorted(lines)  # oldest first
    node = admin.get(f"/v1/clusters/{before['id']}/logs", params={"source": "train-1", "tail": 5}).json()
    assert len(node["lines"]) <= 5
    assert any("NVRM: Xid (PCI:00000000:" in line for line in node["lines"])
    assert "health check failed" in node["lines"][-1] or any("Xid" in line for line in node["lines"][-2:])
    missing = admin.get(f"/v1/clusters/{before['id']}/logs", params={"source": "train-7"})
    assert missing.status_code == 404 and missing.json()["field"] == "source"
    assert get(admin, before["id"])["status"] == "RUNNING"


def test_logs_api_node_log_shows_the_keys_cloud_init_installed(
    admin: TestClient, make_worker: Callable[..., EngineWorker]
) -> None:
    # The user's own text (the key's comment) reaches a node's log: the console's escaping is tested
    # against exactly this.
    comment = "<script>alert('log')</script>"
    key = admin.post("/v1/ssh-keys", json={"name": "laptop", "public_key": ed25519_key(comment)}).json()
    cluster = create(admin, ssh_key_ids=[key["id"]])
    drain(make_worker())
    lines = admin.get(f"/v1/clusters/{cluster['id']}/logs", params={"source": "train-0"}).json()["lines"]
    expected = f"cloud-init: ci-info: authorized key for ubuntu: ssh-ed25519 {key['fingerprint']} {comment}"
    (installed,) = [line for line in lines if "ci-info" in line]
    assert installed.endswith(expected)
    assert lines == sorted(lines)


def test_logs_api_follow_streams_the_tail_then_new_lines(
    admin: TestClient, make_worker: Callable[..., EngineWorker]
) -> None:
    cluster = create(admin, node_count=2)
    worker = make_worker(simulation_speed=1000, engine_poll_seconds=5.0)
    drain(worker)
    url = f"/v1/clusters/{cluster['id']}/logs"
    tail = admin.get(url, params={"tail": 3}).json()["lines"]
    events: list[str] = []
    restarted = False
    with admin.stream("GET", url, params={"follow": "true", "tail": 3}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for received, line in enumerate(response.iter_lines()):
            if line.startswith("data: "):
                events.append(line.removeprefix("data: "))
            if len(events) >= 3 and not restarted:
                # Something happens on the cluster while the client follows: a node restarts.
                action = admin.post(f"{url.removesuffix('/logs')}/nodes/train-1/actions",
                                    json={"action": "restart"})
                assert action.status_code == 202, action.text
                worker.run_once()
                restarted = True
            if any("update_node: node train-1 state set to UNKNOWN" in e for e in events):
                break
            assert received < 40, events
    assert events[:3] == tail
    assert events == sorted(events)
