"""The day-2 commands (jobs, nodes, logs, node actions, restart-workers, edit --repair) against a scripted
API (httpx.MockTransport): what they send, how they render, how a followed log resumes."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
import httpx
import pytest

from provider.cli import app as app_module
from provider.cli import output
from provider.cli.main import main
from provider.cli.nodes import gpu_memory, gpu_utilisation, reason, recent_xids
from provider.cli.workload import JOB_STATES, slurm_duration
from tests.provider.client.fakes import ScriptedApi, make_client, problem

CLUSTER = {"id": "cls_1", "name": "train", "status": "RUNNING", "node_repair": "auto"}
GPU = {"utilization_pct": 90, "memory_used_mib": 40960, "memory_total_mib": 81920}
NODE = {
    "name": "train-1", "role": "worker", "status": "RUNNING", "health": "degraded", "health_reason": "XID 79",
    "orchestrator_state": "DRAIN", "instance_id": "nod_2", "pending_action": None,
    "gpus": [GPU, {**GPU, "utilization_pct": 70, "memory_used_mib": None}],
    "gpus_unavailable_reason": None,
    "xid_events": [
        {"code": 79, "gpu_index": 1}, {"code": 79, "gpu_index": 1}, {"code": 48, "gpu_index": None}
    ],
}


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ScriptedApi:
    """The API every command of the test talks to (credentials from the environment)."""
    scripted = ScriptedApi()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("GPUCLOUD_API_KEY", "gpc_test")
    monkeypatch.setattr(app_module, "GpuCloudClient", lambda *args, **kwargs: make_client(scripted))
    return scripted


def ok(body: Any, status: int = 200) -> httpx.Response:
    return httpx.Response(status, json=body)


def events(*lines: str) -> httpx.Response:
    body = "".join(f"data: {line}\n\n: keep-alive\n\n" for line in lines)
    return httpx.Response(200, text=body, headers={"content-type": "text/event-stream"})


def test_cli_slurm_duration_as_squeue_prints_it() -> None:
    assert [slurm_duration(s) for s in (0, 75, 3600 * 5 + 62, 86400 * 7)] == [
        "0:00", "1:15", "5:01:02", "7-00:00:00"
    ]


def test_cli_node_row_summarises_gpus_xids_and_reason() -> None:
    assert gpu_utilisation(NODE) == "80%"
    assert gpu_memory(NODE) == "40/80 GiB"  # the GPU without a memory reading is left out
    assert recent_xids(NODE) == ["79@gpu1", "48"]
    assert reason(NODE) == "XID 79"
    no_gpu: dict[str, Any] = {"gpus": None, "xid_events": [], "health_reason": None, "pending_action": None,
              "gpus_unavailable_reason": "no NVIDIA driver on this node"}
    assert (gpu_utilisation(no_gpu), gpu_memory(no_gpu), reason(no_gpu)) == (
        None, None, "no NVIDIA driver on this node")
    assert reason({**no_gpu, "pending_action": "replace"}) == "replace pending"


def test_cli_views_show_one_object_or_its_json(capsys: pytest.CaptureFixture[str]) -> None:
    value = {"id": "vol_1", "size_tib": 2}
    output.emit(value, False, output.table_view([("ID", lambda v: v["id"])]))
    assert capsys.readouterr().out == "ID\nvol_1\n"
    output.emit(value, False, output.fields_view([("Size TiB", "size_tib"), ("Missing", "nope")]))
    assert capsys.readouterr().out == "Size TiB:  2\nMissing:   -\n"
    output.emit(value, True, output.table_view([]))
    assert json.loads(capsys.readouterr().out) == value


def test_cli_jobs_prints_counters_job_table_and_partitions(
    api: ScriptedApi, capsys: pytest.CaptureFixture[str]
) -> None:
    job = {"job_id": 7, "array_job_id": None, "array_task_id": None, "name": "train", "user": "ana",
           "partition": "gpu", "nodes": "train-[0-1]", "gpus": 16, "state": "running", "reason": None,
           "priority": 100, "run_time_seconds": 3725, "time_limit_seconds": 86400}
    task = {**job, "job_id": 9, "array_job_id": 8, "array_task_id": 1, "nodes": "train-1", "gpus": 0,
            "state": "node_fail", "reason": "NodeDown", "run_time_seconds": 5}
    rest = {**task, "job_id": 8, "array_task_id": None, "array_tasks": "3-5", "nodes": "", "state": "pending",
            "reason": "Resources", "run_time_seconds": 0}  # the array's tasks not started: one record
    partition = {"name": "gpu", "nodes": 2, "gpu_type": "H100", "gpus_available": 0, "gpus_total": 16,
                 "default_time": "01:00:00", "max_time": "7-00:00:00", "state": "UP"}
    counts = {"running": 1, "pending": 1, "completed": 3, "failed": 0, "cancelled": 0, "timeout": 0,
              "node_fail": 1}
    api.script += [ok([CLUSTER]), ok({"items": [task, rest, job], "counts": counts,
                                      "partitions": [partition]})]
    assert main(["jobs", "train", "--state", "running"]) == 0
    assert dict(api.requests[-1].url.params) == {"state": "running"}
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ("Jobs: 1 running, 1 pending, 3 completed, 0 failed, 0 cancelled, 0 timeout, "
                        "1 node_fail")
    assert lines[2].split()[:2] == ["JOBID", "NAME"]
    assert lines[3].split() == ["8_1", "train", "ana", "gpu", "train-1", "0", "NODE_FAIL", "NodeDown", "0:05",
                                "1-00:00:00", "100"]  # as squeue prints an array task and Slurm's state
    assert lines[4].split() == ["8_[3-5]", "train", "ana", "gpu", "-", "0", "PENDING", "Resources", "0:00",
                                "1-00:00:00", "100"]  # squeue's pending rest of an array
    assert lines[5].split() == ["7", "train", "ana", "gpu", "train-[0-1]", "16", "RUNNING", "-", "1:02:05",
                                "1-00:00:00", "100"]
    assert lines[8].split() == ["gpu", "2", "H100", "0/16", "01:00:00", "7-00:00:00", "UP"]


def test_cli_jobs_state_takes_slurms_names_in_either_case(
    api: ScriptedApi, capsys: pytest.CaptureFixture[str]
) -> None:
    empty: dict[str, list[Any] | dict[str, int]] = {"items": [], "counts": {}, "partitions": []}
    api.script += [ok([CLUSTER]), ok(empty), ok([CLUSTER]), ok(empty)]
    assert main(["jobs", "train", "--state", "NODE_FAIL"]) == 0
    assert dict(api.requests[-1].url.params) == {"state": "node_fail"}
    assert "No NODE_FAIL jobs." in capsys.readouterr().err
    assert main(["jobs", "train", "--state", "cancelled"]) == 0
    assert dict(api.requests[-1].url.params) == {"state": "cancelled"}
    assert main(["jobs", "train", "--state", "done"]) == 1


def test_cli_job_states_are_the_apis() -> None:
    """The CLI's --state choices are the API's `state` filter (proto/openapi.json), in its order."""
    document = json.loads((Path(__file__).parents[3] / "proto" / "openapi.json").read_text())
    [state] = [p for p in document["paths"]["/v1/clusters/{cluster_id}/jobs"]["get"]["parameters"]
               if p["name"] == "state"]
    [enum] = [option["enum"] for option in state["schema"]["anyOf"] if "enum" in option]
    assert enum == JOB_STATES


def test_cli_nodes_filter_by_health_prints_counts_and_says_when_none_match(
    api: ScriptedApi, capsys: pytest.CaptureFixture[str]
) -> None:
    counts = {"healthy": 2, "degraded": 0, "unreachable": 0, "failed": 0, "repairing": 0}
    api.script += [ok(CLUSTER), ok({"items": [], "counts": counts})]
    assert main(["nodes", "cls_1", "--health", "failed"]) == 0
    assert api.requests[-1].url.path == "/v1/clusters/cls_1/nodes"
    assert dict(api.requests[-1].url.params) == {"health": "failed"}
    captured = capsys.readouterr()
    assert captured.out.startswith("Health: 2 healthy, 0 degraded,") and "No failed nodes." in captured.err


def test_cli_logs_follow_reopens_an_ended_stream_without_repeating_lines(
    api: ScriptedApi, capsys: pytest.CaptureFixture[str]
) -> None:
    gone = problem(404, "not_found", "cluster cls_1 not found")
    api.script += [ok(CLUSTER), events("[t1] a", "[t2] b"), events("[t2] b", "[t3] c"), gone]
    assert main(["logs", "cls_1", "--node", "train-1", "--tail", "2", "-f", "--json"]) == 1
    captured = capsys.readouterr()
    assert [json.loads(line) for line in captured.out.splitlines()] == [
        {"source": "train-1", "line": line} for line in ("[t1] a", "[t2] b", "[t3] c")
    ]
    assert "cluster cls_1 not found" in captured.err
    assert dict(api.requests[1].url.params) == {"source": "train-1", "tail": "2", "follow": "true"}


def test_cli_logs_tail_prints_the_lines(api: ScriptedApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.script += [ok(CLUSTER), ok({"source": "controller", "lines": ["[t1] slurmctld started"]})]
    assert main(["logs", "cls_1", "--tail", "1"]) == 0
    assert capsys.readouterr().out == "[t1] slurmctld started\n"


def test_cli_node_restart_asks_first_and_drain_does_not(
    api: ScriptedApi, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True, raising=False)
    asked: list[str] = []

    def refuse(question: str, **_: Any) -> bool:
        asked.append(question)
        return False

    monkeypatch.setattr(click, "confirm", refuse)
    api.script += [ok(CLUSTER)]
    assert main(["node", "restart", "cls_1", "train-1"]) == 1
    assert asked == ["Restart train-1 of train (cls_1)? Jobs running on it are killed."]
    assert "train-1 left as it was" in capsys.readouterr().err
    assert [r.method for r in api.requests] == ["GET"]  # nothing was sent

    api.script += [ok(CLUSTER), ok({"action": "drain", "node": NODE}, 202)]
    assert main(["node", "drain", "cls_1", "train-1", "--json"]) == 0
    assert len(asked) == 1
    post = api.requests[-1]
    assert json.loads(post.content) == {"action": "drain"} and post.headers["idempotency-key"]
    assert json.loads(capsys.readouterr().out)["node"]["orchestrator_state"] == "DRAIN"
    assert main(["node", "drain", "cls_1", "train-1", "--yes"]) == 1  # drain loses nothing: no --yes


def test_cli_restart_workers_names_the_nodes(api: ScriptedApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.script += [ok(CLUSTER), ok({"action": "restart_workers", "nodes": ["train-1", "train-3"]}, 202)]
    assert main(["cluster", "restart-workers", "cls_1", "--yes"]) == 0
    assert json.loads(api.requests[-1].content) == {"action": "restart_workers"}
    assert "Restarting train-1, train-3." in capsys.readouterr().err


def test_cli_cluster_edit_sets_the_repair_mode(api: ScriptedApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.script += [ok(CLUSTER), ok({**CLUSTER, "node_repair": "manual"})]
    assert main(["cluster", "edit", "cls_1", "--repair", "manual", "--json"]) == 0
    patch = api.requests[-1]
    assert patch.method == "PATCH" and json.loads(patch.content) == {"node_repair": "manual"}
    assert json.loads(capsys.readouterr().out)["node_repair"] == "manual"
