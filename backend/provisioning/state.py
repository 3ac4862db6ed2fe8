"""Small state-changing helpers shared by admission and the reconciler: node rows, status transitions
(always recorded), cluster status / phase (always logged), the work queue upsert."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import structlog
from sqlalchemy import select
from sqlalchemy.orm import Session, object_session

from backend.domain.lifecycle import STAGE_STATUS, NodeStage, NodeStatus, check_transition
from backend.domain.security_groups import DEFAULT_EGRESS, DEFAULT_INGRESS, effective_rules
from backend.store.engine_models import EngineNode, NodeTransition, PhaseRecord, WorkItem
from backend.store.models import Cluster, SecurityGroup

log = structlog.get_logger("gpucloud.engine")


def aware(value: dt.datetime | None) -> dt.datetime | None:
    """SQLite returns naive datetimes; everything stored is UTC."""
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)
    return value


def new_node_id() -> str:
    return "nod_" + uuid.uuid4().hex[:26]


def desired_config(cluster: Cluster) -> dict[str, Any]:
    return {
        "ssh_key_ids": [link.ssh_key_id for link in cluster.ssh_key_links],
        "volume_ids": [link.volume_id for link in cluster.volume_links],
        "container": cluster.container,
        "security_rules": security_rules(cluster),
        # The user's Slurm configuration (partitions, QoS, prolog/epilog): a change reconfigures Slurm.
        "slurm_config": cluster.slurm_config,
    }


def security_rules(cluster: Cluster) -> dict[str, list[dict[str, Any]]]:
    """The firewall rules the cluster's nodes enforce: the union of its security groups, or of the
    project's default group when it names none (its built-in rules until the group is created)."""
    session = object_session(cluster)
    if session is None:
        raise ValueError(f"cluster {cluster.id} is not in a session")
    # Read once per transaction (a pass asks for every node): groups change in other transactions only.
    cache: tuple[Any, dict[Any, dict[str, list[dict[str, Any]]]]] | None = session.info.get("security_rules")
    if cache is None or cache[0] is not session.get_transaction():
        cache = session.info["security_rules"] = (session.get_transaction(), {})
    key = (cluster.id, tuple(link.security_group_id for link in cluster.security_group_links))
    if key not in cache[1]:
        cache[1][key] = _read_security_rules(session, cluster)
    return cache[1][key]


def _read_security_rules(session: Session, cluster: Cluster) -> dict[str, list[dict[str, Any]]]:
    ids = [link.security_group_id for link in cluster.security_group_links]
    if ids:
        found = {g.id: g for g in session.scalars(select(SecurityGroup).where(SecurityGroup.id.in_(ids)))}
        groups: list[Any] = [found[i] for i in ids if i in found]
    else:
        default = session.scalars(
            select(SecurityGroup)
            .where(SecurityGroup.project_id == cluster.project_id, SecurityGroup.is_default.is_(True))
            .order_by(SecurityGroup.id)
            .limit(1)
        ).first()
        built_in = {"ingress": DEFAULT_INGRESS, "egress": DEFAULT_EGRESS}
        groups = [default] if default is not None else [built_in]
    return effective_rules([
        g if isinstance(g, dict) else {"ingress": g.ingress, "egress": g.egress} for g in groups
    ])


def set_stage(session: Session, cluster: Cluster, node: EngineNode, stage: NodeStage, now: dt.datetime,
              reason: str | None = None) -> None:
    """Move a node to `stage`; when that changes its status, check the edge and append a transition."""
    node.stage = str(stage)
    node.op_token = None
    node.op_ready_at = None
    node.updated_at = now
    target = STAGE_STATUS[stage]
    if node.status == target:
        return
    check_transition(NodeStatus(node.status), target)
    session.add(NodeTransition(
        node_id=node.id, cluster_id=node.cluster_id, project_id=cluster.project_id, node_name=node.name,
        instance_type=node.instance_type, region=node.region, gpu_count=node.gpu_count,
        capacity_type=node.capacity_type, from_status=node.status, to_status=str(target), reason=reason,
        at=now,
    ))
    node.status = str(target)
    node.status_reason = (
        reason if target in (NodeStatus.FAILED, NodeStatus.DESTROYING, NodeStatus.PAUSED) else None
    )
    log.info("node.status_changed", cluster_id=node.cluster_id, node=node.name, status=str(target),
             reason=reason)


def new_node(session: Session, cluster: Cluster, *, name: str, index: int, batch: int, fabric: str,
             slot: int, scalable_unit: int, gpu_count: int, private_ip: str, public_ip: str | None,
             attempt: int, now: dt.datetime, capacity_type: str = "on_demand") -> EngineNode:
    node = EngineNode(
        id=new_node_id(), cluster_id=cluster.id, name=name, active_name=name, index=index, batch=batch,
        region=cluster.region, fabric=fabric, instance_type=cluster.instance_type, gpu_count=gpu_count,
        slot=slot, scalable_unit=scalable_unit, private_ip=private_ip, public_ip=public_ip,
        status=str(NodeStatus.PENDING), stage=str(NodeStage.QUEUED), attempt=attempt, op_seq=0,
        applied_config={}, capacity_type=capacity_type, created_at=now, updated_at=now,
    )
    session.add(node)
    session.add(NodeTransition(
        node_id=node.id, cluster_id=cluster.id, project_id=cluster.project_id, node_name=name,
        instance_type=cluster.instance_type, region=cluster.region, gpu_count=gpu_count,
        capacity_type=capacity_type, from_status=None,
        to_status=str(NodeStatus.PENDING), reason=None, at=now,
    ))
    return node


def set_cluster_status(cluster: Cluster, status: str, reason: str | None) -> None:
    if cluster.status != status or cluster.status_reason != reason:
        if cluster.status != status:
            log.info("cluster.status_changed", cluster_id=cluster.id, old=cluster.status, new=status,
                     reason=reason)
        cluster.status = status
        cluster.status_reason = reason


def set_phase(session: Session, cluster: Cluster, phase: str, now: dt.datetime, detail: str | None = None
              ) -> None:
    if cluster.phase == phase:
        return
    cluster.phase = phase
    session.add(PhaseRecord(cluster_id=cluster.id, phase=phase, detail=detail, at=now))
    log.info("cluster.phase_changed", cluster_id=cluster.id, phase=phase, detail=detail)


def wake(session: Session, cluster_id: str, now: dt.datetime) -> None:
    """Make the cluster due for a reconcile pass now (creating its work item on first use)."""
    item = session.get(WorkItem, cluster_id, with_for_update=True)
    if item is None:
        session.add(WorkItem(cluster_id=cluster_id, due_at=now, fencing_token=0, passes=0))
        session.flush()
    else:
        item.due_at = now


def live_nodes(session: Session, cluster_id: str) -> list[EngineNode]:
    """Every node of the cluster that is not yet released, by index then age."""
    return list(session.scalars(
        select(EngineNode)
        .where(EngineNode.cluster_id == cluster_id, EngineNode.stage != str(NodeStage.RELEASED))
        .order_by(EngineNode.index, EngineNode.created_at)
    ))
