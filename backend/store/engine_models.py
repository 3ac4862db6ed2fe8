"""Engine tables: nodes, their transition history, allocations, phases, the work queue and workers.

Invariants live in constraints, not in code paths: one allocation row per (kind, pool, value) makes
double allocation of a node slot, partition key, subnet or IP impossible; releasing is deleting the row,
so a leak is a row whose cluster is gone or finished (the tests look for exactly that).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import Mapped, mapped_column

from backend.store.base import Base, UtcDateTime
from backend.store.models import ID
from backend.store.secrets import EncryptedString

CLUSTER_FK = "clusters.id"


class EngineCluster(Base):
    """What the engine has built for one cluster (the actual state next to core's desired spec)."""

    __tablename__ = "engine_clusters"

    cluster_id: Mapped[str] = mapped_column(ForeignKey(CLUSTER_FK, ondelete="CASCADE"), primary_key=True)
    fabric: Mapped[str] = mapped_column(String(64), nullable=False)
    # The cluster name at admission: hostnames keep it even if the cluster is renamed later.
    hostname_prefix: Mapped[str] = mapped_column(String(63), nullable=False)
    subnet: Mapped[str] = mapped_column(String(43), nullable=False)
    partition_key: Mapped[str | None] = mapped_column(String(8))
    public_ip: Mapped[str | None] = mapped_column(String(45))
    jumphost_ip: Mapped[str | None] = mapped_column(String(45))
    # Control plane (jumphost with slurmctld / Kubernetes API):
    # absent | creating | ready | releasing | released
    control_plane: Mapped[str] = mapped_column(String(16), nullable=False, default="absent")
    control_plane_op: Mapped[str | None] = mapped_column(String(160))
    control_plane_ready_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    kube_ca_cert_pem: Mapped[str | None] = mapped_column(Text)
    # Secret, served only by /credentials: sealed at rest (backend.store.secrets), loaded only when read.
    kube_admin_token: Mapped[str | None] = mapped_column(EncryptedString(128), deferred=True)
    # When the token lapses unless renewed (NULL: never leased; the next read issues a fresh one).
    kube_admin_token_expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    # Batch of nodes that must all pass acceptance before any of them starts (all or nothing).
    current_batch: Mapped[int] = mapped_column(Integer, nullable=False, default=1)
    first_ready_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    # A create that could not be completed: teardown in progress / done, cluster ends FAILED.
    rollback_reason: Mapped[str | None] = mapped_column(Text)
    # A scale-up that could not be completed for this spec generation (not retried until the spec changes).
    blocked_generation: Mapped[int | None] = mapped_column(Integer)
    membership_version: Mapped[int] = mapped_column(Integer, nullable=False, default=1)
    # Set while billing holds the cluster (credits exhausted): no changes are applied until resumed.
    paused_reason: Mapped[str | None] = mapped_column(Text)
    # Spot (0018): until then the spot market has no capacity for this cluster (it reclaimed some).
    spot_reclaimed_until: Mapped[datetime | None] = mapped_column(UtcDateTime())
    # Migration 0026_ssh_host_keys. The jumphost's SSH host key (OpenSSH public-key line) as the driver
    # reported it when the control plane came up; NULL: not known (no jumphost, or not up yet).
    login_host_key: Mapped[str | None] = mapped_column(Text)
    # Container images (0027). What /images/<name> shows: name -> {reference, digest, size_bytes, state,
    # reason, updated_at}; the import under way (token of images_seq); the declared set whose import
    # failed, not retried until the declaration changes (or a PATCH repeats it).
    images: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False, default=dict, server_default="{}")
    images_token: Mapped[str | None] = mapped_column(String(200))
    images_seq: Mapped[int] = mapped_column(Integer, nullable=False, default=0, server_default="0")
    images_failed: Mapped[dict[str, str] | None] = mapped_column(JSON)
    finished: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)


class EngineNode(Base):
    __tablename__ = "engine_nodes"
    __table_args__ = (
        UniqueConstraint("cluster_id", "active_name", name="uq_engine_nodes_cluster_active_name"),
    )

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    cluster_id: Mapped[str] = mapped_column(ForeignKey(CLUSTER_FK, ondelete="CASCADE"), nullable=False,
                                            index=True)
    name: Mapped[str] = mapped_column(String(80), nullable=False)
    # = name while the node is a member of the cluster; NULL once replaced, removed or released, so a
    # name is never held by two live nodes of one cluster.
    active_name: Mapped[str | None] = mapped_column(String(80))
    index: Mapped[int] = mapped_column(Integer, nullable=False)
    batch: Mapped[int] = mapped_column(Integer, nullable=False)
    region: Mapped[str] = mapped_column(String(64), nullable=False)
    fabric: Mapped[str] = mapped_column(String(64), nullable=False)
    instance_type: Mapped[str] = mapped_column(String(64), nullable=False)
    gpu_count: Mapped[int] = mapped_column(Integer, nullable=False)
    slot: Mapped[int] = mapped_column(Integer, nullable=False)
    scalable_unit: Mapped[int] = mapped_column(Integer, nullable=False)
    private_ip: Mapped[str] = mapped_column(String(45), nullable=False)
    public_ip: Mapped[str | None] = mapped_column(String(45))
    status: Mapped[str] = mapped_column(String(24), nullable=False)
    stage: Mapped[str] = mapped_column(String(24), nullable=False)
    status_reason: Mapped[str | None] = mapped_column(Text)
    # The stage's driver operation (client token) and when it is due; NULL = not submitted yet.
    op_token: Mapped[str | None] = mapped_column(String(160))
    op_ready_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    # 1 for the first node at this index, +1 for each replacement (seeds the simulated faults).
    attempt: Mapped[int] = mapped_column(Integer, nullable=False, default=1)
    # Bumped on every driver submission: makes each operation's client token unique and deterministic.
    op_seq: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    # Config applied on the node: ssh_key_ids, volume_ids, container (day-2 changes diff against it).
    applied_config: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False, default=dict)
    watch_token: Mapped[str | None] = mapped_column(String(160))
    watch_due_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    # Day 2 (migration 0007_node_repair). The failed node this one replaces in place (same name, index
    # and IP); NULL for a node of a create or scale-up.
    repair_of: Mapped[str | None] = mapped_column(ID)
    # Drained in the orchestrator (Slurm DRAIN / Kubernetes cordon): takes no new work.
    drained: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False, server_default=false())
    # A node action accepted by the API and not yet carried out by the reconciler (restart | replace).
    pending_action: Mapped[str | None] = mapped_column(String(16))
    # Migration 0008_node_degraded. Why the node's latest readings say it is degraded (hardware XID, ECC,
    # thermal, NVLink / InfiniBand link down), written by the metrics sampler; NULL: healthy readings.
    degraded_reason: Mapped[str | None] = mapped_column(Text)
    # Migration 0018_spot_capacity. The capacity the node runs on (on_demand | spot) for its whole life;
    # for a spot node, when the market reclaims it (NULL: not drawn yet, or never) and when its notice
    # went out.
    capacity_type: Mapped[str] = mapped_column(String(16), nullable=False, default="on_demand",
                                               server_default="on_demand")
    preempt_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    preempt_notice_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    # Migration 0026_ssh_host_keys. The machine's SSH host key (OpenSSH public-key line) as the driver
    # reported it when the node booted; NULL: not known yet.
    host_key: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)


class NodeTransition(Base):
    """Append-only status history of every node; billing meters RUNNING intervals from it."""

    __tablename__ = "engine_node_transitions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    node_id: Mapped[str] = mapped_column(ForeignKey("engine_nodes.id", ondelete="CASCADE"), nullable=False,
                                         index=True)
    cluster_id: Mapped[str] = mapped_column(ForeignKey(CLUSTER_FK, ondelete="CASCADE"), nullable=False,
                                            index=True)
    project_id: Mapped[str] = mapped_column(ID, nullable=False, index=True)
    node_name: Mapped[str] = mapped_column(String(80), nullable=False)
    instance_type: Mapped[str] = mapped_column(String(64), nullable=False)
    region: Mapped[str] = mapped_column(String(64), nullable=False)
    gpu_count: Mapped[int] = mapped_column(Integer, nullable=False)
    # The capacity the node ran on (0018): billing meters its RUNNING time at that capacity's rate.
    capacity_type: Mapped[str] = mapped_column(String(16), nullable=False, default="on_demand",
                                               server_default="on_demand")
    from_status: Mapped[str | None] = mapped_column(String(24))
    to_status: Mapped[str] = mapped_column(String(24), nullable=False)
    reason: Mapped[str | None] = mapped_column(Text)
    at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False, index=True)


class NodeEvent(Base):
    """Append-only history of one node of a cluster, by its stable name (migration 0023_node_events; see
    backend/provisioning/node_history.py): faults, repairs, restarts, node actions and who asked, each
    naming the machine (`node_id`) it was about. Kept with the cluster (deleted with its rows)."""

    __tablename__ = "engine_node_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    cluster_id: Mapped[str] = mapped_column(ForeignKey(CLUSTER_FK, ondelete="CASCADE"), nullable=False)
    node_name: Mapped[str] = mapped_column(String(80), nullable=False)
    node_id: Mapped[str | None] = mapped_column(ID)
    kind: Mapped[str] = mapped_column(String(24), nullable=False)
    code: Mapped[int | None] = mapped_column(Integer)  # the XID code of an `xid` event
    detail: Mapped[str] = mapped_column(Text, nullable=False)
    actor: Mapped[str] = mapped_column(String(64), nullable=False)  # an API key prefix, or "engine"
    at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)


# One node's history, newest first, page by page: an index range scan.
Index("ix_engine_node_events_cluster_node", NodeEvent.cluster_id, NodeEvent.node_name, NodeEvent.id)


class PhaseRecord(Base):
    __tablename__ = "engine_phase_history"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    cluster_id: Mapped[str] = mapped_column(ForeignKey(CLUSTER_FK, ondelete="CASCADE"), nullable=False,
                                            index=True)
    phase: Mapped[str] = mapped_column(String(40), nullable=False)
    detail: Mapped[str | None] = mapped_column(Text)
    at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)


class Allocation(Base):
    """One held resource: kind slot|partition_key|subnet|public_ip|private_ip in a pool."""

    __tablename__ = "engine_allocations"
    __table_args__ = (
        UniqueConstraint("kind", "pool", "value", name="uq_engine_allocations_kind_pool_value"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(16), nullable=False)
    pool: Mapped[str] = mapped_column(String(160), nullable=False)
    value: Mapped[str] = mapped_column(String(64), nullable=False)
    cluster_id: Mapped[str] = mapped_column(ForeignKey(CLUSTER_FK, ondelete="CASCADE"), nullable=False,
                                            index=True)
    node_id: Mapped[str | None] = mapped_column(ID, index=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)


# "Which of these values are held, and in which pool?" without reading every row of the kind or pool
# (0008; see `capacity.held_values`). Lookups by (kind, pool) use the unique index (0008 dropped the
# (kind, pool) one).
Index("ix_engine_allocations_kind_value", Allocation.kind, Allocation.value, Allocation.pool)


class SlotPool(Base):
    """Free node slots of one pool (region/fabric/instance type), kept in step with its slot allocations
    under the pool's lock, so placement reads counters instead of every held slot (migration
    0012_allocation_counters). `capacity` and `nodes_per_su` are the catalog geometry they count;
    when the catalog says otherwise they are recounted from the allocation rows."""

    __tablename__ = "engine_slot_pools"

    pool: Mapped[str] = mapped_column(String(160), primary_key=True)
    capacity: Mapped[int] = mapped_column(Integer, nullable=False)
    nodes_per_su: Mapped[int] = mapped_column(Integer, nullable=False)
    free: Mapped[int] = mapped_column(Integer, nullable=False)


class SlotUnit(Base):
    """Free node slots of one scalable unit of a pool (pool-local SU index `unit`)."""

    __tablename__ = "engine_slot_units"

    pool: Mapped[str] = mapped_column(ForeignKey("engine_slot_pools.pool", ondelete="CASCADE"),
                                      primary_key=True)
    unit: Mapped[int] = mapped_column(Integer, primary_key=True)
    free: Mapped[int] = mapped_column(Integer, nullable=False)


# Best fit ("the fullest SU that still holds n") and "most free first" are index range scans.
Index("ix_engine_slot_units_pool_free", SlotUnit.pool, SlotUnit.free, SlotUnit.unit)


class AllocationCursor(Base):
    """Where the search for the next free partition key, subnet or public IP of a block starts: just
    past the value handed out last (a next-free pointer; the allocation rows stay the truth)."""

    __tablename__ = "engine_allocation_cursors"

    name: Mapped[str] = mapped_column(String(160), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, nullable=False)


class EngineLock(Base):
    """Rows locked (UPDATE) to serialise allocation from one pool across API replicas and workers."""

    __tablename__ = "engine_locks"

    name: Mapped[str] = mapped_column(String(160), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, nullable=False, default=0)


class WorkItem(Base):
    """One per cluster: reconcile it when `due_at` passes. Leased to one worker at a time; every claim
    bumps `fencing_token`, and a pass commits only if the token is still its own."""

    __tablename__ = "engine_work"

    cluster_id: Mapped[str] = mapped_column(ForeignKey(CLUSTER_FK, ondelete="CASCADE"), primary_key=True)
    due_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), index=True)
    lease_owner: Mapped[str | None] = mapped_column(String(80))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    fencing_token: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    passes: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    last_error: Mapped[str | None] = mapped_column(Text)


class Step(Base):
    """Every driver operation the engine asked for, keyed by its deterministic client token."""

    __tablename__ = "engine_steps"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    client_token: Mapped[str] = mapped_column(String(160), nullable=False, unique=True)
    cluster_id: Mapped[str] = mapped_column(ForeignKey(CLUSTER_FK, ondelete="CASCADE"), nullable=False,
                                            index=True)
    node_id: Mapped[str | None] = mapped_column(ID)
    kind: Mapped[str] = mapped_column(String(32), nullable=False)
    submitted_at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)
    ready_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    outcome: Mapped[str | None] = mapped_column(String(16))  # succeeded | failed, once observed
    reason: Mapped[str | None] = mapped_column(Text)
    worker: Mapped[str] = mapped_column(String(80), nullable=False)
    fencing_token: Mapped[int] = mapped_column(Integer, nullable=False)


class Worker(Base):
    __tablename__ = "engine_workers"

    id: Mapped[str] = mapped_column(String(80), primary_key=True)
    started_at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)
    heartbeat_at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)
    passes: Mapped[int] = mapped_column(Integer, nullable=False, default=0)


class SimulatedOperation(Base):
    """The modelled datacenter's own record of operations (what real hardware APIs would keep)."""

    __tablename__ = "sim_operations"

    client_token: Mapped[str] = mapped_column(String(160), primary_key=True)
    kind: Mapped[str] = mapped_column(String(32), nullable=False)
    submitted_at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)
    ready_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    succeeded: Mapped[bool] = mapped_column(Boolean, nullable=False)
    reason: Mapped[str | None] = mapped_column(Text)


class NodeMetricChunk(Base):
    """A ring buffer of one node's GPU samples (migration 0007_node_repair; see
    backend/provisioning/node_metrics.py): per tier a fixed number of chunks, each `SAMPLES_PER_CHUNK`
    packed samples, overwritten when the ring comes round, so storage per node is constant and needs no
    retention job."""

    __tablename__ = "node_metric_chunks"

    cluster_id: Mapped[str] = mapped_column(ForeignKey(CLUSTER_FK, ondelete="CASCADE"), primary_key=True)
    node_name: Mapped[str] = mapped_column(String(80), primary_key=True)
    tier: Mapped[int] = mapped_column(Integer, primary_key=True)
    slot: Mapped[int] = mapped_column(Integer, primary_key=True)  # chunk number modulo the ring size
    started_at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)
    data: Mapped[bytes] = mapped_column(LargeBinary, nullable=False)
