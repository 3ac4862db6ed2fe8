"""What a `gpucloud_gpu_cluster` plan keeps known: only what the change really alters is unknown.

The framework's modifiers (`use_state_for_unknown_unless_changed`) keep a runtime value unless an
attribute it follows changes; for `node_count` that is too coarse. A scale of a multi-node cluster keeps
its login host, its Slurm controller and Kubernetes endpoint (the jumphost) and every surviving node: the
API adds new nodes after the last (nodes are listed by index), so a scale up adds unknown nodes after the
known ones; a scale down removes idle nodes first, then the newest, which the engine decides when it
runs, so its survivors are unknown unless the backend's preview names the nodes that go
(`provider/resources/cluster_scale_down.py`).
Crossing the one-node boundary changes every node's role and the login host: then they are unknown.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from provider.cty import UNKNOWN, is_unknown, is_wholly_known
from provider.framework import State
from provider.resources.cluster_checks import known
from provider.resources.gpu_cluster_schema import FOLLOWS

# What follows node_count (their modifiers keep the prior value unless it changes).
FOLLOW_NODE_COUNT = ("num_gpus", "nodes", "login", "slurm", "kubernetes")
# A RUNNING cluster in these phases has nothing in flight: a plan without engine work keeps its status.
SETTLED = ("RUNNING", "Ready")


def node_count_moved(plan: State, state: State | None) -> None:
    """A node_count this plan's own modifiers moved (autoscaling's new range, or unknown after one): the
    framework's modifiers compared against the proposed (prior) value, so what follows it is re-planned
    here (`keep_through_scale` then restores what survives)."""
    if state is None or not known(state.get("node_count")) or plan.get("node_count") == state["node_count"]:
        return
    for name in FOLLOW_NODE_COUNT:
        plan[name] = UNKNOWN


def keep_through_scale(plan: State, state: State | None, differs: Any) -> None:
    """Restore, after a node_count change of a RUNNING multi-node cluster, the runtime values that only
    followed node_count: login, slurm, kubernetes as they are, nodes as the survivors (plus unknown
    added ones). `differs(name, plan, state)` says whether another attribute they follow changed."""
    if state is None or state.get("status") != "RUNNING":
        return
    before, after = state.get("node_count"), plan.get("node_count")
    nodes = state.get("nodes")
    if not (known(before) and known(after)) or before == after or not isinstance(nodes, list):
        return
    multi_node = min(int(before), int(after)) > 1 and len(nodes) == int(before)
    if not multi_node or any(not isinstance(n, Mapping) or n.get("role") != "worker" for n in nodes):
        return
    for name, follows in FOLLOWS.items():
        others = [f for f in follows if f != "node_count"]
        if not is_unknown(plan.get(name)) or any(differs(f, plan, state) for f in others):
            continue
        if name == "nodes":
            kept = [dict(n) for n in nodes] if int(after) > int(before) else []
            plan[name] = kept + [UNKNOWN] * (int(after) - len(kept))
        else:
            plan[name] = state.get(name)


def keep_status_without_engine_work(plan: State, state: State | None, engine_work: bool) -> None:
    """A settled RUNNING cluster that this plan gives the engine nothing to do (labels, a ceiling, an
    autoscaling range that leaves node_count where it is) keeps its status and phase."""
    if state is None or engine_work or (state.get("status"), state.get("phase")) != SETTLED:
        return
    if is_unknown(plan.get("status")) and is_unknown(plan.get("phase")):
        plan["status"], plan["phase"] = state["status"], state["phase"]


def keep_planned_elements(new: State, plan: State, names: tuple[str, ...]) -> State:
    """The applied state with the values the plan kept known: whole values, and the known elements of a
    list planned partly unknown (a scale's surviving nodes). Terraform rejects an apply result that
    differs from a known planned value, so a node repaired meanwhile shows at the next refresh instead of
    failing this apply."""
    for name in names:
        planned = plan.get(name)
        if name not in plan or is_unknown(planned):
            continue
        if is_wholly_known(planned):
            new[name] = planned
        elif isinstance(planned, list) and isinstance(new.get(name), list) and len(new[name]) == len(planned):
            new[name] = [p if is_wholly_known(p) else n for p, n in zip(planned, new[name], strict=True)]
    return new
