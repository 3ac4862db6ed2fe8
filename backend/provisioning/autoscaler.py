"""Autoscaling: the engine moves an autoscaled Slurm cluster's node_count between `min_nodes` and
`max_nodes` from its job queue (real `squeue` under the local driver, the modelled workload under the
simulated one).

Rules, checked every `autoscale_interval_seconds` for each RUNNING autoscaled cluster whose nodes are
all up (a scale under way is waited for):
- scale up when jobs wait for nodes (PENDING, not yet placed, reason Resources or Priority): by the
  nodes they ask for beyond the idle ones, bounded by max_nodes and the free capacity of the cluster's
  fabric;
- else scale down the nodes with no job for `scale_down_idle_minutes` (the longest idle first), never
  below min_nodes and never a node running a job: exactly those nodes go, not the last ones, through
  the same path as a user's scale-down (backend.provisioning.scale_down: a node a job landed on since
  the decision is drained and given the cluster's scale_down_grace_minutes).
Every decision is an audit event (`cluster.autoscaled`) with its reason.

For an elastic cluster (a driver that reads Slurm's power-saving requests, `power_requests`;
backend.provisioning.power_saving) Slurm's requests decide instead: names slurmctld resumed for a job
(ResumeProgram) are added, within max_nodes, quota and capacity; members it powered down
(SuspendProgram, after the same idle time) are removed, down to min_nodes, through the same scale-down
path. The squeue rules above remain for other clusters and drivers without the capability.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.domain.catalog import Catalog
from backend.domain.quotas import QuotaExceeded
from backend.fabric.layout import hostlist
from backend.provisioning import allocator
from backend.provisioning.driver import (
    Job,
    NodeRun,
    PowerRequests,
    ProvisioningDriver,
    node_names,
    power_requests_of,
)
from backend.provisioning.engine import request_reconcile
from backend.provisioning.scale_down import leaving
from backend.provisioning.state import aware, live_nodes, wake
from backend.store.audit_log import add_event
from backend.store.engine_models import EngineCluster, PhaseRecord
from backend.store.models import Cluster


class QuotaAdmission(Protocol):
    """Quota admission of a scale-up (`backend.services.quotas.admit`): raises QuotaExceeded past a quota,
    else holds the project's quota lock until commit. A service the engine calls: the runtime installs
    it (`use_quota_admission`), as provisioning sits below the services."""

    def __call__(self, *, session: Session, catalog: Catalog, project_id: str, spec: Mapping[str, Any],
                 current: Mapping[str, Any] | None = None) -> None: ...


def _no_quota_admission(**_: Any) -> None:
    raise RuntimeError("the autoscaler has no quota admission installed (backend.runtime installs "
                       "backend.services.quotas.admit when the process starts)")


_admit_quota: QuotaAdmission = _no_quota_admission


def use_quota_admission(admit: QuotaAdmission) -> None:
    """Install the quota admission scale-ups go through (the runtime does, once at start)."""
    global _admit_quota
    _admit_quota = admit

ACTOR = "engine"
# Slurm's reasons for a job that would run if the cluster had more (free) nodes.
WAITING_FOR_NODES = ("Resources", "Priority", "Nodes_required_for_job_are_DOWN,_DRAINED_or_reserved")


@dataclass(frozen=True)
class Range:
    min_nodes: int
    max_nodes: int
    idle: dt.timedelta  # scale_down_idle_minutes, in the configured unit (minutes; seconds in tests)


@dataclass(frozen=True)
class Decision:
    node_count: int  # the new node_count
    remove: tuple[str, ...]  # on a scale-down: exactly the nodes released
    reason: str
    waiting: bool = False  # nodes are wanted but none can be added now: only said (`note_waiting`)

    def action(self, before: int) -> str:
        return "scale_up" if self.node_count > before else "scale_down"


def idle_since(runs: Sequence[NodeRun], jobs: Sequence[Job]) -> dict[str, dt.datetime]:
    """Since when each up node without a running job has had none (its last job's end, or its start)."""
    busy = set().union(*(node_names(j.nodes) for j in jobs if j.holds_nodes()))
    since: dict[str, dt.datetime] = {}
    for run in runs:
        if run.up_since is None or run.failed_at is not None or run.name in busy:
            continue
        moments = [run.up_since, *(j.ended_at for j in jobs if run.name in node_names(j.nodes))]
        since[run.name] = max(t for t in map(aware, moments) if t is not None)
    return since


def waiting_nodes(jobs: Sequence[Job]) -> tuple[int, int]:
    """(jobs waiting for nodes, the nodes they ask for)."""
    waiting = [j for j in jobs if j.state == "PENDING" and not j.nodes and j.reason in WAITING_FOR_NODES]
    return len(waiting), sum(max(1, j.node_count) for j in waiting)


def _growth(scaling: Range, count: int, wanted: int, free_nodes: int) -> tuple[int, str] | None:
    """How many of the `wanted` nodes can be added (max_nodes, free capacity), and what capped it."""
    grow = min(wanted, scaling.max_nodes - count, free_nodes)
    if grow <= 0:
        return None
    bound = ""
    if grow < wanted:
        bound = (f"; capped at max_nodes {scaling.max_nodes}" if count + grow == scaling.max_nodes
                 else f"; capped by capacity ({free_nodes} free nodes on the fabric)")
    return grow, bound


def _blocked(scaling: Range, count: int) -> str:
    """Why no node can be added (`_growth` found none)."""
    if count >= scaling.max_nodes:
        return f"at max_nodes {scaling.max_nodes}"
    return "no free node of its instance type on the cluster's fabric"


def decide_power(scaling: Range, runs: Sequence[NodeRun], requests: PowerRequests, *,
                 free_nodes: int) -> Decision | None:
    """Slurm's own requests: the names it resumed for jobs, the members it powered down."""
    count = len(runs)
    if requests.resume:
        growth = _growth(scaling, count, len(requests.resume), free_nodes)
        if growth is None:  # never a scale-down meanwhile: Slurm still wants these nodes
            return Decision(count, (), f"Slurm resumed {hostlist(requests.resume)} for jobs pending for lack "
                            f"of nodes; none can be added now ({_blocked(scaling, count)}): the jobs wait, "
                            "and are requeued if the nodes are not up within Slurm's ResumeTimeout",
                            waiting=True)
        grow, bound = growth
        return Decision(count + grow, (), f"Slurm resumed {hostlist(requests.resume)} for jobs pending for "
                        f"lack of nodes (ResumeProgram): adding {grow}{bound}")
    remove = tuple(sorted(requests.suspend))[: max(0, count - scaling.min_nodes)]
    if not remove:
        return None
    return Decision(count - len(remove), remove, f"Slurm powered down {', '.join(remove)} after "
                    f"{_span(scaling.idle)} without a job (SuspendProgram); min_nodes {scaling.min_nodes}")


def decide(scaling: Range, runs: Sequence[NodeRun], jobs: Sequence[Job], *, free_nodes: int,
           now: dt.datetime, power: PowerRequests | None = None) -> Decision | None:
    """What the autoscaler does about one cluster now (None: nothing). `power`: Slurm's pending
    power-saving requests of an elastic cluster (then they alone decide), None for any other."""
    count = len(runs)
    if any(r.up_since is None and r.failed_at is None for r in runs):
        return None  # nodes still coming up (a scale under way): Slurm cannot place jobs on them yet
    if power is not None:
        # An elastic cluster: Slurm decides which nodes it needs and which it gives back. The queue
        # rules would race it (a node the queue rule removes while Slurm powers down another one, a
        # node added that Slurm did not resume).
        return decide_power(scaling, runs, power, free_nodes=free_nodes)
    idle = idle_since(runs, jobs)
    waiting_jobs, asked = waiting_nodes(jobs)
    if waiting_jobs:
        growth = _growth(scaling, count, asked - len(idle), free_nodes)
        if growth is None and asked > len(idle):
            return Decision(count, (), f"{waiting_jobs} job(s) pending for lack of nodes ask for {asked} "
                            f"node(s), {len(idle)} idle; none can be added now ({_blocked(scaling, count)})",
                            waiting=True)
        if growth is None:
            return None
        grow, bound = growth
        return Decision(count + grow, (), f"{waiting_jobs} job(s) pending for lack of nodes ask for "
                        f"{asked} node(s), {len(idle)} idle: adding {grow}{bound}")
    if count <= scaling.min_nodes:
        return None
    due = sorted((since, name) for name, since in idle.items() if now - since >= scaling.idle)
    remove = tuple(sorted(name for _, name in due[: count - scaling.min_nodes]))
    if not remove:
        return None
    oldest = due[0][0].astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return Decision(count - len(remove), remove, f"{', '.join(remove)} had no job for at least "
                    f"{_span(scaling.idle)} (idle since {oldest} or later), no job pending; min_nodes "
                    f"{scaling.min_nodes}")


def _span(idle: dt.timedelta) -> str:
    seconds = idle.total_seconds()
    return f"{seconds / 60:g} minutes" if seconds % 60 == 0 else f"{seconds:g} seconds"


def power_requests(driver: ProvisioningDriver, session: Session, cluster_id: str,
                   runs: Sequence[NodeRun]) -> PowerRequests | None:
    """Slurm's pending power-saving requests for the cluster, from a driver that reads them (else None)."""
    source = power_requests_of(driver)
    return None if source is None else source.power_requests(session, cluster_id, [r.name for r in runs])


def range_of(cluster: Cluster, idle_unit: dt.timedelta) -> Range | None:
    if cluster.autoscaling_min_nodes is None or cluster.autoscaling_max_nodes is None:
        return None
    return Range(cluster.autoscaling_min_nodes, cluster.autoscaling_max_nodes,
                 idle_unit * (cluster.autoscaling_idle_minutes or 0))


def free_nodes(session: Session, catalog: Catalog, cluster: Cluster, now: dt.datetime) -> int:
    """Free nodes of the cluster's instance type on its fabric (a cluster grows on its own fabric)."""
    state = session.get(EngineCluster, cluster.id)
    if state is None:
        return 0
    free = allocator.free_by_fabric(session, catalog, cluster.region, cluster.instance_type,
                                    cluster.interconnect, now=now)
    return free.get(state.fabric, 0)


def within_quota(session: Session, catalog: Catalog, cluster: Cluster, decision: Decision) -> Decision:
    """The scale-up cut to what the project's quotas allow (as a user's scale-up would be refused past
    them); the quota lock, once taken, is held until the decision commits."""
    spec = {"instance_type": cluster.instance_type, "region": cluster.region,
            "node_count": cluster.node_count,
            "billing": {"type": cluster.billing_type, "duration_days": cluster.billing_duration_days}}
    quota = None
    for count in range(decision.node_count, cluster.node_count, -1):
        try:
            _admit_quota(session=session, catalog=catalog, project_id=cluster.project_id,
                         spec={**spec, "node_count": count}, current=spec)
        except QuotaExceeded as refused:
            quota = refused.extra.get("quota")
            continue
        capped = "" if quota is None else f"; capped by quota {quota}"
        return Decision(count, decision.remove, decision.reason + capped)
    return Decision(cluster.node_count, decision.remove,
                    f"{decision.reason}, but the project's quota {quota} leaves no room", waiting=True)


WAITING_PHASE = "AutoscaleWaiting"


def note_waiting(session: Session, cluster_id: str, decision: Decision, now: dt.datetime) -> bool:
    """Say in the cluster's phase history why wanted nodes are not added (once per new reason, so a
    cluster waiting for hours has one record, not one per round); False when it was said already."""
    last = session.scalars(select(PhaseRecord).where(PhaseRecord.cluster_id == cluster_id)
                           .order_by(PhaseRecord.at.desc(), PhaseRecord.id.desc()).limit(1)).first()
    if last is not None and (last.phase, last.detail) == (WAITING_PHASE, decision.reason):
        return False
    session.add(PhaseRecord(cluster_id=cluster_id, phase=WAITING_PHASE, detail=decision.reason, at=now))
    return True


def apply(session: Session, catalog: Catalog, cluster: Cluster, decision: Decision, *, members: Sequence[str],
          now: dt.datetime) -> bool:
    """Carry out a decision made on `members` (the node names it saw): False, and nothing done, when the
    cluster changed meanwhile (membership, autoscaling turned off, deletion; the next round decides
    again)."""
    wake(session, cluster.id, now)  # first: serialises with passes, user changes and other workers
    session.refresh(cluster)
    nodes = [n for n in live_nodes(session, cluster.id) if n.active_name is not None]
    current = sorted(n.name for n in nodes)
    if (current != sorted(members) or any(leaving(n) for n in nodes)  # a scale-down still under way
            or cluster.deletion_requested_at is not None or cluster.autoscaling_min_nodes is None
            or cluster.status != "RUNNING"):
        session.rollback()
        return False
    before = cluster.node_count
    if decision.node_count > before:
        decision = within_quota(session, catalog, cluster, decision)
        if decision.node_count <= before:
            session.rollback()  # the project's quotas leave no room: said once, the next round looks again
            if note_waiting(session, cluster.id, decision, now):
                session.commit()
            return False
    cluster.node_count = decision.node_count
    cluster.generation += 1
    cluster.updated_at = now
    request_reconcile(session, cluster.id, remove_node_names=decision.remove, catalog=catalog, now=now)
    action = decision.action(before)
    session.add(PhaseRecord(cluster_id=cluster.id, phase="Autoscaled",
                            detail=f"{before} -> {decision.node_count}: {decision.reason}", at=now))
    details: dict[str, Any] = {"action": action, "from_node_count": before,
                               "to_node_count": decision.node_count, "reason": decision.reason}
    if decision.remove:
        details["removed_nodes"] = list(decision.remove)
    add_event(session, project_id=cluster.project_id, actor=ACTOR, action="cluster.autoscaled",
              resource_type="cluster", resource_id=cluster.id, at=now, details=details)
    return True
