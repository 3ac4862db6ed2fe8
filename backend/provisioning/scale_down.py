"""Scale-down that never surprises a running job (docs/engine.md, "Scale-down and running jobs").

When `node_count` drops below the cluster's members, the reconcile pass chooses the nodes that go: idle
ones first (no RUNNING job on them, read from the driver's workload source), then the newest (highest
index); without a workload source, the newest. The first node of a cluster on a host pool runs slurmctld
and is its login node: it never goes. A chosen node is marked *leaving* in the database
(`applied_config["leaving"]`: since when, until when its jobs may run, whether it was drained before);
an idle one is released at once. A busy one is drained (Slurm DRAIN through the node's `drained` flag
and the usual `node_drain` operation) and keeps serving its jobs until they end or the cluster's
`scale_down_grace_minutes` run out; then its jobs are requeued (`node_requeue`, client token
`<node id>/node_requeue/<seq>`) and, once the scheduler has them back, the node is released. Everything
the scale-down needs is stored, so a pass replayed after a crash carries on where the last committed one
stopped. A user's `remove_node_names` and the autoscaler's decisions mark their nodes the same way.
`preview` answers "which nodes would go, and what runs on them" without changing anything.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import structlog
from sqlalchemy.orm import Session

from backend.domain.lifecycle import NodeStage
from backend.provisioning import node_views, spot
from backend.provisioning.driver import (
    Job,
    Operation,
    OperationRequest,
    OpKind,
    ProvisioningDriver,
    node_names,
    workload_of,
)
from backend.provisioning.state import aware, live_nodes
from backend.store.engine_models import EngineNode, PhaseRecord
from backend.store.models import Cluster

log = structlog.get_logger("gpucloud.engine")
LEAVING = "leaving"  # the key of the leaving mark in EngineNode.applied_config
DEFAULT_GRACE_MINUTES = 30
MAX_GRACE_MINUTES = 10080  # 7 days: Slurm's MaxTime in the generated slurm.conf
GRACE_DOC = (
    "Minutes a scale-down waits for the jobs running on a node it removes (the node is drained first, so "
    "no new job lands on it); then they are requeued and the node is released. 0 requeues them at once. "
    f"Idle nodes go first, so this only matters when every idle node is already gone. Default "
    f"{DEFAULT_GRACE_MINUTES}"
)
REQUEUE_RETRY = dt.timedelta(seconds=30)

Record = Callable[[Operation], None]


def leaving(node: EngineNode) -> bool:
    """Chosen by a scale-down and not released yet (it may still be running jobs)."""
    return isinstance((node.applied_config or {}).get(LEAVING), dict)


def staying(nodes: Sequence[EngineNode]) -> list[EngineNode]:
    """The members a scale-down has not chosen: what `node_count` is compared with."""
    return [n for n in nodes if n.active_name is not None and not leaving(n)]


def controller(cluster: Cluster, members: Sequence[EngineNode]) -> EngineNode | None:
    """The member that runs slurmctld and is the login node, which no scale-down takes: the first node of
    a cluster on a host pool (it has no jumphost). None where the controller is not a member."""
    if cluster.host_pool_id is None or not members:
        return None
    return min(members, key=lambda n: n.index)


def choose(cluster: Cluster, members: Sequence[EngineNode], count: int, jobs_on: Mapping[str, Sequence[Job]]
           ) -> list[EngineNode]:
    """The `count` members a scale-down removes: idle first, then the newest (highest index); never the
    cluster's controller."""
    if count <= 0:
        return []
    kept = controller(cluster, members)
    candidates = [n for n in members if n is not kept]
    return sorted(candidates, key=lambda n: (bool(jobs_on.get(n.name)), -n.index))[:count]


def running_jobs(session: Session, driver: ProvisioningDriver, cluster: Cluster, now: dt.datetime
                 ) -> dict[str, list[Job]] | None:
    """The jobs holding each member node, from the driver's workload source (None: it has none, or the
    cluster runs no Slurm)."""
    source = workload_of(driver)
    if source is None or cluster.orchestrator != "slurm":
        return None
    runs = node_views.node_runs(session, cluster.id)
    jobs = source.cluster_jobs(session, cluster.name, runs, now, cluster_id=cluster.id)
    found: dict[str, list[Job]] = {}
    for job in jobs:
        if job.holds_nodes():
            for name in node_names(job.nodes):
                found.setdefault(name, []).append(job)
    return found


def mark(node: EngineNode, cluster: Cluster, now: dt.datetime, reason: str, *, settled: bool = True) -> None:
    """Mark a member as leaving (in the caller's transaction). `settled` False: a place-holder the next
    pass may swap for an idle member (the API's transaction does not read the scheduler)."""
    grace = dt.timedelta(minutes=cluster.scale_down_grace_minutes)
    node.applied_config = {**(node.applied_config or {}), LEAVING: {
        "since": _iso(now), "until": _iso(now + grace), "was_drained": bool(node.drained), "reason": reason,
        "requeue": None, "settled": settled}}
    node.updated_at = now


def unmark(node: EngineNode, now: dt.datetime) -> None:
    """A leaving member stays after all (its drain undone unless it was drained before)."""
    node.drained = bool(node.applied_config[LEAVING].get("was_drained"))
    node.applied_config = {k: v for k, v in node.applied_config.items() if k != LEAVING}
    node.updated_at = now


def settled(node: EngineNode) -> bool:
    return leaving(node) and bool(node.applied_config[LEAVING].get("settled", True))


def request(cluster: Cluster, staying_members: Sequence[EngineNode], now: dt.datetime) -> None:
    """A lower node_count (the API's transaction): mark the newest members as leaving, unsettled; the
    next pass reads the scheduler and swaps a busy one for an idle member where it can."""
    for node in choose(cluster, staying_members, len(staying_members) - cluster.node_count, {}):
        mark(node, cluster, now, "scale-down", settled=False)


def keep(members: Sequence[EngineNode], count: int, now: dt.datetime) -> int:
    """A scale-up while nodes are leaving: keep up to `count` of them (the busiest, the ones chosen last,
    first: they lose least), undoing the drain the scale-down made; returns how many were kept."""
    going = sorted((n for n in members if n.active_name is not None and leaving(n)),
                   key=lambda n: str(n.applied_config[LEAVING]["since"]), reverse=True)
    kept = 0
    for node in going[:max(0, count)]:
        mark_ = node.applied_config[LEAVING]
        if mark_.get("requeue"):
            continue  # its jobs are being requeued already: let it go
        unmark(node, now)
        kept += 1
    return kept


@dataclass
class Pass:
    """What the reconciler lends a scale-down step: its transaction, driver, clock and how it submits
    and records driver operations (so steps are recorded like every other operation)."""

    session: Session
    driver: ProvisioningDriver
    now: dt.datetime
    poll: dt.timedelta  # how often a draining node's jobs are read again
    due: list[dt.datetime]
    submit: Callable[[Cluster, EngineNode, OperationRequest, bool], Operation]
    record: Record


def advance(step: Pass, cluster: Cluster) -> list[tuple[EngineNode, str]]:
    """One pass of the cluster's scale-down: settle which nodes go (idle first, then the newest) and
    return the leaving nodes that may be released now, each with the reason (idle, its jobs ended, or
    requeued after the grace). Busy ones are drained and looked at again later."""
    members = [n for n in live_nodes(step.session, cluster.id) if n.active_name is not None]
    going = [n for n in members if leaving(n)]
    # More members than node_count and none marked (a replacement placed for a node a scale-down had
    # marked): choose again. A spot cluster's stand-ins are spot.py's to release, not a scale-down.
    excess = 0 if spot.uses_spot(cluster) else len(members) - len(going) - cluster.node_count
    if not going and excess <= 0:
        return []
    try:
        known = running_jobs(step.session, step.driver, cluster, step.now) or {}
    except Exception as error:  # the scheduler did not answer: nothing leaves unseen, look again soon
        log.warning("engine.scale_down_jobs_unread", cluster_id=cluster.id, error=repr(error))
        step.due.append(step.now + step.poll)
        return []
    unsettled = [n for n in going if not settled(n)]
    if unsettled:
        chosen = choose(cluster, [*staying(members), *unsettled], len(unsettled), known)
        for node in unsettled:
            if node not in chosen:
                unmark(node, step.now)
        for node in chosen:
            if node in unsettled:
                node.applied_config = {**node.applied_config,
                                       LEAVING: {**node.applied_config[LEAVING], "settled": True}}
            else:
                mark(node, cluster, step.now, "scale-down")
    for node in choose(cluster, staying(members), excess, known):
        mark(node, cluster, step.now, "scale-down")
    going = [n for n in members if leaving(n)]
    out: list[tuple[EngineNode, str]] = []
    for node in going:
        jobs = known.get(node.name, []) if node.stage == NodeStage.READY else []
        done = _wait_or_requeue(step, cluster, node, jobs)
        if done is not None:
            out.append((node, done))
    return out


def _wait_or_requeue(step: Pass, cluster: Cluster, node: EngineNode, jobs: Sequence[Job]) -> str | None:
    """The release reason once `node` may go, else None (drained and waiting, or requeueing)."""
    mark_: dict[str, Any] = dict(node.applied_config[LEAVING])
    token = mark_.get("requeue")
    if not jobs and token is None:
        waited = node.drained and not mark_.get("was_drained")
        return f"removed by a scale-down ({'its jobs ended' if waited else 'no job ran on it'})"
    since = aware(dt.datetime.fromisoformat(str(mark_["since"])))
    assert since is not None
    until = since + dt.timedelta(minutes=cluster.scale_down_grace_minutes)  # a changed grace counts at once
    if not node.drained:
        node.drained = True  # Slurm DRAIN: no new job lands on it; the pass carries it to the scheduler
        ids = ", ".join(str(j.job_id) for j in jobs)
        step.session.add(PhaseRecord(
            cluster_id=cluster.id, phase="ScaleDownDraining", at=step.now,
            detail=f"{node.name} drained for a scale-down: waiting for job(s) {ids} until {_iso(until)} "
            "(scale_down_grace_minutes), then they are requeued"))
        step.due.append(step.now)
        return None
    if token is None and step.now < until:
        step.due.append(min(until, step.now + step.poll))
        return None
    if token is None and not node.applied_config.get("drained"):
        step.due.append(step.now + step.poll)  # requeue only once the scheduler has the DRAIN (no job back)
        return None
    if token is None:
        node.op_seq += 1
        token = f"{node.id}/{OpKind.NODE_REQUEUE}/{node.op_seq}"
        mark_["requeue"], mark_["jobs"] = token, sorted(j.job_id for j in jobs)
        node.applied_config = {**node.applied_config, LEAVING: mark_}
        new = True
    else:
        new = False
    request = OperationRequest(token, OpKind.NODE_REQUEUE, cluster.name, node.name, node.op_seq,
                               cluster_id=cluster.id, node_id=node.id)
    op = step.submit(cluster, node, request, new)
    if not op.done(step.now):
        if op.ready_at is not None:
            step.due.append(op.ready_at)
        return None
    step.record(op)
    if not op.succeeded:  # the scheduler did not take them back: never release over running jobs
        mark_["requeue"] = None
        node.applied_config = {**node.applied_config, LEAVING: mark_}
        node.status_reason = f"scale-down: requeueing its jobs failed ({op.reason}); retried"
        step.due.append(step.now + REQUEUE_RETRY)
        return None
    ids = ", ".join(str(j) for j in mark_.get("jobs") or []) or "none left"
    return f"removed by a scale-down after scale_down_grace_minutes: job(s) requeued ({ids})"


@dataclass(frozen=True)
class PreviewNode:
    name: str
    index: int
    jobs: tuple[Job, ...]  # running on it: drained, then requeued after the grace if still running
    leaving: bool  # already chosen by an earlier scale-down


@dataclass(frozen=True)
class Preview:
    node_count: int
    nodes: tuple[PreviewNode, ...]
    workload_known: bool  # False: the driver cannot read jobs (newest nodes go first, jobs unknown)
    grace_minutes: int


def preview(session: Session, driver: ProvisioningDriver, cluster: Cluster, node_count: int,
            now: dt.datetime) -> Preview:
    """Which nodes a scale-down to `node_count` would remove and the jobs running on each (read-only):
    the ones already draining first, then idle members, then the newest."""
    members = [n for n in live_nodes(session, cluster.id) if n.active_name is not None]
    draining = sorted((n for n in members if settled(n)),
                      key=lambda n: str(n.applied_config[LEAVING]["since"]))
    undecided = [n for n in members if not settled(n)]
    readable = workload_of(driver) is not None and cluster.orchestrator == "slurm"
    known = (running_jobs(session, driver, cluster, now) or {}) if len(members) > node_count else {}
    kept_back = max(0, node_count - len(undecided))  # a scale-up keeps draining nodes first
    going = [*draining[: max(0, len(draining) - kept_back)],
             *choose(cluster, undecided, len(undecided) - node_count, known)]
    return Preview(
        node_count=node_count,
        nodes=tuple(PreviewNode(n.name, n.index, tuple(known.get(n.name, [])), settled(n)) for n in going),
        workload_known=readable, grace_minutes=cluster.scale_down_grace_minutes)


def _iso(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).isoformat()


def summary(cluster_name: str, found: Preview) -> str:
    """One sentence on a preview, for people (the provider's plan warning, the CLI)."""
    if not found.nodes:
        return f"Scaling {cluster_name} to {found.node_count} node(s) removes no node."
    parts = []
    for node in found.nodes:
        if node.jobs:
            jobs = ", ".join(f"{j.job_id} ({j.name}, {j.user})" for j in node.jobs)
            parts.append(f"{node.name} (running job(s) {jobs})")
        else:
            parts.append(f"{node.name} ({'idle' if found.workload_known else 'jobs unknown'})")
    text = f"Scaling {cluster_name} to {found.node_count} node(s) removes {', '.join(parts)}."
    if any(node.jobs for node in found.nodes):
        grace = found.grace_minutes
        text += (" Nodes with running jobs are drained; jobs still running after "
                 f"scale_down_grace_minutes ({grace}) are requeued" if grace else
                 " Nodes with running jobs are drained and their jobs requeued at once "
                 "(scale_down_grace_minutes = 0)")
        text += " (they restart on the remaining nodes)."
    elif not found.workload_known:
        text += " The driver cannot read this cluster's jobs: the newest nodes go."
    return text
