"""The local driver's readers of Slurm 22.05's output, on lines captured from its real daemons (the real
nodes' end-to-end path: test_local_driver_day2.py)."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path
from typing import Any

import pytest

from backend.provisioning.drivers.local.observe import (
    SACCT_FORMAT,
    merge_jobs,
    merge_kernel_lines,
    parse_jobcomp_lines,
    parse_partitions,
    parse_sacct,
    parse_squeue_json,
    read_jobs,
    slurm_node_states,
    tail,
)
from backend.provisioning.node_config.shell import CommandResult, NodeShell
from tests.backend.node_config.test_node_shell import LocalShell

# `squeue --json` of Slurm 22.05.8 (openapi v0.0.38), the fields we read of one running job.
SQUEUE: dict[str, Any] = {"meta": {"plugin": {"type": "openapi/v0.0.38"}}, "errors": [], "jobs": [{
    "job_id": 7, "name": "day2-probe", "user_name": "ubuntu", "partition": "gpu", "nodes": "obs-0",
    "job_state": "RUNNING", "submit_time": 1795676891, "start_time": 1795676893, "end_time": 1795680493,
    "time_limit": 60, "priority": 4294901759, "state_reason": "None", "tres_per_job": "gres:gpu:1",
    "tres_per_node": "", "tres_alloc_str": "cpu=26,mem=218880M,node=1,billing=26",
}, {
    "job_id": 8, "name": "wide", "user_name": "ubuntu", "partition": "gpu", "nodes": "",
    "job_state": "PENDING", "submit_time": 1795676899, "start_time": 0, "end_time": 0,
    "time_limit": 240, "priority": 4294901758, "state_reason": "Resources", "tres_per_job": "",
    "tres_per_node": "gres:gpu:8", "tres_alloc_str": "", "node_count": 2,
}]}
JOBCOMP = ("JobId=7 UserId=ubuntu(1001) GroupId=ubuntu(1001) Name=day2-probe JobState=COMPLETED "
           "Partition=gpu TimeLimit=60 StartTime=2026-11-26T07:08:13 EndTime=2026-11-26T07:08:16 "
           "NodeList=obs-0 NodeCnt=1 ProcCnt=26 WorkDir=/home/ubuntu ReservationName= "
           "Tres=cpu=1,mem=1710G,node=1,billing=1 Account= "
           "QOS= WcKey= Cluster=unknown SubmitTime=2026-11-26T07:08:11 EligibleTime=2026-11-26T07:08:11 "
           "DerivedExitCode=0:0 ExitCode=0:0 ")


def test_squeue_json_gives_running_and_pending_jobs_with_their_gpus() -> None:
    running, pending = parse_squeue_json(json.dumps(SQUEUE))
    assert (running.job_id, running.name, running.user, running.nodes, running.gpus, running.state) == (
        7, "day2-probe", "ubuntu", "obs-0", 1, "RUNNING")
    assert running.started_at == dt.datetime.fromtimestamp(1795676893, dt.UTC) and running.ended_at is None
    assert running.time_limit == dt.timedelta(hours=1) and running.reason is None
    assert (pending.state, pending.gpus, pending.started_at) == ("PENDING", 16, None)  # gpu:8 x 2 nodes
    assert pending.reason == "Resources" and (pending.node_count, running.node_count) == (2, 1)


# Slurm 22.05 records of the same jobs in other shapes: an array's tasks (`--array=0-2`: the last task
# keeps the array's id, the others get ids of their own), a 2-node `--gres=gpu:4` job (tres_per_node, and
# gres/gpu=8 in tres_alloc_str where AccountingStorageTRES counts it), a requeued job pending again.
SQUEUE_MORE = {"meta": {"plugin": {"type": "openapi/v0.0.38"}}, "errors": [], "jobs": [
    {"job_id": 21, "array_job_id": 20, "array_task_id": 0, "array_task_string": "", "name": "sweep",
     "user_name": "ubuntu", "partition": "gpu", "nodes": "obs-0", "job_state": "COMPLETED",
     "submit_time": 1795676891, "start_time": 1795676892, "end_time": 1795676893, "time_limit": 60,
     "priority": 1, "state_reason": "None", "tres_per_job": "", "tres_per_node": "", "node_count": 1,
     "tres_alloc_str": "cpu=1,mem=1G,node=1,billing=1"},
    {"job_id": 20, "array_job_id": 20, "array_task_id": None, "array_task_string": "1-2", "name": "sweep",
     "user_name": "ubuntu", "partition": "gpu", "nodes": "", "job_state": "PENDING",
     "submit_time": 1795676891, "start_time": 1795680000, "end_time": 1795683600, "time_limit": 60,
     "priority": 1, "state_reason": "Resources", "tres_per_job": "", "tres_per_node": "", "node_count": 1,
     "tres_alloc_str": ""},
    {"job_id": 22, "array_job_id": 0, "array_task_id": 4294967294, "name": "wide", "user_name": "ubuntu",
     "partition": "gpu", "nodes": "obs-[0-1]", "job_state": "RUNNING", "submit_time": 1795676891,
     "start_time": 1795676895, "end_time": 1795680495, "time_limit": 60, "priority": 1,
     "state_reason": "None", "tres_per_job": "", "tres_per_node": "gres:gpu:4", "node_count": 2,
     "tres_alloc_str": "cpu=2,mem=2G,node=2,billing=2"},
    {"job_id": 23, "array_job_id": 0, "name": "tp", "user_name": "ubuntu", "partition": "gpu",
     "nodes": "obs-[0-2]", "job_state": "COMPLETING", "submit_time": 1795676891, "start_time": 1795676895,
     "end_time": 1795676990, "time_limit": 60, "priority": 1, "state_reason": "None",
     "tres_per_node": "gres:gpu:h100:4", "node_count": 3,
     "tres_alloc_str": "cpu=3,mem=3G,node=3,billing=3,gres/gpu=12,gres/gpu:h100=12"},
    {"job_id": 24, "array_job_id": 0, "name": "requeued", "user_name": "ubuntu", "partition": "gpu",
     "nodes": "", "job_state": "PENDING", "submit_time": 1795676891, "start_time": 1795690000,
     "end_time": 1795693600, "time_limit": 60, "priority": 1, "state_reason": "BeginTime",
     "tres_per_job": "gres:gpu:2", "node_count": 1, "tres_alloc_str": ""},
]}


def test_squeue_json_speaks_slurm_states_array_ids_and_total_gpus() -> None:
    task, rest, wide, completing, requeued = parse_squeue_json(json.dumps(SQUEUE_MORE))
    assert (task.job_id, task.array_job_id, task.array_task_id, task.state) == (21, 20, 0, "COMPLETED")
    assert task.ended_at == dt.datetime.fromtimestamp(1795676893, dt.UTC) and task.gpus == 0
    assert (rest.job_id, rest.array_job_id, rest.array_task_id, rest.state, rest.reason) == (
        20, 20, None, "PENDING", "Resources")
    assert rest.started_at is None and rest.ended_at is None  # squeue's start_time of a pending job: a guess
    assert (wide.gpus, wide.node_count, wide.array_job_id, wide.array_task_id) == (8, 2, None, None)
    assert wide.ended_at is None and wide.reason is None
    assert (completing.state, completing.gpus, completing.ended_at) == (
        "COMPLETING", 12, dt.datetime.fromtimestamp(1795676990, dt.UTC))
    assert (requeued.state, requeued.gpus, requeued.reason) == ("PENDING", 2, "BeginTime")


def test_jobcomp_line_gives_a_finished_job_and_the_queue_wins_the_merge() -> None:
    [finished] = parse_jobcomp_lines([JOBCOMP, "", "not a jobcomp line"])
    assert (finished.job_id, finished.name, finished.user, finished.state, finished.nodes) == (
        7, "day2-probe", "ubuntu", "COMPLETED", "obs-0")
    assert finished.run_time(dt.datetime.now(dt.UTC)) == dt.timedelta(seconds=3)
    assert finished.gpus == 0  # filetxt's Tres has no gres/gpu without AccountingStorageTRES
    assert (finished.reason, finished.array_job_id, finished.array_task_id) == (None, None, None)
    queue = parse_squeue_json(json.dumps(SQUEUE))
    merged = merge_jobs(queue, [finished])
    assert [(j.job_id, j.state, j.gpus) for j in merged] == [(8, "PENDING", 16), (7, "RUNNING", 1)]
    assert merge_jobs(queue[1:], [finished])[1] == finished  # gone from the queue: the jobcomp line
    failed = parse_jobcomp_lines([JOBCOMP.replace("JobState=COMPLETED", "JobState=NODE_FAIL")
                                  .replace("ExitCode=0:0 ", "ExitCode=0:9 ")])
    assert (failed[0].state, failed[0].reason) == ("NODE_FAIL", "NodeDown")
    for raw, reason in (("CANCELLED", None), ("TIMEOUT", "TimeLimit"), ("OUT_OF_MEMORY", "OutOfMemory"),
                        ("FAILED", "NonZeroExitCode"), ("PREEMPTED", None), ("DEADLINE", None)):
        [job] = parse_jobcomp_lines([JOBCOMP.replace("JobState=COMPLETED", f"JobState={raw}")])
        assert (job.state, job.reason) == (raw, reason)
    task = JOBCOMP.replace("JobId=7 ", "JobId=31 ").replace(
        "EligibleTime=2026-11-26T07:08:11 ", "EligibleTime=2026-11-26T07:08:11 ArrayJobId=30 ArrayTaskId=2 ")
    wide = JOBCOMP.replace("Tres=cpu=1,mem=1710G,node=1,billing=1", "Tres=cpu=2,mem=2G,node=2,billing=2,"
                           "gres/gpu=8").replace("NodeCnt=1", "NodeCnt=2")
    [array_task, two_nodes] = parse_jobcomp_lines([task, wide])
    assert (array_task.job_id, array_task.array_job_id, array_task.array_task_id) == (31, 30, 2)
    assert (two_nodes.gpus, two_nodes.node_count) == (8, 2)


# `sacct --parsable2 --noheader --allusers -X --format=SACCT_FORMAT` of Slurm 22.05 (accounting in
# slurmdbd, AccountingStorageTRES=gres/gpu), written after its documented output: `|`-separated, JobID
# `1234_5` an array task (JobIDRaw its own id; the last task keeps the array's), `1234_[3-9]` the tasks
# not started, `CANCELLED by <uid>`, `None assigned` nodes, `Unknown` times, TimelimitRaw in minutes.
SACCT = (Path(__file__).parent / "data" / "sacct-parsable2.txt").read_text()


def test_sacct_gives_slurms_states_array_ids_total_gpus_and_reasons(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "UTC")  # sacct prints the host's local time
    time.tzset()
    try:
        jobs = {job.job_id: job for job in parse_sacct(SACCT + "\nnot|a|sacct|line\n")}
    finally:
        monkeypatch.undo()
        time.tzset()
    assert len(SACCT_FORMAT.split(",")) == 17 and sorted(jobs) == list(range(1234, 1244))
    tasks = [jobs[i] for i in (1235, 1236, 1234)]
    assert [(j.array_job_id, j.array_task_id, j.state) for j in tasks] == [
        (1234, 0, "COMPLETED"), (1234, 1, "FAILED"), (1234, 2, "COMPLETED")]
    assert (jobs[1236].reason, jobs[1234].reason, jobs[1234].name, jobs[1234].nodes) == (
        "NonZeroExitCode", None, "sweep", "obs-1")
    rest = jobs[1240]
    assert (rest.array_job_id, rest.array_task_id, rest.state, rest.reason) == (
        1240, None, "PENDING", "JobArrayTaskLimit")
    cancelled = jobs[1237]
    assert (cancelled.state, cancelled.user, cancelled.array_job_id) == ("CANCELLED", "ubuntu", None)
    assert cancelled.run_time(dt.datetime.now(dt.UTC)) == dt.timedelta(seconds=29)
    wide = jobs[1238]
    assert (wide.state, wide.gpus, wide.node_count, wide.nodes, wide.reason, wide.user) == (
        "NODE_FAIL", 12, 3, "obs-[0-2]", "NodeDown", "alice")
    assert wide.started_at == dt.datetime(2026, 11, 26, 7, 10, 2, tzinfo=dt.UTC)
    assert wide.time_limit == dt.timedelta(days=1) and wide.priority == 4294901755
    pending = jobs[1239]
    assert (pending.state, pending.gpus, pending.nodes, pending.node_count) == ("PENDING", 16, "", 2)
    assert (pending.started_at, pending.ended_at, pending.time_limit) == (None, None, dt.timedelta(0))
    assert pending.submitted_at == dt.datetime(2026, 11, 26, 7, 11, tzinfo=dt.UTC)
    assert (jobs[1241].state, jobs[1241].gpus, jobs[1241].reason) == ("TIMEOUT", 8, "TimeLimit")
    running = jobs[1242]
    assert (running.state, running.gpus, running.ended_at, running.reason) == ("RUNNING", 16, None, None)
    assert (jobs[1243].state, jobs[1243].reason) == ("OUT_OF_MEMORY", "OutOfMemory")


class ScriptedController(NodeShell):
    """A controller whose squeue, sacct and jobcomp file answer as scripted."""

    def __init__(self, answers: dict[str, CommandResult]) -> None:
        self.name = "obs-controller"
        self.answers = answers

    def _execute(self, remote_command: str, stdin: bytes | None, timeout: float) -> CommandResult:
        return self.answers[remote_command.split()[0]]


def test_read_jobs_asks_accounting_and_falls_back_to_the_jobcomp_file_when_it_is_disabled() -> None:
    requeued = {**SQUEUE["jobs"][0], "job_id": 1238, "job_state": "RUNNING"}  # requeued, running again
    queue = CommandResult(0, json.dumps({**SQUEUE, "jobs": [requeued]}), "")
    jobcomp = JOBCOMP.replace("JobId=7 ", "JobId=1238 ").replace("JobState=COMPLETED", "JobState=NODE_FAIL")
    accounted = ScriptedController({"squeue": queue, "sacct": CommandResult(0, SACCT, ""),
                                    "tail": CommandResult(0, jobcomp + "\n", "")})
    jobs = read_jobs(accounted)
    assert [j.job_id for j in jobs] == list(range(1243, 1233, -1))  # newest first, sacct's
    assert jobs[5].state == "RUNNING" and jobs[5].name == "day2-probe"  # the queue's word on 1238
    disabled = CommandResult(1, "", "sacct: error: Slurm accounting storage is disabled\n")
    unaccounted = ScriptedController({**accounted.answers, "sacct": disabled})
    assert [(j.job_id, j.state) for j in read_jobs(unaccounted)] == [(1238, "RUNNING")]
    no_queue = ScriptedController({**unaccounted.answers, "squeue": CommandResult(1, "", "down")})
    assert [(j.job_id, j.state, j.reason) for j in read_jobs(no_queue)] == [(1238, "NODE_FAIL", "NodeDown")]


def test_tail_reads_the_last_lines_of_a_nodes_log_over_its_shell(tmp_path: Path) -> None:
    log = tmp_path / "slurmctld.log"
    log.write_text("".join(f"[2026-11-26T07:00:00.{i:03d}] line {i}\n" for i in range(1000)))
    last = [f"[2026-11-26T07:00:00.{i:03d}] line {i}" for i in (997, 998, 999)]
    assert tail(LocalShell(), str(log), 3) == last
    assert tail(LocalShell(), str(tmp_path / "missing.log"), 3) == []


def test_node_log_merges_the_kernels_xid_lines_into_slurmds_in_time_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TZ", "UTC")  # slurmd logs the host's local time; the kernel line is rendered in it
    time.tzset()
    try:
        slurmd = ["[2026-11-26T07:08:11.100] slurmd started",
                  "[2026-11-26T07:08:13.478] Launching batch job 7"]
        kernel = ["2026-11-26T07:08:12+00:00 NVRM: Xid (PCI:0000:00:06): 79, pid=0"]
        assert merge_kernel_lines(slurmd, kernel, 10) == [
            "[2026-11-26T07:08:11.100] slurmd started",
            "[2026-11-26T07:08:12.000] kernel: NVRM: Xid (PCI:0000:00:06): 79, pid=0",
            "[2026-11-26T07:08:13.478] Launching batch job 7",
        ]
        assert merge_kernel_lines(slurmd, kernel, 1) == ["[2026-11-26T07:08:13.478] Launching batch job 7"]
    finally:
        monkeypatch.undo()
        time.tzset()


def test_partitions_from_scontrol_count_gpus_from_the_nodes_gres() -> None:
    # Captured from Slurm 22.05.8 on the local driver's nodes, one 1-GPU job running on obs-0.
    data = Path(__file__).parent / "data"
    partitions = (data / "scontrol-show-partition.txt").read_text().splitlines()
    nodes = (data / "scontrol-d-show-node.txt").read_text().splitlines()
    [gpu] = parse_partitions(partitions, nodes)
    assert (gpu.name, gpu.nodes, gpu.gpus_total, gpu.gpus_available) == ("gpu", 2, 16, 15)
    assert (gpu.default_time, gpu.max_time, gpu.state) == ("01:00:00", "7-00:00:00", "UP")
    drained = [nodes[0], nodes[1].replace("State=IDLE", "State=IDLE+DRAIN")]
    assert parse_partitions(partitions, drained)[0].gpus_available == 7


def test_slurm_node_states_are_slurms_own_in_the_apis_words() -> None:
    nodes = (Path(__file__).parent / "data" / "scontrol-d-show-node.txt").read_text().splitlines()
    assert slurm_node_states(nodes) == {"obs-0": "MIXED", "obs-1": "IDLE"}
    for raw, state in (("IDLE+DRAIN", "DRAIN"), ("MIXED+DRAIN", "DRAIN"), ("DOWN+NOT_RESPONDING", "DOWN"),
                       ("IDLE*", "DOWN"), ("ALLOCATED", "ALLOCATED"), ("COMPLETING", "ALLOCATED"),
                       ("FUTURE", "UNKNOWN")):
        assert slurm_node_states([nodes[1].replace("State=IDLE", f"State={raw}")]) == {"obs-1": state}
