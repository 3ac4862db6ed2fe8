"""An array's tasks that have not started, as Slurm shows them: one pending record under the array's own
job id with their task list (squeue's `1234_[3-5]`), read from `squeue --json` and `sacct` by the local
driver, given by the simulated driver's job table, and carried by the jobs API as `array_tasks`."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

from backend.api.cluster_workload import _job_out
from backend.node_agent.topology import slurm_range
from backend.provisioning.driver import Job
from backend.provisioning.drivers.local.observe import parse_sacct, parse_squeue_json
from backend.provisioning.drivers.simulated.workload import array_rests

DATA = Path(__file__).parents[1] / "local" / "data"
AT = dt.datetime(2026, 12, 3, 18, 0, tzinfo=dt.UTC)


def _squeue(name: str) -> dict[int, Job]:
    return {job.job_id: job for job in parse_squeue_json((DATA / name).read_text())}


def test_squeue_json_gives_an_arrays_pending_rest_as_one_record_with_its_task_list() -> None:
    """`sbatch --array=1-5 --gres=gpu:8` (array 6) on two 8-GPU nodes, the array's records in Slurm
    22.05.8's `squeue --json`: tasks 1 and 2 run under ids of their own (7, 8), tasks 3-5 wait in the
    array's own record (squeue: `6_[3-5]`)."""
    jobs = _squeue("squeue-array-pending.json")
    rest = jobs[6]
    assert (rest.state, rest.reason, rest.array_job_id, rest.array_task_id, rest.array_tasks, rest.nodes) == (
        "PENDING", "Resources", 6, None, "3-5", "")
    assert rest.started_at is None and rest.gpus == 8
    assert [(j.job_id, j.array_job_id, j.array_task_id, j.array_tasks, j.state, j.gpus)
            for j in (jobs[7], jobs[8])] == [(7, 6, 1, None, "RUNNING", 8), (8, 6, 2, None, "RUNNING", 8)]


def test_squeue_json_keeps_a_running_task_limit_and_gives_the_last_waiting_task_its_id() -> None:
    # `--array=1-4%1` (array 11): squeue shows `11_[2-4%1]`, waiting for JobArrayTaskLimit.
    limited = _squeue("squeue-array-limit.json")
    assert (limited[11].array_tasks, limited[11].array_task_id, limited[11].reason) == (
        "2-4%1", None, "JobArrayTaskLimit")
    assert (limited[12].array_task_id, limited[12].array_tasks) == (1, None)
    # Array 6 once tasks 1 and 2 were cancelled: 3 and 4 run, the one task left is the array's own record,
    # squeue's `6_5`, a task like the others.
    last = _squeue("squeue-array-last-task.json")
    assert [(j.job_id, j.array_task_id, j.array_tasks, j.state) for j in sorted(
        last.values(), key=lambda j: j.array_task_id or 0)] == [
        (9, 3, None, "RUNNING"), (10, 4, None, "RUNNING"), (6, 5, None, "PENDING")]
    # A job outside an array has no task list, whatever the field says.
    document = json.loads((DATA / "squeue-array-pending.json").read_text())
    plain = {**next(j for j in document["jobs"] if j["job_id"] == 6), "job_id": 99, "array_job_id": 0}
    [job] = parse_squeue_json(json.dumps({**document, "jobs": [plain]}))
    assert (job.array_job_id, job.array_task_id, job.array_tasks) == (None, None, None)


def test_sacct_gives_an_arrays_pending_rest_its_task_list() -> None:
    jobs = {job.job_id: job for job in parse_sacct((DATA / "sacct-parsable2.txt").read_text())}
    rest = jobs[1240]  # JobID 1240_[3-9]
    assert (rest.array_job_id, rest.array_task_id, rest.array_tasks, rest.state) == (
        1240, None, "3-9", "PENDING")
    assert all(job.array_tasks is None for job_id, job in jobs.items() if job_id != 1240)
    limited = (DATA / "sacct-parsable2.txt").read_text().replace("1240_[3-9]", "1240_[3-9%2]")
    assert {j.job_id: j for j in parse_sacct(limited)}[1240].array_tasks == "3-9%2"


def _job(job_id: int, task: int | None, state: str = "PENDING") -> Job:
    return Job(job_id=job_id, name="sweep-lr", user="alice", partition="gpu", nodes="", gpus=8, state=state,
               submitted_at=AT, started_at=None, ended_at=None, time_limit=dt.timedelta(hours=1), priority=1,
               reason="Resources", array_job_id=None if task is None else 100, array_task_id=task)


def test_simulated_job_table_folds_an_arrays_unstarted_tasks_into_one_record() -> None:
    started = dataclasses.replace(_job(100, 0, "RUNNING"), nodes="train-0", started_at=AT, reason=None)
    waiting = [_job(101, 1), _job(102, 2), _job(104, 4)]
    requeued = _job(103, 3)  # ran before, pending again: a record of its own in Slurm too
    plain = _job(105, None)
    jobs = array_rests([started, *waiting, requeued, plain], unstarted={101, 102, 104, 105})
    by_id = {job.job_id: job for job in jobs}
    assert sorted(by_id) == [100, 101, 103, 105]
    rest = by_id[101]
    assert (rest.array_job_id, rest.array_task_id, rest.array_tasks, rest.state) == (
        100, None, "1-2,4", "PENDING")
    assert by_id[103].array_task_id == 3 and by_id[103].array_tasks is None
    assert by_id[105] == plain and by_id[100] == started
    alone = array_rests([started, _job(101, 1)], unstarted={101})  # one task left: shown as that task
    assert [(j.array_task_id, j.array_tasks) for j in alone] == [(0, None), (1, None)]


def test_task_ranges_write_a_task_list_as_slurm_does() -> None:
    assert slurm_range([5, 3, 4, 9, 1, 4]) == "1,3-5,9"
    assert slurm_range([7]) == "7" and slurm_range([]) == ""


def test_jobs_api_carries_the_pending_rest_of_an_array() -> None:
    rest = dataclasses.replace(_job(100, None), array_job_id=100, array_tasks="3-5")
    shown = _job_out(rest, AT)
    assert (shown.job_id, shown.array_job_id, shown.array_task_id, shown.array_tasks, shown.state) == (
        100, 100, None, "3-5", "pending")
    assert _job_out(_job(101, 1), AT).array_tasks is None
