"""The local driver's readers of Slurm 22.05's output, on lines captured from its real daemons (the real
nodes' end-to-end path: test_local_driver_day2.py)."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path

import pytest

from backend.provisioning.drivers.local.observe import (
    merge_jobs,
    merge_kernel_lines,
    parse_jobcomp_lines,
    parse_partitions,
    parse_squeue_json,
    slurm_node_states,
    tail,
)
from tests.backend.node_config.test_node_shell import LocalShell

# `squeue --json` of Slurm 22.05.8 (openapi v0.0.38), the fields we read of one running job.
SQUEUE = {"meta": {"plugin": {"type": "openapi/v0.0.38"}}, "errors": [], "jobs": [{
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
    assert (pending.state, pending.gpus, pending.started_at) == ("PENDING", 8, None)
    assert pending.reason == "Resources" and (pending.node_count, running.node_count) == (2, 1)


def test_jobcomp_line_gives_a_finished_job_and_merging_keeps_the_queues_gpus() -> None:
    [finished] = parse_jobcomp_lines([JOBCOMP, "", "not a jobcomp line"])
    assert (finished.job_id, finished.name, finished.user, finished.state, finished.nodes) == (
        7, "day2-probe", "ubuntu", "COMPLETED", "obs-0")
    assert finished.run_time(dt.datetime.now(dt.UTC)) == dt.timedelta(seconds=3)
    assert finished.gpus == 0  # filetxt's Tres has no gres/gpu without AccountingStorageTRES
    merged = merge_jobs(parse_squeue_json(json.dumps(SQUEUE)), [finished])
    assert [(j.job_id, j.state, j.gpus) for j in merged] == [(8, "PENDING", 8), (7, "COMPLETED", 1)]
    failed = parse_jobcomp_lines([JOBCOMP.replace("JobState=COMPLETED", "JobState=NODE_FAIL")
                                  .replace("ExitCode=0:0 ", "ExitCode=0:9 ")])
    assert (failed[0].state, failed[0].reason) == ("FAILED", "NODE_FAIL (exit 0:9)")


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
