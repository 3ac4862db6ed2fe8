"""Day-2 read model of a cluster's nodes: health, the orchestrator's view, and what the node reports
(GPU readings, XID events and link state in the node agent's field names, from the driver's telemetry).

Health and its rules are `node_health`'s: a RUNNING node is degraded when its reading now says so, or
when the metrics sampler last recorded it so (`EngineNode.degraded_reason`).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.domain.lifecycle import NodeStage, NodeStatus
from backend.provisioning import node_health, spot
from backend.provisioning.driver import (
    Job,
    NodeRun,
    NodeTelemetry,
    Outage,
    ProvisioningDriver,
    TelemetryTarget,
    node_names,
    telemetry_of,
)
from backend.provisioning.node_health import HEALTH_STATES, degraded_reason
from backend.provisioning.state import aware
from backend.store.engine_models import EngineNode, NodeEvent, NodeTransition
from backend.store.models import Cluster

__all__ = ["HEALTH_STATES", "degraded_reason", "health", "health_reason", "node_views"]
RECENT_XID_EVENTS = 20
_POWERED_OFF = (NodeStage.POWERING_OFF, NodeStage.POWERED_OFF)


def members(session: Session, cluster_id: str) -> list[EngineNode]:
    return list(session.scalars(
        select(EngineNode).where(EngineNode.cluster_id == cluster_id, EngineNode.active_name.is_not(None))
        .order_by(EngineNode.index)))


def _degraded(node: EngineNode, telemetry: NodeTelemetry | None, now: dt.datetime) -> str | None:
    return degraded_reason(telemetry, now) or node.degraded_reason


def health(node: EngineNode, telemetry: NodeTelemetry | None, now: dt.datetime) -> str:
    return node_health.health(node, _degraded(node, telemetry, now))


def health_reason(node: EngineNode, telemetry: NodeTelemetry | None, now: dt.datetime) -> str | None:
    """Why the node is not healthy, in words (None when it is)."""
    return node_health.health_reason(node, _degraded(node, telemetry, now))


def orchestrator_state(orchestrator: str, node: EngineNode, busy_gpus: int | None) -> str | None:
    """Slurm's node state (IDLE, ALLOCATED, MIXED, DRAIN, DOWN, UNKNOWN) or Kubernetes' (Ready,
    NotReady, SchedulingDisabled); None without an orchestrator."""
    up = node.stage == NodeStage.READY
    if orchestrator == "kubernetes":
        if not up:
            return "NotReady"
        return "SchedulingDisabled" if node.drained else "Ready"
    if orchestrator != "slurm":
        return None
    if node.stage == NodeStage.FAILED or node.stage in _POWERED_OFF:
        return "DOWN"
    if not up:
        return "UNKNOWN"
    if node.drained:
        return "DRAIN"
    if not busy_gpus:
        return "IDLE"
    return "ALLOCATED" if busy_gpus >= node.gpu_count else "MIXED"


def scheduler_reason(node: EngineNode, telemetry: NodeTelemetry | None) -> str | None:
    """Why the scheduler keeps work off a drained or down node: its own reason where the driver reads it
    (Slurm's `Reason=`), else that the engine drained it; None for a node in service."""
    out_of_service = node.drained or node.stage == NodeStage.FAILED
    if telemetry is not None and telemetry.orchestrator_reason and out_of_service:
        return telemetry.orchestrator_reason
    return "drained: no new work starts on it" if node.drained else None


def telemetry_target(cluster: Cluster, node: EngineNode) -> TelemetryTarget:
    return TelemetryTarget(cluster_name=cluster.name, node_name=node.name, instance_id=node.id,
                           attempt=node.attempt, instance_type=node.instance_type, gpu_count=node.gpu_count,
                           watch_token=node.watch_token, created_at=node.created_at)


def node_views(session: Session, driver: ProvisioningDriver, cluster: Cluster, now: dt.datetime
               ) -> list[dict[str, Any]]:
    """Every member node with its health, orchestrator state, GPUs and recent XID events at `now`."""
    role = "worker" if cluster.node_count > 1 else "standalone"
    source = telemetry_of(driver)
    nodes = members(session, cluster.id)
    # Nodes that are up or failed have an agent to ask (a failed one still shows its XID events).
    reporting = [n for n in nodes if n.stage in (NodeStage.READY, NodeStage.FAILED)]
    readings = {}
    if source is not None and reporting:
        answers = source.nodes_telemetry(session, [telemetry_target(cluster, n) for n in reporting], now)
        readings = dict(zip((n.id for n in reporting), answers, strict=True))
    views = []
    for node in nodes:
        telemetry = readings.get(node.id)
        gpus = None if telemetry is None else telemetry.gpus
        busy = None if gpus is None else sum(1 for g in gpus if (g.utilization_pct or 0) > 0)
        xids = [] if telemetry is None else telemetry.xid_events[-RECENT_XID_EVENTS:]
        views.append({
            "name": node.name, "role": role, "index": node.index, "instance_id": node.id,
            "status": node.status, "status_reason": node.status_reason,
            "health": health(node, telemetry, now),
            "health_reason": health_reason(node, telemetry, now) or scheduler_reason(node, telemetry),
            "orchestrator_state": telemetry.orchestrator_state if (
                telemetry is not None and telemetry.orchestrator_state is not None
                and node.stage == NodeStage.READY) else orchestrator_state(cluster.orchestrator, node, busy),
            "drained": node.drained, "pending_action": node.pending_action,
            "capacity_type": node.capacity_type,
            "preemption_at": _preemption_at(node),
            "gpus": None if gpus is None else [dict(vars(g)) for g in gpus],  # flat: no deep copy
            "gpus_unavailable_reason": _why_no_gpus(source, telemetry, node),
            "xid_events": [dict(vars(e)) for e in xids],
            "host": None if telemetry is None else telemetry.host,
            "links": None if telemetry is None else telemetry.links,
            "read_at": None if telemetry is None else telemetry.read_at,
        })
    return views


def _preemption_at(node: EngineNode) -> str | None:
    """When the market reclaims a spot node that got its notice (None for any other node)."""
    moment = node.preempt_at
    return None if moment is None or node.preempt_notice_at is None else spot.iso(moment)


def matches(view: dict[str, Any], health_filter: str | None) -> bool:
    """`?health=`: failed and healthy by health state, xid: nodes with recent XID events."""
    if health_filter in ("failed", "healthy"):
        return bool(view["health"] == health_filter)
    if health_filter == "xid":
        return bool(view["xid_events"])
    return True


def _why_no_gpus(source: object, telemetry: NodeTelemetry | None, node: EngineNode) -> str | None:
    if source is None:
        return "the driver reports no node telemetry"
    if telemetry is None:
        return f"node is {node.status} ({node.stage}): no agent reading"
    return telemetry.gpus_unavailable_reason


def node_runs(session: Session, cluster_id: str) -> list[NodeRun]:
    """The member nodes as the scheduler sees them: since when each is up, when it failed, and when its
    machine was off (paused) since it first ran; a replacement, when the machine it replaces went."""
    nodes = members(session, cluster_id)
    history = _status_history(session, cluster_id)
    runs = []
    for node in nodes:
        seen, replaced = history.get(node.id, []), history.get(node.repair_of or "", [])
        ups = [at for status, at, _ in seen if status == NodeStatus.RUNNING]
        failures = [at for status, at, _ in seen if status == NodeStatus.FAILED]
        up = node.stage == NodeStage.READY or node.stage == NodeStage.FAILED
        runs.append(NodeRun(name=node.name, index=node.index, attempt=node.attempt, gpu_count=node.gpu_count,
                            up_since=ups[-1] if up and ups else None,
                            failed_at=failures[-1] if node.stage == NodeStage.FAILED and failures else None,
                            drained=node.drained,
                            replaced_failure=_taken_out(replaced), replaced_since=_first_up(replaced),
                            first_up=_first_up(seen), outages=_outages(seen)))
    return runs


def departed_runs(session: Session, cluster_id: str, since: dt.datetime) -> list[tuple[EngineNode, NodeRun]]:
    """Machines released since `since` (a scale-down, a reclaimed spot node) that had run, under a name
    no member has now (a replaced machine is its replacement's `replaced_failure`), as the scheduler saw
    them: `failed_at` is when they left (their release), the jobs still on them requeued then."""
    history = _status_history(session, cluster_id)
    left = {node_id: at for node_id, seen in history.items()
            for status, at, _ in seen[-1:] if status == NodeStatus.DESTROYING and at >= since}
    if not left:
        return []
    current = {n.name for n in members(session, cluster_id)}
    gone = session.scalars(select(EngineNode).where(EngineNode.id.in_(left), EngineNode.active_name.is_(None))
                           .order_by(EngineNode.index, EngineNode.created_at)).all()
    found = []
    for node in gone:
        seen = history[node.id]
        ups = [at for status, at, _ in seen if status == NodeStatus.RUNNING]
        if node.name in current or not ups:
            continue
        failures = [at for status, at, _ in seen if status == NodeStatus.FAILED]
        found.append((node, NodeRun(
            name=node.name, index=node.index, attempt=node.attempt, gpu_count=node.gpu_count,
            up_since=ups[-1], failed_at=min([left[node.id], *failures[-1:]]), drained=node.drained,
            first_up=ups[0], outages=_outages(seen))))
    return found


# A node's history as the scheduler notices it, oldest first: (status, since, reason), where a restart of
# its machine (node history's `restart_started`) reads as the status RESTARTED.
_Seen = list[tuple[str, dt.datetime, str | None]]
_SCHEDULER_STATUSES = (NodeStatus.RUNNING, NodeStatus.PAUSED, NodeStatus.FAILED, NodeStatus.DESTROYING)
RESTARTED = "RESTARTED"


def _status_history(session: Session, cluster_id: str) -> dict[str, _Seen]:
    """Each node's transitions into the statuses the scheduler notices and its restarts, oldest first."""
    rows: list[tuple[str | None, str, dt.datetime, str | None]] = [
        (node_id, status, at, reason) for node_id, status, at, reason in session.execute(
            select(NodeTransition.node_id, NodeTransition.to_status, NodeTransition.at, NodeTransition.reason)
            .where(NodeTransition.cluster_id == cluster_id,
                   NodeTransition.to_status.in_([str(s) for s in _SCHEDULER_STATUSES]))
            .order_by(NodeTransition.at, NodeTransition.id))]
    rows += [(node_id, RESTARTED, at, None) for node_id, at in session.execute(
        select(NodeEvent.node_id, NodeEvent.at).where(NodeEvent.cluster_id == cluster_id,
                                                      NodeEvent.kind == "restart_started"))]
    history: dict[str, _Seen] = {}
    # A restart recorded in the pass that brought the node back sorts before that RUNNING (same instant).
    rows.sort(key=lambda row: (aware(row[2]) or row[2], row[1] != RESTARTED))
    for node_id, status, at, reason in rows:
        moment = aware(at)
        if node_id is not None and moment is not None:
            history.setdefault(node_id, []).append((status, moment, reason))
    return history


def _outages(seen: _Seen) -> tuple[Outage, ...]:
    """The spans the machine was off after it first ran, each until it ran again: powered off by a
    pause, restarted, or failed and then restarted (a node failed now is `failed_at`, not an outage)."""
    spans: list[Outage] = []
    ran, off_since = False, None  # the status that took it off, while it is off
    for status, at, reason in seen:
        if status == NodeStatus.RUNNING:
            ran = True
            if off_since is not None:
                spans[-1], off_since = replace(spans[-1], end=at), None
        elif ran and off_since is None and status in (NodeStatus.PAUSED, RESTARTED, NodeStatus.FAILED):
            spans.append(Outage(at, None, _down_reason(status, reason)))
            off_since = status
    if off_since == NodeStatus.FAILED:
        spans.pop()
    return tuple(spans)


def _down_reason(status: str, reason: str | None) -> str:
    """The words of a down node's Slurm reason after `gpucloud repair: ` (the local driver's)."""
    if status == NodeStatus.PAUSED:
        return f"powered off ({reason or 'paused'})"
    return "restarted" if status == RESTARTED else f"the node failed: {reason or 'fault'}"


def _first_up(seen: _Seen) -> dt.datetime | None:
    return next((at for status, at, _ in seen if status == NodeStatus.RUNNING), None)


def _taken_out(replaced: _Seen) -> dt.datetime | None:
    """When a replaced machine went out of service after it last ran: its failure, else (a repair of a
    running node, a `replace` node action) its release, when the scheduler was told to take its jobs back."""
    out = None
    for status, at, _ in replaced:
        if status == NodeStatus.RUNNING:
            out = None
        elif out is None and status in (NodeStatus.FAILED, NodeStatus.DESTROYING):
            out = at
    return out


def partitions(cluster: Cluster, runs: list[NodeRun], jobs: list[Job], gpu_type: str | None
               ) -> list[dict[str, Any]]:
    """Slurm's partition card: the one `gpu` partition of the generated slurm.conf."""
    if cluster.orchestrator != "slurm":
        return []
    total = sum(r.gpu_count for r in runs)
    usable = {r.name for r in runs if r.up_since is not None and r.failed_at is None and not r.drained}
    busy = sum(j.gpus for j in jobs if j.holds_nodes() and j.nodes and node_names(j.nodes) <= usable)
    available = sum(r.gpu_count for r in runs if r.name in usable) - busy
    return [{"name": "gpu", "nodes": len(runs), "gpu_type": gpu_type, "gpus_available": max(0, available),
             "gpus_total": total, "default_time": "01:00:00", "max_time": "7-00:00:00",
             "state": "UP" if usable else "DOWN"}]
