"""Node and cluster lifecycle: statuses, allowed transitions, the cluster status rule and phases.

Per-node statuses are TensorPool's plus PAUSED (powered off while the project is out of credits); a
cluster's status is derived from its member nodes by their
priority rule. Within a status the engine tracks a finer `NodeStage` (what the node is doing now); the
cluster `phase` summarises the stages of its nodes and control plane.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from enum import StrEnum


class NodeStatus(StrEnum):
    PENDING = "PENDING"
    PROVISIONING = "PROVISIONING"
    CONFIGURING = "CONFIGURING"
    CONTAINER_CREATING = "CONTAINER_CREATING"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"  # powered off while its project is out of credits: capacity kept, not metered
    DESTROYING = "DESTROYING"
    DESTROYED = "DESTROYED"
    FAILED = "FAILED"


S = NodeStatus
TRANSITIONS: dict[NodeStatus, frozenset[NodeStatus]] = {
    S.PENDING: frozenset({S.PROVISIONING, S.DESTROYING, S.FAILED}),
    S.PROVISIONING: frozenset({S.CONFIGURING, S.DESTROYING, S.FAILED}),
    S.CONFIGURING: frozenset({S.CONTAINER_CREATING, S.RUNNING, S.PAUSED, S.DESTROYING, S.FAILED}),
    S.CONTAINER_CREATING: frozenset({S.RUNNING, S.PAUSED, S.DESTROYING, S.FAILED}),
    # Day 2: storage and SSH key changes reconfigure (CONFIGURING), a new image recreates the container.
    # A credit pause powers running nodes off (PAUSED); resuming powers them on (CONFIGURING -> RUNNING).
    S.RUNNING: frozenset({S.CONFIGURING, S.CONTAINER_CREATING, S.PAUSED, S.DESTROYING, S.FAILED}),
    S.PAUSED: frozenset({S.CONFIGURING, S.DESTROYING, S.FAILED}),
    S.DESTROYING: frozenset({S.DESTROYED, S.FAILED}),
    # Day 2: a failed node may be restarted in place (a reboot clears most XID faults).
    S.FAILED: frozenset({S.CONFIGURING, S.DESTROYING}),
    S.DESTROYED: frozenset(),
}

# TensorPool's rule: the cluster shows the highest-priority status among its nodes.
CLUSTER_STATUS_PRIORITY: tuple[NodeStatus, ...] = (
    S.FAILED, S.DESTROYING, S.PAUSED, S.PENDING, S.PROVISIONING, S.CONFIGURING, S.CONTAINER_CREATING,
    S.RUNNING, S.DESTROYED,
)


class InvalidTransition(ValueError):
    """A node was asked to move along an edge the state machine does not have."""


def can_transition(current: NodeStatus, target: NodeStatus) -> bool:
    return target in TRANSITIONS[current]


def check_transition(current: NodeStatus, target: NodeStatus) -> None:
    if not can_transition(current, target):
        raise InvalidTransition(f"node cannot go from {current} to {target}")


def derive_cluster_status(node_statuses: Iterable[NodeStatus | str], *, empty: NodeStatus = S.PENDING
                          ) -> NodeStatus:
    """The cluster status by priority over its member nodes; `empty` when it has none (yet or anymore)."""
    present = {NodeStatus(s) for s in node_statuses}
    for status in CLUSTER_STATUS_PRIORITY:
        if status in present:
            return status
    return empty


class NodeStage(StrEnum):
    """What a node is doing, in order; each stage maps to one status."""

    QUEUED = "queued"
    BOOTING = "booting"  # power-on, PXE, image
    FABRIC = "fabric"  # IB partition programming / EFA attach
    DRIVERS = "drivers"  # drivers / CUDA
    VOLUMES = "volumes"  # shared volume attach
    JOINING = "joining"  # kubelet / slurmd joins the orchestrator
    ACCEPTANCE = "acceptance"  # DCGM diag, NCCL all_reduce
    ACCEPTED = "accepted"  # passed; waits for the rest of its batch (all or nothing)
    CONTAINER = "container"  # container / runtime start
    READY = "ready"
    RECONFIGURING = "reconfiguring"  # day 2: volume or SSH key change on a running node
    RECREATING_CONTAINER = "recreating_container"  # day 2: new container image in place
    POWERING_OFF = "powering_off"  # credit pause: the node is shut down, its capacity kept
    POWERED_OFF = "powered_off"
    POWERING_ON = "powering_on"  # resumed: power-on and boot from the installed image
    RESTARTING = "restarting"  # day 2: a node action reboots the machine in place
    RELEASING = "releasing"  # power-off, wipe, return to the pool
    RELEASED = "released"
    FAILED = "failed"


STAGE_STATUS: dict[NodeStage, NodeStatus] = {
    NodeStage.QUEUED: S.PENDING,
    NodeStage.BOOTING: S.PROVISIONING,
    NodeStage.FABRIC: S.CONFIGURING,
    NodeStage.DRIVERS: S.CONFIGURING,
    NodeStage.VOLUMES: S.CONFIGURING,
    NodeStage.JOINING: S.CONFIGURING,
    NodeStage.ACCEPTANCE: S.CONFIGURING,
    NodeStage.ACCEPTED: S.CONFIGURING,
    NodeStage.CONTAINER: S.CONTAINER_CREATING,
    NodeStage.READY: S.RUNNING,
    NodeStage.RECONFIGURING: S.CONFIGURING,
    NodeStage.RECREATING_CONTAINER: S.CONTAINER_CREATING,
    NodeStage.POWERING_OFF: S.PAUSED,
    NodeStage.POWERED_OFF: S.PAUSED,
    NodeStage.POWERING_ON: S.CONFIGURING,
    NodeStage.RESTARTING: S.CONFIGURING,
    NodeStage.RELEASING: S.DESTROYING,
    NodeStage.RELEASED: S.DESTROYED,
    NodeStage.FAILED: S.FAILED,
}


def bring_up_stages(*, fabric: bool, volumes: bool, orchestrator: bool) -> list[NodeStage]:
    """The stages a new node walks through, in order, for a cluster of this kind."""
    stages = [NodeStage.BOOTING]
    if fabric:
        stages.append(NodeStage.FABRIC)
    stages.append(NodeStage.DRIVERS)
    if volumes:
        stages.append(NodeStage.VOLUMES)
    if orchestrator:
        stages.append(NodeStage.JOINING)
    stages += [NodeStage.ACCEPTANCE, NodeStage.ACCEPTED, NodeStage.CONTAINER, NodeStage.READY]
    return stages


class ClusterPhase(StrEnum):
    ADMITTED = "Admitted"
    WAITING_FOR_CONTROL_PLANE = "WaitingForControlPlane"
    PROVISIONING_NODES = "ProvisioningNodes"
    PROGRAMMING_FABRIC = "ProgrammingFabric"
    INSTALLING_DRIVERS = "InstallingDrivers"
    ATTACHING_VOLUMES = "AttachingVolumes"
    CONFIGURING_ORCHESTRATOR = "ConfiguringOrchestrator"
    RUNNING_ACCEPTANCE_TESTS = "RunningAcceptanceTests"
    STARTING_CONTAINERS = "StartingContainers"
    IMPORTING_IMAGES = "ImportingImages"  # container images pulled onto the cluster's shared storage
    RESUMING = "Resuming"
    READY = "Ready"
    SCALING = "Scaling"
    RECONFIGURING = "Reconfiguring"
    DEGRADED = "Degraded"
    REPAIRING = "Repairing"  # a failed node is being replaced or restarted; the others keep running
    PAUSED = "Paused"
    ROLLING_BACK = "RollingBack"
    DELETING = "Deleting"
    DELETED = "Deleted"
    FAILED = "Failed"


STAGE_PHASE: dict[NodeStage, ClusterPhase] = {
    NodeStage.QUEUED: ClusterPhase.PROVISIONING_NODES,
    NodeStage.BOOTING: ClusterPhase.PROVISIONING_NODES,
    NodeStage.FABRIC: ClusterPhase.PROGRAMMING_FABRIC,
    NodeStage.DRIVERS: ClusterPhase.INSTALLING_DRIVERS,
    NodeStage.VOLUMES: ClusterPhase.ATTACHING_VOLUMES,
    NodeStage.JOINING: ClusterPhase.CONFIGURING_ORCHESTRATOR,
    NodeStage.ACCEPTANCE: ClusterPhase.RUNNING_ACCEPTANCE_TESTS,
    NodeStage.ACCEPTED: ClusterPhase.RUNNING_ACCEPTANCE_TESTS,
    NodeStage.CONTAINER: ClusterPhase.STARTING_CONTAINERS,
    # After a pause (the reconciler shows `Paused` itself while the hold lasts).
    NodeStage.POWERING_OFF: ClusterPhase.RESUMING,
    NodeStage.POWERED_OFF: ClusterPhase.RESUMING,
    NodeStage.POWERING_ON: ClusterPhase.RESUMING,
    NodeStage.READY: ClusterPhase.READY,
    NodeStage.RECONFIGURING: ClusterPhase.RECONFIGURING,
    NodeStage.RECREATING_CONTAINER: ClusterPhase.RECONFIGURING,
}
_PHASE_ORDER = list(STAGE_PHASE.values())
# Day-2 phases of nodes that were up before: never shown as `Scaling`.
READY_LIKE_PHASES = (ClusterPhase.READY, ClusterPhase.RECONFIGURING, ClusterPhase.RESUMING)


def derive_bring_up_phase(stages: Iterable[NodeStage], *, control_plane_ready: bool,
                          first_bring_up: bool) -> ClusterPhase:
    """The phase of a cluster whose nodes are coming up: the least advanced node decides."""
    present = [s for s in stages if s in STAGE_PHASE]
    if not present:
        return ClusterPhase.READY if control_plane_ready else ClusterPhase.WAITING_FOR_CONTROL_PLANE
    phase = min((STAGE_PHASE[s] for s in present), key=_PHASE_ORDER.index)
    joining = _PHASE_ORDER.index(ClusterPhase.CONFIGURING_ORCHESTRATOR)
    if not control_plane_ready and _PHASE_ORDER.index(phase) >= joining:
        return ClusterPhase.WAITING_FOR_CONTROL_PLANE
    if not first_bring_up and phase not in READY_LIKE_PHASES:
        return ClusterPhase.SCALING
    return phase


NODE_NAMES_LISTED_UP_TO = 10  # an unknown node's error lists every name of clusters this small


def no_such_node(cluster: str, name: str, names: Iterable[str]) -> str:
    """Why `name` names no node of `cluster`, for a mistyped name: the closest names, and every name
    when the cluster is small (an empty cluster says so)."""
    known = sorted(names)
    if not known:
        return f"cluster {cluster} has no node named {name!r}: it has no nodes now"
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    hint = f"; did you mean {' or '.join(close)}?" if close else "."
    if len(known) <= NODE_NAMES_LISTED_UP_TO:
        return f"cluster {cluster} has no node named {name!r}{hint} Its nodes: {', '.join(known)}"
    return (f"cluster {cluster} has no node named {name!r}{hint} It has {len(known)} nodes "
            f"({known[0]} ... {known[-1]}; `gpucloud nodes {cluster}` lists them)")
