"""One reconcile pass over one cluster: compare the spec with what is built and take every step that is
due. A pass runs in one transaction; every driver call carries a client token derived from stored
state (node id, stage, sequence), so a pass replayed after a crash repeats the same calls and the
driver answers with the operations it already has.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from backend.domain.catalog import Catalog
from backend.domain.lifecycle import (
    ClusterPhase,
    NodeStage,
    NodeStatus,
    derive_bring_up_phase,
    derive_cluster_status,
)
from backend.provisioning import (
    allocator,
    cluster_images,
    lifetime,
    node_history,
    public_address,
    scale_down,
    spot,
)
from backend.provisioning.driver import Operation, OperationRequest, OpKind, ProvisioningDriver
from backend.provisioning.engine import add_batch, add_repair, add_replacement
from backend.provisioning.node_health import in_repair
from backend.provisioning.settings import EngineSettings
from backend.provisioning.state import (
    desired_config,
    live_nodes,
    set_cluster_status,
    set_phase,
    set_stage,
)
from backend.store.engine_models import EngineCluster, EngineNode, NodeEvent, PhaseRecord, Step
from backend.store.models import Cluster

S = NodeStage
BRING_UP_ORDER = [S.BOOTING, S.FABRIC, S.DRIVERS, S.VOLUMES, S.JOINING, S.ACCEPTANCE, S.ACCEPTED, S.CONTAINER,
                  S.READY]
STAGE_OP = {
    S.BOOTING: OpKind.NODE_BOOT, S.FABRIC: OpKind.FABRIC_JOIN, S.DRIVERS: OpKind.DRIVERS_INSTALL,
    S.VOLUMES: OpKind.VOLUME_ATTACH, S.JOINING: OpKind.ORCHESTRATOR_JOIN, S.ACCEPTANCE: OpKind.ACCEPTANCE,
    S.CONTAINER: OpKind.CONTAINER_START, S.RECONFIGURING: OpKind.RECONFIGURE,
    S.RECREATING_CONTAINER: OpKind.CONTAINER_RECREATE, S.RELEASING: OpKind.NODE_RELEASE,
    S.POWERING_OFF: OpKind.NODE_POWER_OFF, S.POWERING_ON: OpKind.NODE_POWER_ON,
    S.RESTARTING: OpKind.NODE_RESTART,
}
# Stages of a node that is (or is becoming) powered up after bring-up: a pause powers them off.
# Stages whose operation applies the cluster's config (keys, volumes, container) to a node; the config
# submitted is kept under APPLYING in `applied_config` until the operation finishes.
CONFIG_STAGES = (S.DRIVERS, S.RECONFIGURING, S.RECREATING_CONTAINER)
APPLYING = "applying"
POWERED_UP_STAGES = (S.READY, S.RECONFIGURING, S.RECREATING_CONTAINER, S.POWERING_ON)
AFTER_POWER_OP = {S.POWERING_OFF: S.POWERED_OFF, S.POWERING_ON: S.READY, S.RESTARTING: S.READY}
MAX_STEPS_PER_NODE_PASS = 20
SCALE_UP_FAILED = "scale-up rolled back"
REPAIRS_EXHAUSTED = "automatic repair stopped"
NO_SPARE = "no replacement node free"
NO_SPARE_RETRY = dt.timedelta(seconds=30)  # a repair without a free node looks again this much later
PAUSED = str(NodeStatus.PAUSED)
# Phases an import under way is shown in instead (the nodes wait after acceptance, or serve).
_IMAGE_WAIT_PHASES = (ClusterPhase.READY, ClusterPhase.RUNNING_ACCEPTANCE_TESTS)


@dataclass
class PassContext:
    session: Session
    driver: ProvisioningDriver
    catalog: Catalog
    settings: EngineSettings
    now: dt.datetime
    worker: str
    fencing_token: int
    steps: int = 0
    due: list[dt.datetime] = field(default_factory=list)
    new_steps: dict[str, Step] = field(default_factory=dict)

    def next_due(self) -> dt.datetime | None:
        return min(self.due) if self.due else None


def reconcile_cluster(ctx: PassContext, cluster_id: str) -> dt.datetime | None:
    """Advance the cluster as far as is due now; returns when it next needs a pass (None: converged)."""
    # One flush at commit instead of one per query: the pass reads what it wrote from the identity map
    # and flushes explicitly where a query must see new rows (allocations, replacement nodes).
    with ctx.session.no_autoflush:
        return _reconcile(ctx, cluster_id)


def _reconcile(ctx: PassContext, cluster_id: str) -> dt.datetime | None:
    cluster = ctx.session.get(Cluster, cluster_id)
    state = ctx.session.get(EngineCluster, cluster_id)
    if cluster is None or state is None or state.finished:
        return None
    nodes = live_nodes(ctx.session, cluster_id)
    lifetime.expire_if_due(session=ctx.session, driver=ctx.driver, cluster=cluster, now=ctx.now,
                           idle_check=dt.timedelta(seconds=ctx.settings.idle_check_seconds), due=ctx.due)
    if cluster.deletion_requested_at is not None or state.rollback_reason is not None:
        _teardown(ctx, cluster, state, nodes)
        return ctx.next_due()
    for node in nodes:
        if node.active_name is None and node.stage != S.RELEASING:
            _start_release(ctx, cluster, node, "removed from the cluster")
            node_history.released(ctx.session, node, "was removed from the cluster", ctx.now)
    if state.paused_reason is not None:
        for node in nodes:
            if node.stage == S.RELEASING:
                _advance_release(ctx, node, cluster)
            elif node.active_name is not None:
                _power_off(ctx, cluster, node, state.paused_reason)
        set_cluster_status(cluster, PAUSED, state.paused_reason)
        set_phase(ctx.session, cluster, str(ClusterPhase.PAUSED), ctx.now, state.paused_reason)
        return ctx.next_due()
    _control_plane(ctx, cluster, state)
    image_failure = cluster_images.advance(
        cluster, state, ctx.now, ctx.due, lambda request, new: _submit(ctx, cluster, None, request, new=new),
        lambda op: _record_outcome(ctx, op))
    if image_failure is not None and state.first_ready_at is None:
        state.rollback_reason = f"create rolled back: {image_failure}"
        _teardown(ctx, cluster, state, nodes)
        return ctx.next_due()
    for _ in range(3):  # a few sweeps so barrier-released nodes move in the same pass
        progressed = False
        for node in nodes:
            if node.stage == S.RELEASED:
                continue
            if node.stage == S.RELEASING:
                progressed |= _advance_release(ctx, node)
            elif node.active_name is not None:
                progressed |= _advance_member(ctx, cluster, state, node, nodes)
            if state.rollback_reason is not None:
                _teardown(ctx, cluster, state, live_nodes(ctx.session, cluster_id))
                return ctx.next_due()
        if not progressed:
            break
        nodes = live_nodes(ctx.session, cluster_id)
    # Scale-down: idle nodes first, a busy one drained and given scale_down_grace_minutes (scale_down.py).
    for node, why in scale_down.advance(scale_down.Pass(
            ctx.session, ctx.driver, ctx.now, dt.timedelta(seconds=ctx.settings.idle_check_seconds), ctx.due,
            lambda c, n, request, new: _submit(ctx, c, n, request, new=new),
            lambda op: _record_outcome(ctx, op)), cluster):
        _start_release(ctx, cluster, node, why)
        node_history.released(ctx.session, node, f"was {why}", ctx.now)
    if spot.uses_spot(cluster) and state.first_ready_at is not None:
        _spot_capacity(ctx, cluster, state)
    _summarise(ctx, cluster, state, live_nodes(ctx.session, cluster_id))
    return ctx.next_due()


def _power_off(ctx: PassContext, cluster: Cluster, node: EngineNode, reason: str) -> None:
    """Paused: power a node that is up off through the driver (status PAUSED from the first second, so
    it is not metered; its slot stays allocated). Nodes still coming up wait at their current step."""
    if node.stage in POWERED_UP_STAGES:
        node.watch_token, node.watch_due_at = None, None  # a powered-off node has no health to watch
        set_stage(ctx.session, cluster, node, S.POWERING_OFF, ctx.now, reason)
    if node.stage != S.POWERING_OFF:
        return
    op = _node_op(ctx, cluster, node, S.POWERING_OFF)
    if not op.done(ctx.now):
        if op.ready_at is not None:
            ctx.due.append(op.ready_at)
        return
    _record_outcome(ctx, op)
    if op.succeeded:
        set_stage(ctx.session, cluster, node, S.POWERED_OFF, ctx.now, reason)
    else:
        set_stage(ctx.session, cluster, node, S.FAILED, ctx.now, f"power-off failed: {op.reason}")


def _needs_control_plane(cluster: Cluster) -> bool:
    return cluster.node_count > 1 or cluster.orchestrator == "kubernetes"


def _control_plane(ctx: PassContext, cluster: Cluster, state: EngineCluster) -> None:
    if state.control_plane == "ready" or not (_needs_control_plane(cluster) or state.jumphost_ip):
        return
    token = f"{cluster.id}/control_plane/create"
    op = _submit(ctx, cluster, None, OperationRequest(token, OpKind.CONTROL_PLANE_CREATE, cluster.name,
                                                      cluster_id=cluster.id),
                 new=state.control_plane == "absent")
    state.control_plane, state.control_plane_op = "creating", token
    if op.done(ctx.now):
        _record_outcome(ctx, op)
        state.control_plane, state.control_plane_ready_at = "ready", op.ready_at
        if op.succeeded and op.host_key is not None:
            state.login_host_key = op.host_key
    elif op.ready_at is not None:
        ctx.due.append(op.ready_at)


def _control_plane_ready(cluster: Cluster, state: EngineCluster) -> bool:
    return state.control_plane == "ready" or not (_needs_control_plane(cluster) or state.jumphost_ip)


def _next_bring_up_stage(cluster: Cluster, node: EngineNode, current: NodeStage) -> NodeStage:
    config = desired_config(cluster)
    skip = set()
    if cluster.interconnect == "ethernet":
        skip.add(S.FABRIC)
    if not config["volume_ids"]:
        skip.add(S.VOLUMES)
    if cluster.orchestrator == "none":
        skip.add(S.JOINING)
    index = BRING_UP_ORDER.index(current) + 1 if current in BRING_UP_ORDER else 0
    while BRING_UP_ORDER[index] in skip:
        index += 1
    return BRING_UP_ORDER[index]


def _bring_up_rank(stage: str) -> int:
    """Position in the bring-up order; queued is before all, day-2 stages count as done."""
    if stage == S.QUEUED:
        return -1
    return BRING_UP_ORDER.index(NodeStage(stage)) if stage in BRING_UP_ORDER else len(BRING_UP_ORDER)


def _advance_member(ctx: PassContext, cluster: Cluster, state: EngineCluster, node: EngineNode,
                    nodes: list[EngineNode]) -> bool:
    """Take every due step of one member node; True if it changed."""
    progressed = False
    for _ in range(MAX_STEPS_PER_NODE_PASS):
        stage = NodeStage(node.stage)
        if stage == S.FAILED:
            return _failed_member(ctx, cluster, state, node) or progressed
        if stage == S.QUEUED:
            set_stage(ctx.session, cluster, node, _next_bring_up_stage(cluster, node, stage), ctx.now)
            progressed = True
            continue
        if stage == S.READY:
            return _ready_node(ctx, cluster, node) or progressed
        if stage == S.POWERED_OFF:  # resumed: power it back on
            set_stage(ctx.session, cluster, node, S.POWERING_ON, ctx.now)
            progressed = True
            continue
        if stage == S.ACCEPTED:
            batch = [n for n in nodes if n.active_name is not None and n.batch == node.batch]
            if any(_bring_up_rank(n.stage) < _bring_up_rank(S.ACCEPTED) for n in batch):
                return progressed  # all or nothing: wait for the whole batch to pass acceptance
            if state.first_ready_at is None and not cluster_images.first_import_done(cluster, state):
                return progressed  # a new cluster's jobs find their images: wait for the import
            node.applied_config = {**node.applied_config, "container": cluster.container}
            set_stage(ctx.session, cluster, node, S.CONTAINER, ctx.now)
            progressed = True
            continue
        if stage == S.JOINING and not _control_plane_ready(cluster, state):
            return progressed
        op = _node_op(ctx, cluster, node, stage)
        if not op.done(ctx.now):
            if op.ready_at is not None:
                ctx.due.append(op.ready_at)
            return progressed
        _record_outcome(ctx, op)
        progressed = True
        if op.succeeded and op.host_key is not None:  # a boot reports the machine's SSH host key
            node.host_key = op.host_key
        if stage in AFTER_POWER_OP:  # a power operation: no bring-up rollback, the node is just broken
            outcome = AFTER_POWER_OP[stage] if op.succeeded else S.FAILED
            reason = None if op.succeeded else f"{STAGE_OP[stage]} failed: {op.reason}"
            set_stage(ctx.session, cluster, node, outcome, ctx.now, reason)
            if stage == S.RESTARTING:
                node_history.restart_finished(ctx.session, node, reason, ctx.now)
            continue
        if not op.succeeded and node.repair_of is not None:
            # A repair's new machine failed to come up: it is the failed member now (repaired again
            # within the daily budget, or left failed), the rest of the cluster is not rolled back.
            set_stage(ctx.session, cluster, node, S.FAILED, ctx.now, op.reason or "operation failed")
            node_history.repair_failed(ctx.session, node, op.reason or "operation failed", ctx.now)
            return progressed
        if not op.succeeded:
            _bring_up_failed(ctx, cluster, state, node, op.reason or "operation failed")
            return progressed
        if stage == S.DRIVERS:
            config = _config_applied(cluster, node)
            node.applied_config = {**node.applied_config, "ssh_key_ids": config["ssh_key_ids"],
                                   "volume_ids": config["volume_ids"],
                                   "security_rules": config.get("security_rules")}
        if stage in (S.RECONFIGURING, S.RECREATING_CONTAINER):
            config = _config_applied(cluster, node)
            node.applied_config = {**node.applied_config, **config}
            set_stage(ctx.session, cluster, node, S.READY, ctx.now)
            continue
        set_stage(ctx.session, cluster, node, _next_bring_up_stage(cluster, node, stage), ctx.now)
        if node.stage == S.READY and node.repair_of is not None:
            node_history.repair_finished(ctx.session, node, ctx.now)
    ctx.due.append(ctx.now)
    return progressed


def _ready_node(ctx: PassContext, cluster: Cluster, node: EngineNode) -> bool:
    """A RUNNING node: carry out a node action, watch its health, apply day-2 config changes."""
    if node.pending_action == "restart":
        return _start_restart(ctx, cluster, node)
    if node.pending_action == "replace":
        return _repair(ctx, cluster, node, "replaced by a node action")
    if node.watch_token is None:
        node.op_seq += 1
        token = f"{node.id}/health_watch/{node.op_seq}"
        # A watch after a restart draws its fate anew (attempt 1, 2, ... for the first watch of a node).
        attempt = node.attempt if _first_watch(node) else node.attempt * 10_000 + node.op_seq
        op = _submit(ctx, cluster, node, OperationRequest(token, OpKind.HEALTH_WATCH, cluster.name, node.name,
                                                           attempt, cluster_id=cluster.id, node_id=node.id))
        node.watch_token, node.watch_due_at = token, op.ready_at
    watch_due = node.watch_due_at
    if watch_due is not None:
        if watch_due > ctx.now:
            ctx.due.append(watch_due)
        else:
            fault = ctx.driver.get(ctx.session, node.watch_token or "")
            if fault is not None and not fault.succeeded:
                _record_outcome(ctx, fault)
                # Metered exactly: the node stops being RUNNING when the fault happened, not when a pass
                # noticed it.
                set_stage(ctx.session, cluster, node, S.FAILED, min(watch_due, ctx.now),
                          f"hardware fault: {fault.reason}")
                node_history.fault(ctx.session, node, fault.reason, min(watch_due, ctx.now))
                node.updated_at = ctx.now
                node.watch_due_at = None
                ctx.due.append(ctx.now)  # repair (auto) in the next sweep
                return True
            if fault is not None and fault.ready_at is not None and fault.ready_at > ctx.now:
                # A driver that reads the node's health from the machine says when to look again.
                node.watch_due_at = fault.ready_at
                ctx.due.append(fault.ready_at)
    if node.degraded_reason is not None and cluster.node_repair == "auto":
        if _repair_allowed(ctx, node, f"degraded: {node.degraded_reason}"):
            return _repair(ctx, cluster, node, f"replaced while degraded ({node.degraded_reason}; "
                                               "node_repair = auto)")
    elif (node.status_reason or "").startswith("degraded"):
        node.status_reason = None  # readings healthy again (or manual): no stale repair note
    if node.capacity_type == spot.SPOT and _spot_watch(ctx, cluster, node):
        return True
    if _sync_drain(ctx, cluster, node):
        return True
    if node.op_token is not None:
        return False  # a drain or resume is still under way: config changes wait for it
    config = desired_config(cluster)
    applied = node.applied_config
    if applied.get("container") != config["container"]:
        set_stage(ctx.session, cluster, node, S.RECREATING_CONTAINER, ctx.now)
        return True
    keys = ("volume_ids", "ssh_key_ids", "security_rules", "slurm_config")
    if tuple(applied.get(key) for key in keys) != tuple(config[key] for key in keys):
        set_stage(ctx.session, cluster, node, S.RECONFIGURING, ctx.now)
        return True
    return False


def _sync_drain(ctx: PassContext, cluster: Cluster, node: EngineNode) -> bool:
    """Carry the node's drain flag (node actions `drain` / `resume`) to the orchestrator through the
    driver (Slurm DRAIN / RESUME, Kubernetes cordon / uncordon); `applied_config["drained"]` records
    what it has. True once an operation finished (the flag may have flipped meanwhile: then the next
    one follows)."""
    applied = bool(node.applied_config.get("drained", False))
    if node.op_token is None and node.drained == applied:
        return False
    if node.op_token is None:
        node.op_seq += 1
        kind = OpKind.NODE_DRAIN if node.drained else OpKind.NODE_RESUME
        node.op_token = f"{node.id}/{kind}/{node.op_seq}"
        new = True
    else:
        kind, new = OpKind(node.op_token.split("/")[1]), False
    submitted_due = node.op_ready_at
    if submitted_due is not None and submitted_due > ctx.now:  # submitted and not due: no need to ask
        ctx.due.append(submitted_due)
        return False
    request = OperationRequest(node.op_token, kind, cluster.name, node.name, node.op_seq,
                               cluster_id=cluster.id, node_id=node.id)
    op = _submit(ctx, cluster, node, request, new=new)
    node.op_ready_at = op.ready_at
    if not op.done(ctx.now):
        if op.ready_at is not None:
            ctx.due.append(op.ready_at)
        return False
    _record_outcome(ctx, op)
    node.op_token, node.op_ready_at = None, None
    if op.succeeded:
        node.applied_config = {**node.applied_config, "drained": kind == OpKind.NODE_DRAIN}
    else:  # the scheduler did not answer: try again a little later
        ctx.due.append(ctx.now + NO_SPARE_RETRY)
    return True


def _spot_watch(ctx: PassContext, cluster: Cluster, node: EngineNode) -> bool:
    """A running spot node: its preemption notice when due (audit event, reason on the node), then its
    preemption (released; metered until the moment it was reclaimed). True once preempted."""
    market = spot.market_of(ctx.driver)
    if market is None:
        return False
    if node.preempt_at is None:
        drawn = market.spot_preemption(cluster.name, node.name, node.attempt, ctx.now)
        if drawn is None:
            return False
        node.preempt_at = drawn
    reclaim_at = node.preempt_at
    assert reclaim_at is not None
    notice_at = market.spot_notice_at(reclaim_at)
    if ctx.now < notice_at:
        ctx.due.append(notice_at)
        return False
    if node.preempt_notice_at is None:
        node.preempt_notice_at = notice_at
        spot.audit(ctx.session, cluster, "cluster.node_preemption_notice", notice_at,
                   {"node": node.name, "instance_id": node.id, "preemption_at": spot.iso(reclaim_at)})
        ctx.session.add(PhaseRecord(cluster_id=cluster.id, phase="SpotPreemptionNotice", at=notice_at,
                                    detail=f"{node.name} is reclaimed at {spot.iso(reclaim_at)}"))
    node.status_reason = f"spot preemption notice: the market reclaims this node at {spot.iso(reclaim_at)}"
    if ctx.now < reclaim_at:
        ctx.due.append(reclaim_at)
        return False
    state = ctx.session.get(EngineCluster, cluster.id)
    assert state is not None
    returns = market.spot_returns_at(cluster.name, reclaim_at)
    current = state.spot_reclaimed_until
    state.spot_reclaimed_until = returns if current is None else max(current, returns)
    spot.audit(ctx.session, cluster, "cluster.node_preempted", reclaim_at,
               {"node": node.name, "instance_id": node.id, "spot_returns_at": spot.iso(returns)})
    node.active_name = None
    node.watch_token, node.watch_due_at = None, None
    # Metered exactly: the node stops at the moment the market reclaimed it, not when a pass noticed.
    set_stage(ctx.session, cluster, node, S.RELEASING, reclaim_at, "spot capacity reclaimed (preempted)")
    _advance_release(ctx, node, cluster)
    ctx.due.append(ctx.now)
    return True


def _spot_capacity(ctx: PassContext, cluster: Cluster, state: EngineCluster) -> None:
    """Keep a spot cluster at node_count: spot nodes while the market has them (re-acquired when
    capacity returns), with fallback on-demand nodes while it is short; an on-demand node stands in
    until a spot node that replaces it is RUNNING, then it is released."""
    members = scale_down.staying(live_nodes(ctx.session, cluster.id))
    reclaimed = state.spot_reclaimed_until
    spot_open = reclaimed is None or reclaimed <= ctx.now
    if not spot_open:
        ctx.due.append(reclaimed)  # type: ignore[arg-type]
    on_spot = sum(1 for n in members if n.capacity_type == spot.SPOT)
    fallback = cluster.capacity_type == spot.FALLBACK
    spot_wanted = 0
    if spot_open:
        spot_wanted = cluster.node_count - (on_spot if fallback else len(members))
    missing = max(0, cluster.node_count - len(members))
    if spot_wanted > 0 or missing > 0:
        added = add_batch(ctx.session, ctx.catalog, cluster, state, members, spot_wanted=max(0, spot_wanted),
                          on_demand_wanted=missing, now=ctx.now)
        if added is None or (not added and spot_wanted > 0):
            ctx.due.append(ctx.now + NO_SPARE_RETRY)  # no room or no spot now: look again later
        if added:
            ctx.session.flush()
            ctx.due.append(ctx.now)
            members += added
    if not fallback:
        return
    ready = [n for n in members if n.stage == S.READY]
    extra = len(members) - cluster.node_count
    for node in sorted((n for n in ready if n.capacity_type == spot.ON_DEMAND), key=lambda n: -n.index):
        if extra <= 0 or len(ready) - 1 < cluster.node_count:
            break
        _start_release(ctx, cluster, node, "replaced by a spot node (spot capacity returned)")
        ready.remove(node)
        extra -= 1


def _first_watch(node: EngineNode) -> bool:
    """No restart yet: the node's first health watch keeps the draw of earlier versions."""
    return not (node.applied_config or {}).get("restarts")


def _failed_member(ctx: PassContext, cluster: Cluster, state: EngineCluster, node: EngineNode) -> bool:
    """A member that failed after bring-up: restart or replace it on a node action; with node_repair =
    auto, replace it in place while its daily budget lasts; else it stays failed with the reason."""
    del state
    if node.pending_action == "restart":
        return _start_restart(ctx, cluster, node)
    if node.pending_action == "replace":
        return _repair(ctx, cluster, node, "replaced by a node action")
    if cluster.node_repair != "auto" or not _repair_allowed(ctx, node, node.status_reason):
        return False
    return _repair(ctx, cluster, node, "replaced after a fault (node_repair = auto)")


def _repair_allowed(ctx: PassContext, node: EngineNode, why: str | None) -> bool:
    """Within the node's daily budget of automatic repairs; past it, the node keeps `why` and says so."""
    limit = ctx.settings.engine_max_repairs_per_node_per_day
    if _repairs_in_last_day(ctx, node) < limit:
        return True
    if REPAIRS_EXHAUSTED not in (node.status_reason or ""):
        cluster = ctx.session.get(Cluster, node.cluster_id)
        repairs = "restarts" if cluster is not None and cluster.host_pool_id is not None else "replacements"
        node.status_reason = (f"{why}; {REPAIRS_EXHAUSTED}: {limit} {repairs} of {node.name} in the "
                              "last 24 h (GPUCLOUD_ENGINE_MAX_REPAIRS_PER_NODE_PER_DAY)")
    return False


def _repairs_in_last_day(ctx: PassContext, node: EngineNode) -> int:
    since = ctx.now - dt.timedelta(days=1)
    cluster = ctx.session.get(Cluster, node.cluster_id)
    if cluster is not None and cluster.host_pool_id is not None:  # a server's repairs are its restarts
        return int(ctx.session.scalar(select(func.count()).select_from(NodeEvent).where(
            NodeEvent.node_id == node.id, NodeEvent.kind == "restart_started", NodeEvent.at > since)) or 0)
    count = ctx.session.scalar(select(func.count()).select_from(EngineNode).where(
        EngineNode.cluster_id == node.cluster_id, EngineNode.name == node.name,
        EngineNode.repair_of.is_not(None), EngineNode.created_at > since))
    return int(count or 0)


def _repair(ctx: PassContext, cluster: Cluster, node: EngineNode, why: str) -> bool:
    """Drain the node, place a new machine under its name and address, release the old one. The other
    nodes are not touched. Without a free node the old one stays (failed) with the reason."""
    state = ctx.session.get(EngineCluster, cluster.id)
    assert state is not None
    if cluster.host_pool_id is not None:
        # A server of the project's own cannot be replaced: its daemons are started again in place (the
        # restart fails, naming why, when the server does not answer).
        return _start_restart(ctx, cluster, node)
    was_drained = node.drained
    node.drained = True  # Slurm DRAIN / Kubernetes cordon: no new work lands on it
    node.active_name = None
    ctx.session.flush()
    replacement = add_repair(ctx.session, ctx.catalog, cluster, state, node, ctx.now)
    if replacement is None:
        node.active_name = node.name
        node.pending_action = None
        if node.status == NodeStatus.RUNNING:
            # Degraded but still serving: it keeps its work until a spare is free.
            node.drained = was_drained
            if NO_SPARE not in (node.status_reason or ""):
                node.status_reason = (f"degraded: {node.degraded_reason}; {NO_SPARE} on {state.fabric} "
                                      "(retried later)")
        elif NO_SPARE not in (node.status_reason or ""):
            node.status_reason = f"{node.status_reason}; {NO_SPARE} on {state.fabric} (retried later)"
        ctx.due.append(ctx.now + NO_SPARE_RETRY)
        return False
    node_history.repair_started(ctx.session, node, replacement, why, ctx.now)
    node.pending_action = None
    _start_release(ctx, cluster, node, why)
    ctx.due.append(ctx.now)
    return True


def _start_restart(ctx: PassContext, cluster: Cluster, node: EngineNode) -> bool:
    """Node action `restart`: reboot the machine in place (status CONFIGURING, not metered), RUNNING
    again with a fresh health watch once it is back."""
    node.pending_action = None
    node.watch_token, node.watch_due_at = None, None
    node.degraded_reason = None  # read again once it is back
    node.applied_config = {**node.applied_config, "restarts": int(node.applied_config.get("restarts", 0)) + 1}
    set_stage(ctx.session, cluster, node, S.RESTARTING, ctx.now, "restart requested")
    node_history.restart_started(ctx.session, node, ctx.now)
    return True


def _config_applied(cluster: Cluster, node: EngineNode) -> dict[str, Any]:
    """What a finished configuration operation carried out: the config as it was when the operation
    was submitted (a change made while it ran is still to do, and the next pass sees it as such)."""
    applied = {**node.applied_config}
    config: dict[str, Any] = applied.pop(APPLYING, None) or desired_config(cluster)
    node.applied_config = applied
    return config


def _node_op(ctx: PassContext, cluster: Cluster, node: EngineNode, stage: NodeStage) -> Operation:
    new = node.op_token is None
    if node.op_token is None:
        node.op_seq += 1
        node.op_token = f"{node.id}/{stage}/{node.op_seq}"
        if stage in CONFIG_STAGES:
            node.applied_config = {**node.applied_config, APPLYING: desired_config(cluster)}
    token: str = node.op_token
    volumes_changed = node.applied_config.get("volume_ids") != desired_config(cluster)["volume_ids"]
    attempt = node.attempt if stage in BRING_UP_ORDER else node.op_seq
    request = OperationRequest(token, STAGE_OP[stage], cluster.name, node.name, attempt,
                               cluster.instance_type, node.fabric, node.slot, volumes_changed,
                               cluster_id=cluster.id, node_id=node.id)
    if node.op_ready_at is not None and node.op_ready_at > ctx.now:
        # Submitted and not due: no need to ask the driver again.
        return Operation(token, STAGE_OP[stage], ctx.now, node.op_ready_at, True)
    op = _submit(ctx, cluster, node, request, new=new)
    node.op_ready_at = op.ready_at
    return op


def _submit(ctx: PassContext, cluster: Cluster, node: EngineNode | None, request: OperationRequest,
            *, new: bool = True) -> Operation:
    """Submit (idempotent); `new` = the token was minted in this pass, so record the step."""
    if new:
        request = replace(request, first_submission=True)
    op = ctx.driver.submit(ctx.session, request, ctx.now)
    if not new:
        return op
    step = Step(client_token=request.client_token, cluster_id=cluster.id, node_id=node.id if node else None,
                kind=str(request.kind), submitted_at=ctx.now, ready_at=op.ready_at, worker=ctx.worker,
                fencing_token=ctx.fencing_token)
    ctx.session.add(step)
    ctx.new_steps[request.client_token] = step
    ctx.steps += 1
    return op


def _record_outcome(ctx: PassContext, op: Operation) -> None:
    outcome = "succeeded" if op.succeeded else "failed"
    step = ctx.new_steps.get(op.client_token)
    if step is not None:
        step.outcome, step.reason = outcome, op.reason
        return
    statement = (update(Step).where(Step.client_token == op.client_token, Step.outcome.is_(None))
                 .values(outcome=outcome, reason=op.reason).execution_options(synchronize_session=False))
    ctx.session.execute(statement)


def _bring_up_failed(ctx: PassContext, cluster: Cluster, state: EngineCluster, node: EngineNode,
                     reason: str) -> None:
    """All or nothing: replace the node from the pool; if that is impossible, roll back the batch."""
    what = f"node {node.name} failed: {reason}"
    set_stage(ctx.session, cluster, node, S.FAILED, ctx.now, reason)
    node.active_name = None
    ctx.session.flush()
    replacement = None
    if node.attempt <= ctx.settings.engine_max_replacements:
        replacement = add_replacement(ctx.session, ctx.catalog, cluster, state, node, ctx.now)
    _start_release(ctx, cluster, node, "replaced" if replacement else "failed")
    if replacement is not None:
        ctx.due.append(ctx.now)
        return
    if cluster.host_pool_id is not None:
        cause = f"{what}; a server of the pool cannot be replaced"
    elif node.attempt <= ctx.settings.engine_max_replacements:
        cause = f"{what}; no replacement {cluster.instance_type} node is free on {state.fabric}"
    else:
        cause = f"{what}; {node.attempt - 1} replacements at this position failed too"
    if state.first_ready_at is None:
        state.rollback_reason = f"create rolled back: {cause}"
        return
    # A scale-up batch fails alone: its nodes go, the running ones are untouched.
    for other in live_nodes(ctx.session, cluster.id):
        if other.batch == node.batch and other.active_name is not None:
            other.active_name = None
            _start_release(ctx, cluster, other, "scale-up rolled back")
    cluster.status_reason = f"{SCALE_UP_FAILED}: {cause}"


def _start_release(ctx: PassContext, cluster: Cluster, node: EngineNode, reason: str) -> None:
    if node.stage in (S.RELEASING, S.RELEASED):
        return
    node.active_name = None
    node.watch_due_at = None
    set_stage(ctx.session, cluster, node, S.RELEASING, ctx.now, reason)
    _advance_release(ctx, node, cluster)


def _advance_release(ctx: PassContext, node: EngineNode, cluster: Cluster | None = None) -> bool:
    cluster = cluster or ctx.session.get(Cluster, node.cluster_id)
    assert cluster is not None
    op = _node_op(ctx, cluster, node, S.RELEASING)
    if not op.done(ctx.now):
        if op.ready_at is not None:
            ctx.due.append(op.ready_at)
        return False
    _record_outcome(ctx, op)
    set_stage(ctx.session, cluster, node, S.RELEASED, ctx.now)
    allocator.release_node(ctx.session, node.id)
    return True


def _teardown(ctx: PassContext, cluster: Cluster, state: EngineCluster, nodes: list[EngineNode]) -> None:
    rollback = state.rollback_reason is not None and cluster.deletion_requested_at is None
    for node in nodes:
        if node.stage == S.RELEASING:
            _advance_release(ctx, node, cluster)
        elif node.stage != S.RELEASED:
            _start_release(ctx, cluster, node, state.rollback_reason or "cluster deleted")
    if state.control_plane in ("creating", "ready", "releasing"):
        token = f"{cluster.id}/control_plane/release"
        op = _submit(ctx, cluster, None, OperationRequest(token, OpKind.CONTROL_PLANE_RELEASE, cluster.name,
                                                          cluster_id=cluster.id),
                     new=state.control_plane != "releasing")
        state.control_plane = "releasing"
        if op.done(ctx.now):
            _record_outcome(ctx, op)
            state.control_plane = "released"
        elif op.ready_at is not None:
            ctx.due.append(op.ready_at)
    remaining = [n for n in live_nodes(ctx.session, cluster.id) if n.stage != S.RELEASED]
    if rollback:
        set_cluster_status(cluster, str(NodeStatus.FAILED), state.rollback_reason)
        set_phase(ctx.session, cluster, str(ClusterPhase.ROLLING_BACK), ctx.now, state.rollback_reason)
    else:
        set_cluster_status(cluster, str(NodeStatus.DESTROYING), None)
        set_phase(ctx.session, cluster, str(ClusterPhase.DELETING), ctx.now)
    if remaining or state.control_plane == "releasing":
        return
    allocator.release_cluster(ctx.session, cluster.id)
    public_address.let_go_at_end(ctx.session, cluster, ctx.now)  # a reserved IP outlives its cluster
    state.finished = True
    if rollback:
        set_phase(ctx.session, cluster, str(ClusterPhase.FAILED), ctx.now, "everything released")
    else:
        set_cluster_status(cluster, str(NodeStatus.DESTROYED), None)
        set_phase(ctx.session, cluster, str(ClusterPhase.DELETED), ctx.now)


def _summarise(ctx: PassContext, cluster: Cluster, state: EngineCluster, nodes: list[EngineNode]) -> None:
    members = [n for n in nodes if n.active_name is not None]
    failed = [n for n in members if n.status == NodeStatus.FAILED]
    repairing = [n for n in members if in_repair(n)]
    # Node-level fault tolerance: failed and repairing nodes do not set the cluster's status while others
    # serve (it stays RUNNING); only a cluster that lost every node is FAILED.
    serving = [n for n in members if n not in failed and n not in repairing]
    lost_all = bool(failed) and not serving and not repairing
    if lost_all or state.first_ready_at is None:
        status = derive_cluster_status([NodeStatus(n.status) for n in members])
    else:
        status = derive_cluster_status([NodeStatus(n.status) for n in serving], empty=NodeStatus.RUNNING)
    # Degraded (manual repair, or no automatic repair left): RUNNING and serving, the cluster Degraded.
    degraded = [n for n in serving if n.stage == S.READY and n.degraded_reason is not None]
    reason = "; ".join([f"node {n.name}: {n.status_reason}" for n in failed]
                       + [f"node {n.name}: {n.status_reason or f'degraded: {n.degraded_reason}'}"
                          for n in degraded])
    if (failed or degraded) and not repairing:
        set_cluster_status(cluster, str(status), reason)
        set_phase(ctx.session, cluster, str(ClusterPhase.DEGRADED), ctx.now, reason)
        return
    phase = derive_bring_up_phase([NodeStage(n.stage) for n in serving],
                                  control_plane_ready=_control_plane_ready(cluster, state),
                                  first_bring_up=state.first_ready_at is None)
    if state.images_token is not None and phase in _IMAGE_WAIT_PHASES:
        phase = ClusterPhase.IMPORTING_IMAGES  # nodes up (or waiting after acceptance): images are coming
    if phase == ClusterPhase.READY and state.first_ready_at is None:
        state.first_ready_at = ctx.now
    if repairing and phase == ClusterPhase.READY:
        names = ", ".join(n.name for n in repairing)
        set_cluster_status(cluster, str(status), reason or None)
        set_phase(ctx.session, cluster, str(ClusterPhase.REPAIRING), ctx.now, f"repairing {names}")
        return
    # A failed scale-up explains itself until the next spec change; node faults are derived above.
    kept = cluster.status_reason if (cluster.status_reason or "").startswith(SCALE_UP_FAILED) else None
    set_cluster_status(cluster, str(status), kept)
    set_phase(ctx.session, cluster, str(phase), ctx.now)
