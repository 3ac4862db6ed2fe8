"""Day-2 node actions (`restart`, `replace`, `drain`, `resume` on one node; `restart_workers` on a
cluster), accepted in the API's transaction and carried out by the reconciler.

Drain and resume change the engine's view at once (Slurm DRAIN / Kubernetes cordon: no new work lands on
the node; running work is left alone), and the next pass carries them to the scheduler through the
driver (`node_drain` / `node_resume`: `scontrol update` under the local driver). Restart and replace are
driver work: the action is
stored on the node (`pending_action`) and the next pass reboots it (`node_restart`, status CONFIGURING,
not metered) or replaces it in place (same hostname and address, new `instance_id`). A state that
forbids the action answers 409 `node_state_conflict` saying why.
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.domain.catalog import Catalog
from backend.domain.errors import Conflict, NotFound
from backend.domain.lifecycle import NodeStage, NodeStatus, no_such_node
from backend.provisioning import allocator, node_history
from backend.provisioning.engine import InsufficientCapacity
from backend.provisioning.state import wake
from backend.store.engine_models import EngineCluster, EngineNode
from backend.store.models import Cluster

NodeAction = Literal["restart", "replace", "drain", "resume"]
NODE_ACTIONS: tuple[str, ...] = ("restart", "replace", "drain", "resume")
# Restart and replace act on a node that is up or has failed; never on one still coming up.
_ACTIONABLE_STAGES = (NodeStage.READY, NodeStage.FAILED)
UNKNOWN_ACTOR = "unknown"  # a caller that did not say who asked (the API always does)


class NodeStateConflict(Conflict):
    code = "node_state_conflict"


def _cluster_state(session: Session, cluster: Cluster) -> EngineCluster:
    state = session.get(EngineCluster, cluster.id, with_for_update=True)
    if cluster.deletion_requested_at is not None:
        raise NodeStateConflict(f"cluster {cluster.id} is being deleted")
    if state is None or state.finished or state.rollback_reason is not None:
        raise NodeStateConflict(f"cluster {cluster.id} has no running nodes (status {cluster.status})")
    if state.paused_reason is not None:
        raise NodeStateConflict(f"cluster {cluster.id} is paused ({state.paused_reason}); node actions wait "
                                "until it is resumed")
    return state


def member(session: Session, cluster: Cluster, name: str) -> EngineNode:
    node = session.scalars(select(EngineNode).where(EngineNode.cluster_id == cluster.id,
                                                    EngineNode.active_name == name)).one_or_none()
    if node is None:
        raise NotFound(no_such_node(cluster.name, name, member_names(session, cluster.id)), field="name")
    return node


def member_names(session: Session, cluster_id: str) -> list[str]:
    """The names of the cluster's member nodes now (what a mistyped name is compared with)."""
    return list(session.scalars(select(EngineNode.active_name).where(
        EngineNode.cluster_id == cluster_id, EngineNode.active_name.is_not(None))))


def request_node_action(session: Session, catalog: Catalog, cluster: Cluster, name: str,
                        action: NodeAction, *, now: dt.datetime, actor: str = UNKNOWN_ACTOR) -> EngineNode:
    """Accept `action` on the member node `name` (404 unknown node, 409 when its state forbids it);
    `actor`: who asks (an API key's prefix), kept in the node's history."""
    state = _cluster_state(session, cluster)
    node = member(session, cluster, name)
    what = f"node {name} is {node.status} ({node.stage})"
    if node.pending_action is not None:
        raise NodeStateConflict(f"node {name} already has a pending {node.pending_action}")
    if action == "drain":
        if node.stage != NodeStage.READY:
            raise NodeStateConflict(f"{what}: only a RUNNING node can be drained")
        node.drained = True
    elif action == "resume":
        if node.stage != NodeStage.READY:
            raise NodeStateConflict(f"{what}: only a RUNNING node can be resumed (restart or replace a "
                                    "failed one)")
        node.drained = False
    else:
        if node.stage not in _ACTIONABLE_STAGES:
            raise NodeStateConflict(f"{what}: {action} needs a RUNNING or FAILED node")
        if action == "replace" and _free_nodes(session, catalog, cluster, state, now) < 1:
            raise InsufficientCapacity(
                f"no {cluster.instance_type} node is free on {state.fabric} to replace {name}", field="name")
        node.pending_action = action
    wake(session, cluster.id, now)  # the reconciler carries it out (drain / resume: to the scheduler)
    node.updated_at = now
    node_history.requested(session, node, action, actor, now)
    return node


def restart_workers(session: Session, cluster: Cluster, xid_nodes: set[str], *, now: dt.datetime,
                    actor: str = UNKNOWN_ACTOR) -> list[str]:
    """Restart every worker reporting XID errors (failed by a hardware fault, or in `xid_nodes`: recent
    XID events while still running); the names restarted, in index order."""
    _cluster_state(session, cluster)
    members = session.scalars(select(EngineNode).where(EngineNode.cluster_id == cluster.id,
                                                       EngineNode.active_name.is_not(None))
                              .order_by(EngineNode.index)).all()
    chosen = []
    for node in members:
        faulted = node.status == NodeStatus.FAILED and "XID" in (node.status_reason or "")
        if node.stage in _ACTIONABLE_STAGES and node.pending_action is None and (
                faulted or node.name in xid_nodes):
            node.pending_action = "restart"
            node.updated_at = now
            node_history.requested(session, node, "restart", actor, now)
            chosen.append(node.name)
    if chosen:
        wake(session, cluster.id, now)
    return chosen


def _free_nodes(session: Session, catalog: Catalog, cluster: Cluster, state: EngineCluster, now: dt.datetime
                ) -> int:
    free = allocator.free_by_fabric(session, catalog, cluster.region, cluster.instance_type,
                                    cluster.interconnect, cluster.reservation_id, now=now)
    return free.get(state.fabric, 0)
