"""The cluster actions over a mocked API: the request each sends, the progress lines while a node comes
back (restart, replace), drain without waiting, restart_workers, and failures as diagnostics."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from provider.cty import UNKNOWN
from provider.framework import Context, DiagnosticError
from provider.resources import cluster_actions
from provider.resources.cluster_actions import ClusterNodeAction, ClusterRestartWorkers
from tests.provider.resources.fakes import context, problem

CLUSTER = "cls_abc123"


@pytest.fixture(autouse=True)
def no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_actions, "FIRST_POLL_SECONDS", 0.0)


def node(status: str = "RUNNING", machine: str = "i-1", pending: str | None = None,
         reason: str | None = None, name: str = "train-1") -> dict[str, Any]:
    return {"name": name, "status": status, "status_reason": reason, "pending_action": pending,
            "instance_id": machine}


class FakeApi:
    """Answers the action POST with `accepted`, then each GET of the nodes with the next listing."""

    def __init__(self, accepted: dict[str, Any] | httpx.Response, listings: list[list[dict[str, Any]]]):
        self.accepted = accepted
        self.listings = iter(listings)
        self.posts: list[tuple[str, dict[str, Any], str | None]] = []
        self.last: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            self.posts.append((request.url.path, json.loads(request.content),
                               request.headers.get("Idempotency-Key")))
            if isinstance(self.accepted, httpx.Response):
                return self.accepted
            return httpx.Response(202, json=self.accepted)
        if request.url.path.endswith("/nodes"):
            self.last = next(self.listings, self.last)
            return httpx.Response(200, json={"items": self.last, "counts": {}})
        if request.url.path == f"/v1/clusters/{CLUSTER}":
            return httpx.Response(200, json={"id": CLUSTER})
        return problem(404, "not_found", f"no {request.url.path}")


def invoke(target: Any, ctx: Context, **config: Any) -> list[str]:
    full = {**dict.fromkeys(target.schema.attributes), "cluster_id": CLUSTER, **config}
    return list(target.invoke(ctx, full))


def test_node_action_restart_reports_each_status_until_running() -> None:
    api = FakeApi({"action": "restart", "node": node(pending="restart")}, [
        [node(pending="restart")], [node("CONFIGURING", reason="restart requested")], [node()],
    ])
    ctx = context(api)
    lines = invoke(ClusterNodeAction(), ctx, node="train-1", action="restart")
    assert lines == [
        "restart of train-1 accepted; train-1 is RUNNING, restart pending, machine i-1",
        "train-1 is CONFIGURING (restart requested), machine i-1",
        "train-1 is RUNNING, machine i-1",
        "train-1 is RUNNING again",
    ]
    ((path, body, key),) = api.posts
    assert path == f"/v1/clusters/{CLUSTER}/nodes/train-1/actions" and body == {"action": "restart"} and key
    assert not ctx.diagnostics


def test_node_action_replace_waits_for_the_new_machine() -> None:
    api = FakeApi({"action": "replace", "node": node(pending="replace")}, [
        [node()], [], [node("PROVISIONING", machine="i-2")], [node(machine="i-2")],
    ])
    lines = invoke(ClusterNodeAction(), context(api), node="train-1", action="replace")
    assert lines[1:] == [
        "train-1 is being replaced",
        "train-1 is PROVISIONING, machine i-2",
        "train-1 is RUNNING, machine i-2",
        "train-1 is RUNNING again",
    ]


def test_node_action_replace_kept_on_the_old_machine_fails() -> None:
    api = FakeApi({"action": "replace", "node": node(pending="replace")}, [
        [node()], [node(reason="no spare node on ib-1 (retried later)")],
    ])
    with pytest.raises(DiagnosticError) as raised:
        invoke(ClusterNodeAction(), context(api), node="train-1", action="replace")
    assert raised.value.diagnostic.summary == "Node Not Replaced"
    assert "no spare node" in raised.value.diagnostic.detail


def test_node_action_failed_node_is_an_error() -> None:
    api = FakeApi({"action": "restart", "node": node(pending="restart")}, [
        [node("FAILED", reason="XID 79: fell off the bus")],
    ])
    with pytest.raises(DiagnosticError) as raised:
        invoke(ClusterNodeAction(), context(api), node="train-1", action="restart")
    assert raised.value.diagnostic.summary == "Node Failed" and "XID 79" in raised.value.diagnostic.detail


def test_node_action_times_out_naming_the_timeout() -> None:
    api = FakeApi({"action": "restart", "node": node(pending="restart")}, [[node("CONFIGURING")]])
    with pytest.raises(DiagnosticError) as raised:
        invoke(ClusterNodeAction(), context(api), node="train-1", action="restart", timeout="0.05s")
    assert raised.value.diagnostic.summary == "Timed Out Waiting for Node"
    assert raised.value.diagnostic.path is not None and raised.value.diagnostic.path[0].name == "timeout"


def test_node_action_drain_takes_effect_without_waiting() -> None:
    api = FakeApi({"action": "drain", "node": node()}, [])
    lines = invoke(ClusterNodeAction(), context(api), node="train-1", action="drain")
    assert lines == ["drain of train-1 accepted; train-1 is RUNNING, machine i-1"]


def test_node_action_refused_by_the_api_is_a_diagnostic() -> None:
    refused = problem(409, "node_state_conflict", "node train-1 already has a pending restart")
    ctx = context(FakeApi(refused, []))
    assert invoke(ClusterNodeAction(), ctx, node="train-1", action="restart") == []
    (error,) = ctx.diagnostics
    assert error.summary == "Error Running Node Action 'restart'" and "pending restart" in error.detail


def test_restart_workers_waits_for_each_restarted_worker() -> None:
    api = FakeApi({"action": "restart_workers", "nodes": ["train-1", "train-2"]}, [
        [node("CONFIGURING"), node("CONFIGURING", name="train-2")],
        [node(), node("CONFIGURING", name="train-2")],
        [node(), node(name="train-2")],
    ])
    lines = invoke(ClusterRestartWorkers(), context(api))
    assert lines[0] == "restarting train-1, train-2" and lines[-1] == "train-1, train-2 RUNNING again"
    assert "train-2 is RUNNING, machine i-1" in lines
    assert api.posts[0][:2] == (f"/v1/clusters/{CLUSTER}/actions", {"action": "restart_workers"})


def test_restart_workers_with_no_xid_worker_does_nothing() -> None:
    api = FakeApi({"action": "restart_workers", "nodes": []}, [])
    assert invoke(ClusterRestartWorkers(), context(api)) == [
        f"no worker of {CLUSTER} reports XID errors: nothing to restart"
    ]


def test_action_plan_checks_the_cluster_exists_once_its_id_is_known() -> None:
    def gone(request: httpx.Request) -> httpx.Response:
        return problem(404, "not_found", "no such cluster")

    ctx = context(gone)
    ClusterNodeAction().plan(ctx, {"cluster_id": "cls_gone1"})
    (error,) = ctx.diagnostics
    assert error.summary == "Cluster Not Found" and error.path is not None

    def never(request: httpx.Request) -> Iterator[httpx.Response]:
        raise AssertionError("no request while the id is unknown")

    quiet = context(never)  # type: ignore[arg-type]
    ClusterRestartWorkers().plan(quiet, {"cluster_id": UNKNOWN})
    ClusterRestartWorkers().plan(context(None), {"cluster_id": CLUSTER})  # unconfigured: nothing to ask
    assert not quiet.diagnostics
