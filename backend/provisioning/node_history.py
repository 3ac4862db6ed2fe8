"""Node history: what happened to each node of a cluster, kept in the database (`engine_node_events`).

One event per thing that happened, by the node's stable name (`train-1` survives a repair, which gives
it a new machine), naming the machine it was about (`node_id`, the `instance_id` of the node views),
who asked (an API key's prefix for node actions, `engine` for what the engine does by itself) and when
(the caller's clock: the engine's `now`, the API's clock). Recorded where the engine learns it:

- faults of a RUNNING node (its health watch): `xid` (with the XID code), `slurmd_down`, `unreachable`,
  `fault` (anything else); `degraded` / `recovered` from the metrics sampler's readings;
- `repair_started` (a new machine placed under the name), `repair_finished` (it runs),
  `repair_failed` (it did not come up); `restart_started`, `restart_finished`, `restart_failed`;
- node actions as accepted: `restart_requested`, `replace_requested`, `drain_requested`,
  `resume_requested` (actor: the key that asked); `released` (removed by a scale-down).

Each event but an accepted node action (whose pending action speaks for it) also becomes the node's
`status_reason` (`<what>: <detail>`) unless the node's status has a reason of its own (FAILED,
DESTROYING, PAUSED: the engine's more specific text stays), and is written to
the audit log as `node.<kind>` (resource: the cluster), except node actions, which the request that
asked for them audits already (`cluster.node_<action>`). Events are kept as long as the cluster's
engine rows (deleted with them).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from typing import Any, Literal, get_args

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.domain.lifecycle import NodeStatus
from backend.store.audit_log import add_event
from backend.store.engine_models import EngineNode, NodeEvent
from backend.store.models import Cluster

ENGINE = "engine"
NodeEventKind = Literal[
    "xid", "slurmd_down", "unreachable", "fault", "degraded", "recovered",
    "repair_started", "repair_finished", "repair_failed",
    "restart_started", "restart_finished", "restart_failed",
    "restart_requested", "replace_requested", "drain_requested", "resume_requested",
    "released",
]
EVENT_KINDS: tuple[str, ...] = get_args(NodeEventKind)
# How an event reads as the node's status_reason ("degraded: ..." is the text the reconciler clears
# once the readings are clean, as it always has).
_LABELS = {
    "xid": "hardware fault", "slurmd_down": "slurmd down", "unreachable": "unreachable", "fault": "fault",
    "degraded": "degraded", "recovered": "recovered", "repair_started": "repair started",
    "repair_finished": "repaired", "repair_failed": "repair failed", "restart_started": "restarting",
    "restart_finished": "restarted", "restart_failed": "restart failed",
    "restart_requested": "restart requested", "replace_requested": "replace requested",
    "drain_requested": "drain requested", "resume_requested": "resume requested", "released": "released",
}
# A status that explains itself: its reason (set with the transition) is kept.
_OWN_REASON = (NodeStatus.FAILED, NodeStatus.DESTROYING, NodeStatus.DESTROYED, NodeStatus.PAUSED)
_XID = re.compile(r"\bXID (\d+)")


def fault_kind(reason: str | None) -> tuple[str, int | None]:
    """The event kind of a fault the health watch reported, and its XID code where it is one."""
    text = reason or ""
    found = _XID.search(text)
    if found is not None:
        return "xid", int(found.group(1))
    if "slurmd" in text:
        return "slurmd_down", None
    if "does not answer" in text or "namespaces are gone" in text or "unreachable" in text:
        return "unreachable", None
    return "fault", None


def summary(kind: str, detail: str) -> str:
    """The event as one line (what the node's status_reason says after it)."""
    return f"{_LABELS.get(kind, kind)}: {detail}"


def record(session: Session, node: EngineNode, kind: str, detail: str, *, at: dt.datetime,
           actor: str = ENGINE, code: int | None = None, audit: bool = True, reason: bool = True
           ) -> NodeEvent:
    """Add one event about `node` to the session's transaction: the history row, with `reason` the node's
    status_reason (unless its status has its own) and, with `audit`, the audit event `node.<kind>`."""
    if kind not in EVENT_KINDS:
        raise ValueError(f"unknown node event kind {kind!r}")
    event = NodeEvent(cluster_id=node.cluster_id, node_name=node.name, node_id=node.id, kind=kind, code=code,
                      detail=detail, actor=actor, at=at)
    session.add(event)
    if reason and node.status not in _OWN_REASON:
        node.status_reason = summary(kind, detail)
    if audit:
        cluster = session.get(Cluster, node.cluster_id)
        if cluster is not None:
            details: dict[str, Any] = {"node": node.name, "instance_id": node.id, "detail": detail}
            if code is not None:
                details["code"] = code
            add_event(session, project_id=cluster.project_id, actor=actor, action=f"node.{kind}",
                      resource_type="cluster", resource_id=cluster.id, at=at, details=details)
    return event


# ---- what the engine and the API record ------------------------------------------------------------

def fault(session: Session, node: EngineNode, reason: str | None, at: dt.datetime) -> NodeEvent:
    """A RUNNING node's health watch reported a fault (`at`: when it happened)."""
    kind, code = fault_kind(reason)
    return record(session, node, kind, reason or "the node failed", at=at, code=code)


def health_changed(session: Session, node: EngineNode, reason: str | None, at: dt.datetime) -> NodeEvent:
    """The metrics sampler found the node's readings degraded (`reason`), or clean again (None)."""
    if reason is not None:
        return record(session, node, "degraded", reason, at=at)
    return record(session, node, "recovered", "readings healthy again", at=at)


def requested(session: Session, node: EngineNode, action: str, actor: str, at: dt.datetime) -> NodeEvent:
    """A node action accepted from `actor`. The request audits itself (no second audit event) and the
    node's pending action says what is to come, so its status_reason stays what it was."""
    return record(session, node, f"{action}_requested", f"{action} requested by {actor}", at=at, actor=actor,
                  audit=False, reason=False)


def repair_started(session: Session, old: EngineNode, new: EngineNode, why: str, at: dt.datetime
                   ) -> NodeEvent:
    """A new machine was placed under the node's name; `old` is being released."""
    cause = old.status_reason if old.status == NodeStatus.FAILED else (
        f"degraded: {old.degraded_reason}" if old.degraded_reason else None)
    actor = _requester(session, old, "replace") if old.pending_action == "replace" else ENGINE
    detail = f"{why}; new machine {new.id} replaces {old.id}" + (f" ({cause})" if cause else "")
    return record(session, old, "repair_started", detail, at=at, actor=actor)


def repair_finished(session: Session, node: EngineNode, at: dt.datetime) -> NodeEvent:
    """The repair's new machine is RUNNING."""
    started = session.scalars(
        select(NodeEvent).where(NodeEvent.cluster_id == node.cluster_id, NodeEvent.node_id == node.repair_of,
                                NodeEvent.kind == "repair_started").order_by(NodeEvent.id.desc()).limit(1)
    ).first()
    detail = f"machine {node.id} runs in place of {node.repair_of}"
    if started is not None:
        detail += f" (repair started {_iso(started.at)}: {started.detail})"
    return record(session, node, "repair_finished", detail, at=at, actor=started.actor if started else ENGINE)


def repair_failed(session: Session, node: EngineNode, reason: str, at: dt.datetime) -> NodeEvent:
    """The repair's new machine did not come up (it is the failed member now)."""
    return record(session, node, "repair_failed", f"machine {node.id} did not come up: {reason}", at=at)


def restart_started(session: Session, node: EngineNode, at: dt.datetime) -> NodeEvent:
    """A restart the node was asked for began (the actor: whoever asked for it)."""
    actor = _requester(session, node, "restart")
    return record(session, node, "restart_started", f"rebooting machine {node.id} in place", at=at,
                  actor=actor)


def restart_finished(session: Session, node: EngineNode, failure: str | None, at: dt.datetime) -> NodeEvent:
    """The restart ended: the node is RUNNING again, or (`failure`) FAILED."""
    actor = _requester(session, node, "restart")
    if failure is not None:
        return record(session, node, "restart_failed", failure, at=at, actor=actor)
    return record(session, node, "restart_finished", f"machine {node.id} is back", at=at, actor=actor)


def released(session: Session, node: EngineNode, reason: str, at: dt.datetime) -> NodeEvent:
    """The node left the cluster (a scale-down)."""
    return record(session, node, "released", f"machine {node.id} {reason}", at=at)


def _requester(session: Session, node: EngineNode, action: str) -> str:
    """Who asked for the node's latest `action` (ENGINE when nobody did)."""
    actor = session.scalar(
        select(NodeEvent.actor).where(NodeEvent.cluster_id == node.cluster_id, NodeEvent.node_id == node.id,
                                      NodeEvent.kind == f"{action}_requested")
        .order_by(NodeEvent.id.desc()).limit(1)
    )
    return str(actor) if actor else ENGINE


def _iso(moment: dt.datetime) -> str:
    moment = moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)
    return moment.astimezone(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


# ---- reading -----------------------------------------------------------------------------------------

def ever_had(session: Session, cluster_id: str, name: str) -> bool:
    """Whether the cluster has, or had, a node of that name."""
    found = session.scalar(select(EngineNode.id).where(EngineNode.cluster_id == cluster_id,
                                                       EngineNode.name == name).limit(1))
    return found is not None


def history(session: Session, cluster_id: str, name: str, *, before_id: int | None, limit: int
            ) -> Sequence[NodeEvent]:
    """A page of the node's events, newest first (in the order recorded), before event `before_id`."""
    query = select(NodeEvent).where(NodeEvent.cluster_id == cluster_id, NodeEvent.node_name == name)
    if before_id is not None:
        query = query.where(NodeEvent.id < before_id)
    return session.scalars(query.order_by(NodeEvent.id.desc()).limit(limit)).all()


def last_events(session: Session, cluster_id: str) -> dict[str, NodeEvent]:
    """Each node name's latest event (one query)."""
    newest = (select(func.max(NodeEvent.id)).where(NodeEvent.cluster_id == cluster_id)
              .group_by(NodeEvent.node_name))
    rows = session.scalars(select(NodeEvent).where(NodeEvent.id.in_(newest)))
    return {row.node_name: row for row in rows}
