"""`gpucloud nodes CLUSTER --history NODE` against a scripted API (httpx.MockTransport): what it asks for,
the events table it prints, its JSON, and that it takes no --health filter."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from provider.cli import app as app_module
from provider.cli.main import main
from provider.cli.nodes import event_kind
from tests.provider.client.fakes import ScriptedApi, make_client

CLUSTER = {"id": "cls_1", "name": "train", "status": "RUNNING"}
EVENTS: list[dict[str, Any]] = [
    {"at": "2026-12-03T08:02:00Z", "node": "train-1", "instance_id": "nod_new", "kind": "repair_finished",
     "code": None, "detail": "machine nod_new runs in place of nod_old", "actor": "engine"},
    {"at": "2026-12-03T08:00:00Z", "node": "train-1", "instance_id": "nod_old", "kind": "xid", "code": 79,
     "detail": "XID 79: GPU 3 has fallen off the bus", "actor": "engine"},
    {"at": "2026-12-03T07:50:00Z", "node": "train-1", "instance_id": "nod_old", "kind": "drain_requested",
     "code": None, "detail": "drain requested by gpc_AbCdEfGh", "actor": "gpc_AbCdEfGh"},
]


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ScriptedApi:
    scripted = ScriptedApi()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("GPUCLOUD_API_KEY", "gpc_test")
    monkeypatch.setattr(app_module, "GpuCloudClient", lambda *args, **kwargs: make_client(scripted))
    return scripted


def ok(body: Any) -> httpx.Response:
    return httpx.Response(200, json=body)


def test_cli_event_kind_shows_the_xid_code() -> None:
    assert [event_kind(e) for e in EVENTS] == ["repair_finished", "xid 79", "drain_requested"]


def test_cli_nodes_history_prints_the_events_newest_first(
    api: ScriptedApi, capsys: pytest.CaptureFixture[str]
) -> None:
    api.script += [ok(CLUSTER), ok({"items": EVENTS[:2], "next_page_token": "t2"}),
                   ok({"items": EVENTS[2:], "next_page_token": None})]
    assert main(["nodes", "cls_1", "--history", "train-1"]) == 0
    first, second = api.requests[1], api.requests[2]
    assert first.url.path == "/v1/clusters/cls_1/nodes/train-1/events"
    assert dict(first.url.params) == {"page_size": "50"}
    assert dict(second.url.params) == {"page_size": "50", "page_token": "t2"}
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["TIME", "EVENT", "INSTANCE", "BY", "DETAIL"]
    assert lines[1].split()[:4] == ["2026-12-03T08:02:00Z", "repair_finished", "nod_new", "engine"]
    assert lines[2].split()[:5] == ["2026-12-03T08:00:00Z", "xid", "79", "nod_old", "engine"]
    assert lines[2].endswith("XID 79: GPU 3 has fallen off the bus")
    assert "gpc_AbCdEfGh" in lines[3] and len(lines) == 4


def test_cli_nodes_history_limit_and_json(api: ScriptedApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.script += [ok(CLUSTER), ok({"items": EVENTS[:1], "next_page_token": "t2"})]
    assert main(["nodes", "cls_1", "--history", "train-1", "--limit", "1", "--json"]) == 0
    assert dict(api.requests[-1].url.params) == {"page_size": "1"}  # no second page fetched
    assert json.loads(capsys.readouterr().out) == EVENTS[:1]


def test_cli_nodes_history_says_when_there_is_none_and_refuses_health(
    api: ScriptedApi, capsys: pytest.CaptureFixture[str]
) -> None:
    api.script += [ok(CLUSTER), ok({"items": [], "next_page_token": None})]
    assert main(["nodes", "cls_1", "--history", "train-0"]) == 0
    assert "No events for train-0." in capsys.readouterr().err
    assert main(["nodes", "cls_1", "--history", "train-0", "--health", "failed"]) != 0
    assert "--history" in capsys.readouterr().err
