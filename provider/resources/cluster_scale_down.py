"""The plan of a lower `node_count` names the nodes that go and the jobs running on them (issue 28):
the backend's read-only scale-down preview (`GET /v1/clusters/{id}/scale-down-preview`) says which nodes
the engine would remove (idle first, then the newest) and what runs on each; a busy one is drained and
its jobs are requeued after `scale_down_grace_minutes`. Best effort: a preview that cannot be read
leaves a shorter warning, never a failed plan."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from provider.client import ApiError, GpuCloudClient
from provider.cty import is_unknown
from provider.framework import Context, State, root
from provider.resources.cluster_checks import known


def warn_scale_down(ctx: Context, client: GpuCloudClient, plan: State, state: State | None
                    ) -> dict[str, Any] | None:
    """A warning on `node_count` when the plan lowers it: which nodes go, and the jobs drained and
    requeued on them. Returns the preview (None: no scale-down, or it could not be read)."""
    if state is None or plan.get("autoscaling") is not None or not known(plan.get("node_count")):
        return None
    before, after, cluster_id = state.get("node_count"), plan.get("node_count"), state.get("id")
    if not isinstance(before, int) or not isinstance(after, int) or after >= before or not cluster_id:
        return None
    try:
        preview = client.scale_down_preview(str(cluster_id), after)
    except (ApiError, OSError) as error:
        ctx.warning(
            "Scale-Down Removes Nodes",
            f"node_count goes from {before} to {after}: {before - after} node(s) are removed, idle ones "
            "first, then the newest. Jobs running on them are drained and requeued after "
            "scale_down_grace_minutes. "
            f"(The nodes could not be previewed: {error}.)",
            root("node_count"),
        )
        return None
    nodes = [n for n in preview.get("nodes") or [] if isinstance(n, dict)]
    busy = any(n.get("running_jobs") for n in nodes)
    ctx.warning(
        "Scale-Down Evicts Running Jobs" if busy else "Scale-Down Removes Nodes",
        str(preview.get("summary") or f"node_count goes from {before} to {after}."),
        root("node_count"),
    )
    return preview


def plan_survivors(plan: State, state: State | None, preview: Mapping[str, Any] | None) -> None:
    """A scale-down planned its surviving nodes unknown (`cluster_plan.keep_through_scale`): the nodes
    the preview does not name stay, so the plan shows them. The engine decides again when it runs (a job
    that ends meanwhile may free another node); the next refresh shows what it did."""
    nodes, planned = (state or {}).get("nodes"), plan.get("nodes")
    if preview is None or not isinstance(nodes, list) or not isinstance(planned, list):
        return
    if not planned or not all(is_unknown(n) for n in planned):
        return
    going = {n.get("name") for n in preview.get("nodes") or [] if isinstance(n, Mapping)}
    kept = [dict(n) for n in nodes if isinstance(n, Mapping) and n.get("name") not in going]
    if len(kept) == len(planned):
        plan["nodes"] = kept
