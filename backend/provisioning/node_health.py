"""Node health: the rules that say a node is degraded, and the sampler's record of it on the node.

Health, from the engine's state and the node's readings: `repairing` (restart or replacement under way,
or accepted), `failed` (FAILED), `unreachable` (powered off: nothing answers), `degraded` (running, and
its readings show a hardware XID in the last hour, uncorrectable ECC errors, a GPU at 85 C or more, a
GPU without readings, or an NVLink / InfiniBand link down), else `healthy`.

The metrics sampler reads every RUNNING node's telemetry anyway; it records the degraded reason on the
node (`EngineNode.degraded_reason`), with a `degraded` / `recovered` event in the node's history
(backend/provisioning/node_history.py), and wakes the cluster when it changes, so the reconciler repairs the
node (node_repair = auto) or shows the cluster Degraded (manual), and a cluster read shows the health
without asking the nodes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

from backend.domain.lifecycle import NodeStage
from backend.provisioning import node_history
from backend.provisioning.driver import NodeTelemetry
from backend.provisioning.state import wake
from backend.store.engine_models import EngineNode

HEALTH_STATES = ("healthy", "degraded", "unreachable", "failed", "repairing")
DEGRADED_WINDOW = dt.timedelta(hours=1)
HOT_GPU_C = 85  # sustained above this an H100 / H200 throttles
_POWERED_OFF = (NodeStage.POWERING_OFF, NodeStage.POWERED_OFF)
# The bring-up stages before READY: a replacement machine in one of them is a repair under way.
_BRINGING_UP = (NodeStage.QUEUED, NodeStage.BOOTING, NodeStage.FABRIC, NodeStage.DRIVERS, NodeStage.VOLUMES,
                NodeStage.JOINING, NodeStage.ACCEPTANCE, NodeStage.ACCEPTED, NodeStage.CONTAINER)


def _recent_hardware_xid(telemetry: NodeTelemetry, now: dt.datetime) -> bool:
    since = (now - DEGRADED_WINDOW).isoformat()
    return any(e.hardware and (e.logged_at or "") >= since for e in telemetry.xid_events)


def degraded_reason(telemetry: NodeTelemetry | None, now: dt.datetime) -> str | None:
    """Why a running node's readings say it is degraded (None: they do not)."""
    if telemetry is None:
        return None
    if _recent_hardware_xid(telemetry, now):
        return "hardware XID in the last hour"
    for gpu in telemetry.gpus or ():
        if (gpu.ecc_volatile_uncorrected or 0) > 0 or (gpu.remapped_rows_uncorrectable or 0) > 0:
            return f"GPU {gpu.index}: uncorrectable ECC errors"
        if gpu.temperature_c is not None and gpu.temperature_c >= HOT_GPU_C:
            return f"GPU {gpu.index}: {gpu.temperature_c} C"
        if gpu.memory_total_mib is None and gpu.utilization_pct is None:
            return f"GPU {gpu.index}: no reading (fallen off the bus?)"
    if telemetry.links is not None:
        return telemetry.links.down_reason()
    return None


def in_repair(node: Any) -> bool:
    """A node being repaired in place: a replacement machine coming up, or a restart."""
    if node.stage == NodeStage.RESTARTING:
        return True
    return node.repair_of is not None and node.stage in _BRINGING_UP


def health(node: Any, degraded: str | None) -> str:
    """`node`: an EngineNode or a row with its stage, repair_of and pending_action; `degraded`: why its
    readings say it is degraded (None: they do not)."""
    if in_repair(node) or node.pending_action is not None:
        return "repairing"
    if node.stage == NodeStage.FAILED:
        return "failed"
    if node.stage in _POWERED_OFF:
        return "unreachable"
    if node.stage == NodeStage.READY and degraded is not None:
        return "degraded"
    return "healthy"


def health_reason(node: Any, degraded: str | None) -> str | None:
    """Why the node is not healthy, in words (None when it is)."""
    state = health(node, degraded)
    if state == "repairing":
        return f"{node.pending_action} requested" if node.pending_action else f"{node.stage}: being repaired"
    if state == "failed":
        return str(node.status_reason) if node.status_reason else None
    if state == "unreachable":
        return "powered off"
    return degraded if state == "degraded" else None


def record_degraded(session: Session, nodes: Sequence[EngineNode], readings: Sequence[NodeTelemetry],
                    now: dt.datetime) -> list[EngineNode]:
    """Record on each RUNNING node why its reading says it is degraded (or that it no longer is), as an
    event of its history too, and wake the clusters whose nodes changed; the nodes changed."""
    changed = []
    for node, reading in zip(nodes, readings, strict=True):
        reason = degraded_reason(reading, now)
        if node.stage == NodeStage.READY and reason != node.degraded_reason:
            changed.append((node, reason))
    # Lock the clusters' work items first, in one order, then write the nodes: a reconcile pass takes
    # its work item, then its nodes, so the two never wait on each other in a cycle.
    for cluster_id in sorted({node.cluster_id for node, _ in changed}):
        wake(session, cluster_id, now)
    for node, reason in changed:
        node.degraded_reason = reason
        node_history.health_changed(session, node, reason, now)
    return [node for node, _ in changed]
