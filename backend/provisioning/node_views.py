"""Day-2 read model of a cluster's nodes: health, the orchestrator's view, and what the node reports
(GPU readings, XID events and link state in the node agent's field names, from the driver's telemetry).

Health and its rules are `node_health`'s: a RUNNING node is degraded when its reading now says so, or
when the metrics sampler last recorded it so (`EngineNode.degraded_reason`).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.domain.lifecycle import NodeStage
from backend.provisioning import node_health, spot
from backend.provisioning.driver import (
    Job,
    NodeRun,
    NodeTelemetry,
    ProvisioningDriver,
    TelemetryTarget,
    node_names,
    telemetry_of,
)
from backend.provisioning.node_health import HEALTH_STATES, degraded_reason
from backend.provisioning.state import aware
from backend.store.engine_models import EngineNode, NodeTransition
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
    """The member nodes as the scheduler sees them: since when each is up, when it failed."""
    nodes = members(session, cluster_id)
    latest = dict(session.execute(
        select(NodeTransition.node_id, func.max(NodeTransition.at))
        .where(NodeTransition.cluster_id == cluster_id, NodeTransition.to_status == "RUNNING")
        .group_by(NodeTransition.node_id)).all())
    failed = dict(session.execute(
        select(NodeTransition.node_id, func.max(NodeTransition.at))
        .where(NodeTransition.cluster_id == cluster_id, NodeTransition.to_status == "FAILED")
        .group_by(NodeTransition.node_id)).all())
    runs = []
    for node in nodes:
        up = node.stage == NodeStage.READY or node.stage == NodeStage.FAILED
        runs.append(NodeRun(name=node.name, index=node.index, attempt=node.attempt, gpu_count=node.gpu_count,
                            up_since=aware(latest.get(node.id)) if up else None,
                            failed_at=aware(failed.get(node.id)) if node.stage == NodeStage.FAILED else None,
                            drained=node.drained,
                            replaced_failure=aware(failed.get(node.repair_of)) if node.repair_of else None))
    return runs


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
