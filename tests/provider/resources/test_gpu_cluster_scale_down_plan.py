"""A plan that lowers node_count names the nodes that go and the jobs drained and requeued on them (the
backend's scale-down preview), and still plans when the preview cannot be read (issue 28)."""

from __future__ import annotations

from typing import Any

import httpx

from provider.cty import format_path, is_unknown
from provider.framework import Context
from tests.provider.resources._gpu_cluster_fake_api import FakeClusterApi
from tests.provider.resources.test_gpu_cluster_plan import MULTI, config_of, plan, state_of

PREVIEW = {
    "cluster_id": "cls_1", "node_count": 2, "current_node_count": 3, "scale_down_grace_minutes": 30,
    "workload_known": True,
    "nodes": [{"name": "train-2", "index": 2, "already_leaving": False, "running_jobs": [
        {"job_id": 12, "name": "ddp", "user": "alice", "nodes": "train-[1-2]", "started_at": None}]}],
    "summary": "Scaling train to 2 node(s) removes train-2 (running job(s) 12 (ddp, alice)). Nodes with "
    "running jobs are drained; jobs still running after scale_down_grace_minutes (30) are requeued (they "
    "restart on the remaining nodes).",
}


class PreviewApi(FakeClusterApi):
    """The fake API with the scale-down preview (`status`: what it answers)."""

    status: int = 200
    preview: dict[str, Any] | None = None

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/clusters/cls_1/scale-down-preview":
            self.requests.append((request.method, request.url.path, dict(request.url.params)))
            if self.status != 200:
                return httpx.Response(self.status, json={"code": "internal", "detail": "boom"})
            return httpx.Response(200, json=self.preview or PREVIEW)
        return super().handle(request)


def warnings(ctx: Context) -> dict[str, str]:
    return {format_path(d.path) if d.path else "": f"{d.summary}: {d.detail}"
            for d in ctx.diagnostics if d.severity == "warning"}


def test_gpu_cluster_plan_scale_down_warns_naming_nodes_and_jobs() -> None:
    api = PreviewApi()
    prior = state_of(**MULTI)
    planned, ctx = plan(config_of(prior, node_count=2), prior, api)
    assert planned is not None and planned["node_count"] == 2
    found = warnings(ctx)["node_count"]
    assert found.startswith("Scale-Down Evicts Running Jobs: Scaling train to 2 node(s) removes train-2 "
                            "(running job(s) 12 (ddp, alice))")
    assert ("GET", "/v1/clusters/cls_1/scale-down-preview", {"node_count": "2"}) in api.requests
    assert planned["nodes"] == prior["nodes"][:2]  # the preview named train-2: the others survive


def test_gpu_cluster_plan_scale_down_plans_the_survivors_the_preview_leaves() -> None:
    api = PreviewApi()
    api.preview = {**PREVIEW, "nodes": [{"name": "train-0", "index": 0, "already_leaving": False,
                                         "running_jobs": []}],
                   "summary": "Scaling train to 2 node(s) removes train-0 (idle)."}
    prior = state_of(**MULTI)
    planned, ctx = plan(config_of(prior, node_count=2), prior, api)
    assert planned is not None and planned["nodes"] == prior["nodes"][1:]  # idle train-0 goes, not train-2
    assert warnings(ctx)["node_count"] == ("Scale-Down Removes Nodes: Scaling train to 2 node(s) removes "
                                           "train-0 (idle).")
    assert (planned["login"], planned["slurm"]) == (prior["login"], prior["slurm"])


def test_gpu_cluster_plan_scale_down_still_plans_when_the_preview_fails() -> None:
    api = PreviewApi()
    api.status = 500
    prior = state_of(**MULTI)
    planned, ctx = plan(config_of(prior, node_count=2), prior, api)
    assert planned is not None and planned["node_count"] == 2
    assert not [d for d in ctx.diagnostics if d.severity == "error"]
    found = warnings(ctx)["node_count"]
    assert found.startswith("Scale-Down Removes Nodes: node_count goes from 3 to 2: 1 node(s) are removed")
    # The engine chooses which node goes: the survivors are unknown, the login host is not.
    assert len(planned["nodes"]) == 2 and all(is_unknown(n) for n in planned["nodes"])
    assert planned["login"] == prior["login"]


def test_gpu_cluster_plan_without_a_scale_down_asks_for_no_preview() -> None:
    api = PreviewApi()
    prior = state_of(**MULTI)
    for count in (3, 4):
        _, ctx = plan(config_of(prior, node_count=count), prior, api)
        assert "node_count" not in warnings(ctx)
    assert not [r for r in api.requests if r[1].endswith("/scale-down-preview")]
