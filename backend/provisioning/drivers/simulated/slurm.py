"""The simulated datacenter's Slurm controller state read from the engine's records: each node's drained
spans (from the drain / resume operations the engine submitted to this driver), the modelled schedule
at a moment, and each node's Slurm state and reason as `scontrol show node` would print them.

The job table (`workload`), the GPU readings (`telemetry`) and the node states all come from the one
`workload.snapshot`, so they cannot disagree.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import replace

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from backend.provisioning.driver import NodeRun, OpKind
from backend.provisioning.drivers.simulated import workload
from backend.provisioning.drivers.simulated.telemetry import SLOT
from backend.provisioning.node_config.slurm_control import ACTION_REASON, REPAIR_REASON
from backend.store.engine_models import EngineNode, SimulatedOperation

Span = tuple[dt.datetime, dt.datetime | None]


def drains(session: Session, cluster_id: str, now: dt.datetime, departed: Sequence[EngineNode] = ()
           ) -> dict[str, list[Span]]:
    """Each member node's (and each `departed` machine's) drained spans in the modelled Slurm: from each
    drain operation to the resume after it; a drain or resume the engine has asked for but not submitted
    yet counts from `now` (the node's `drained` flag is what the engine shows)."""
    nodes = [*session.scalars(select(EngineNode).where(
        EngineNode.cluster_id == cluster_id, EngineNode.active_name.is_not(None))), *departed]
    if not nodes:
        return {}
    patterns = [SimulatedOperation.client_token.like(f"{n.id}/{kind}/%")
                for n in nodes for kind in (OpKind.NODE_DRAIN, OpKind.NODE_RESUME)]
    ops = session.scalars(select(SimulatedOperation).where(or_(*patterns))
                          .order_by(SimulatedOperation.submitted_at)).all()
    by_node: dict[str, list[SimulatedOperation]] = {}
    for op in ops:
        by_node.setdefault(op.client_token.split("/", 1)[0], []).append(op)
    found = {}
    for node in nodes:
        spans = _spans(by_node.get(node.id, []), drained=node.drained, now=now)
        if spans:
            found[node.name] = spans
    return found


def _spans(ops: Sequence[SimulatedOperation], *, drained: bool, now: dt.datetime) -> list[Span]:
    spans: list[Span] = []
    start: dt.datetime | None = None
    for op in ops:
        at = _aware(op.submitted_at)
        if op.kind == OpKind.NODE_DRAIN and start is None:
            start = at
        elif op.kind == OpKind.NODE_RESUME and start is not None:
            spans.append((start, at))
            start = None
    if start is None and drained:
        start = now
    if start is not None:
        spans.append((start, None if drained else max(start, now)))
    return spans


def _aware(at: dt.datetime) -> dt.datetime:
    return at if at.tzinfo is not None else at.replace(tzinfo=dt.UTC)


def snapshot(seed: int, session: Session, cluster_name: str, cluster_id: str, nodes: Sequence[NodeRun],
             now: dt.datetime, *, history: bool = True) -> workload.Snapshot:
    """The modelled schedule at `now` (`history`: with the last day's jobs, else what is allocated), on
    the member `nodes` and the machines that left the cluster within the replayed time."""
    gone = departed(session, cluster_id, now) if nodes else []
    spans = drains(session, cluster_id, now, [node for node, _ in gone])
    return workload.snapshot(seed, cluster_name, [*nodes, *(run for _, run in gone)], now, spans,
                             history=history)


def departed(session: Session, cluster_id: str, now: dt.datetime) -> list[tuple[EngineNode, NodeRun]]:
    """Machines that left the cluster within the replayed time (a scale-down released them): to slurmctld
    they went DOWN when their jobs were requeued (`node_requeue`, a scale-down past its grace) or, with
    none requeued, when they were released; their earlier jobs stay in its history."""
    from backend.provisioning.node_views import departed_runs  # the read model imports the drivers' types

    gone = departed_runs(session, cluster_id, now - workload.HISTORY - workload.ANCHOR_SLOTS * SLOT)
    if not gone:
        return []
    patterns = [SimulatedOperation.client_token.like(f"{node.id}/{OpKind.NODE_REQUEUE}/%")
                for node, _ in gone]
    requeued: dict[str, dt.datetime] = {}
    for op in session.scalars(select(SimulatedOperation).where(or_(*patterns))):
        node_id, at = op.client_token.split("/", 1)[0], _aware(op.submitted_at)
        requeued[node_id] = min(at, requeued.get(node_id, at))
    return [(node, replace(run, failed_at=min(d for d in (run.failed_at, requeued.get(node.id)) if d)))
            for node, run in gone]


def node_state(allocated: int, gpu_count: int, *, drained: bool, failed: bool) -> str:
    """Slurm's base state of the node (DRAIN: drained, whether or not its jobs have finished)."""
    if failed:
        return "DOWN"
    if drained:
        return "DRAIN"
    if not allocated:
        return "IDLE"
    return "ALLOCATED" if allocated >= gpu_count else "MIXED"


def node_reason(*, drained: bool, failed: bool, fault: str | None) -> str | None:
    """Slurm's Reason of a drained or down node, worded as gpucloud sets it on a real controller
    (backend/provisioning/node_config/slurm_control.py); None for a node in service."""
    if failed:
        return f"{REPAIR_REASON}: {fault or 'the node failed'}"
    return ACTION_REASON if drained else None
