"""`gpucloud cluster scale` down: it says which nodes go and the jobs running on them, asks before
evicting running jobs (--yes in scripts; no terminal and no --yes refuses), and asks nothing when the
nodes that go are idle (issue 28). Against a scripted API (httpx.MockTransport)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
import httpx
import pytest

from provider.cli import app as app_module
from provider.cli.main import main
from tests.provider.client.fakes import ScriptedApi, make_client

CLUSTER = {"id": "cls_1", "name": "train", "status": "RUNNING", "node_count": 3}
BUSY = {
    "cluster_id": "cls_1", "node_count": 2, "current_node_count": 3, "scale_down_grace_minutes": 30,
    "workload_known": True,
    "nodes": [{"name": "train-2", "index": 2, "already_leaving": False, "running_jobs": [
        {"job_id": 12, "name": "ddp", "user": "alice", "nodes": "train-2", "started_at": None}]}],
    "summary": "Scaling train to 2 node(s) removes train-2 (running job(s) 12 (ddp, alice)).",
}
IDLE = {**BUSY, "nodes": [{"name": "train-2", "index": 2, "already_leaving": False, "running_jobs": []}],
        "summary": "Scaling train to 2 node(s) removes train-2 (idle)."}


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ScriptedApi:
    scripted = ScriptedApi()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("GPUCLOUD_API_KEY", "gpc_test")
    monkeypatch.setattr(app_module, "GpuCloudClient", lambda *args, **kwargs: make_client(scripted))
    return scripted


def ok(body: Any) -> httpx.Response:
    return httpx.Response(200, json=body)


def test_cli_scale_down_names_the_jobs_and_asks_before_evicting_them(
    api: ScriptedApi, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True, raising=False)
    asked: list[str] = []
    answer = [False]

    def ask(question: str, **_: Any) -> bool:
        asked.append(question)
        return answer[0]

    monkeypatch.setattr(click, "confirm", ask)
    api.script += [ok(CLUSTER), ok(BUSY)]
    assert main(["cluster", "scale", "cls_1", "2", "--no-wait"]) == 1
    err = capsys.readouterr().err
    assert "removes train-2 (running job(s) 12 (ddp, alice))" in err and "not scaled" in err
    assert asked == ["Drain train-2 and requeue job(s) 12 if still running after scale_down_grace_minutes "
                     "(30)?"]
    assert [r.method for r in api.requests] == ["GET", "GET"]  # nothing was changed
    assert dict(api.requests[1].url.params) == {"node_count": "2"}
    assert api.requests[1].url.path == "/v1/clusters/cls_1/scale-down-preview"

    answer[0] = True
    api.script += [ok(CLUSTER), ok(BUSY), ok({**CLUSTER, "node_count": 2})]
    assert main(["cluster", "scale", "cls_1", "2", "--no-wait", "--json"]) == 0
    assert json.loads(api.requests[-1].content) == {"node_count": 2}


def test_cli_scale_down_without_a_terminal_needs_yes(
    api: ScriptedApi, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys.stdin, "isatty", lambda: False, raising=False)
    api.script += [ok(CLUSTER), ok(BUSY)]
    assert main(["cluster", "scale", "cls_1", "2", "--no-wait"]) != 0
    assert "pass --yes" in capsys.readouterr().err
    assert [r.method for r in api.requests] == ["GET", "GET"]

    api.script += [ok(CLUSTER), ok(BUSY), ok({**CLUSTER, "node_count": 2})]
    assert main(["cluster", "scale", "cls_1", "2", "--no-wait", "--yes", "--json"]) == 0
    assert api.requests[-1].method == "PATCH"


def test_cli_scale_down_of_idle_nodes_and_scale_up_ask_nothing(
    api: ScriptedApi, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys.stdin, "isatty", lambda: False, raising=False)
    api.script += [ok(CLUSTER), ok(IDLE), ok({**CLUSTER, "node_count": 2})]
    assert main(["cluster", "scale", "cls_1", "2", "--no-wait", "--json"]) == 0
    assert "removes train-2 (idle)" in capsys.readouterr().err
    api.script += [ok(CLUSTER), ok({**CLUSTER, "node_count": 5})]
    assert main(["cluster", "scale", "cls_1", "5", "--no-wait", "--json"]) == 0
    assert [r.method for r in api.requests][-2:] == ["GET", "PATCH"]  # no preview for a scale-up
