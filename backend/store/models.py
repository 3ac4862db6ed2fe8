"""Core tables: projects, API keys, SSH keys, volumes, clusters, idempotency, rate limits, audit."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from backend.store.base import Base, UtcDateTime
from backend.store.secrets import EncryptedString

ID = String(30)


class Versioned:
    """Rows whose `generation` bumps on every write; the ETag is derived from it."""

    generation: Mapped[int] = mapped_column(Integer, nullable=False, default=1)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)


class Project(Base):
    __tablename__ = "projects"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), nullable=False, unique=True)
    # prepaid (credits bound every charge, exhaustion pauses) | postpaid (invoiced; credits reduce the
    # invoice, nothing pauses). Set by an operator (`set-billing-mode`), never inferred; migration 0022.
    billing_mode: Mapped[str] = mapped_column(
        String(16), nullable=False, default="postpaid", server_default="postpaid"
    )
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)


class ApiKey(Base):
    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), nullable=False)
    # The first characters of the key (shown in listings, used to revoke); the key itself is never stored.
    prefix: Mapped[str] = mapped_column(String(16), nullable=False, unique=True)
    digest: Mapped[str] = mapped_column(String(64), nullable=False)
    role: Mapped[str] = mapped_column(String(16), nullable=False)
    # A team scope (`team=nlp`): the key sees only resources carrying that label (NULL: the whole
    # project). Migration 0010_key_scopes.
    scope_key: Mapped[str | None] = mapped_column(String(63))
    scope_value: Mapped[str | None] = mapped_column(String(63))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)
    revoked_at: Mapped[datetime | None] = mapped_column(UtcDateTime())


class SshKey(Versioned, Base):
    __tablename__ = "ssh_keys"
    __table_args__ = (UniqueConstraint("project_id", "fingerprint", name="uq_ssh_keys_project_fingerprint"),)

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), nullable=False)
    name: Mapped[str] = mapped_column(String(128), nullable=False)
    public_key: Mapped[str] = mapped_column(Text, nullable=False)
    fingerprint: Mapped[str] = mapped_column(String(80), nullable=False)
    key_type: Mapped[str] = mapped_column(String(40), nullable=False)
    # The creating key's scope label (`{"team": "nlp"}`), or {} when an unscoped key made it: what team
    # scopes filter on. Set by the server, not part of the API's input (migration 0010_key_scopes).
    labels: Mapped[dict[str, str]] = mapped_column(JSON, nullable=False, default=dict, server_default="{}")


class Volume(Versioned, Base):
    __tablename__ = "volumes"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), nullable=False)
    name: Mapped[str] = mapped_column(String(128), nullable=False)
    region: Mapped[str] = mapped_column(String(64), nullable=False)
    size_tib: Mapped[int] = mapped_column(Integer, nullable=False)
    # Not needed by the API until billing's credit rules revoke access; kept for them.
    status: Mapped[str] = mapped_column(String(32), nullable=False, default="available")
    # As SshKey.labels: the creating key's scope label, what team scopes filter on.
    labels: Mapped[dict[str, str]] = mapped_column(JSON, nullable=False, default=dict, server_default="{}")


class Cluster(Versioned, Base):
    __tablename__ = "clusters"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), nullable=False)
    name: Mapped[str] = mapped_column(String(63), nullable=False)
    region: Mapped[str] = mapped_column(String(64), nullable=False)
    instance_type: Mapped[str] = mapped_column(String(64), nullable=False)
    node_count: Mapped[int] = mapped_column(Integer, nullable=False)
    orchestrator: Mapped[str] = mapped_column(String(16), nullable=False)
    interconnect: Mapped[str] = mapped_column(String(16), nullable=False)
    # A single-node cluster's container: a catalog alias or an image reference (String(512) since 0027).
    container: Mapped[str | None] = mapped_column(String(512))
    billing_type: Mapped[str] = mapped_column(String(16), nullable=False)
    billing_duration_days: Mapped[int | None] = mapped_column(Integer)
    billing_on_expiry: Mapped[str | None] = mapped_column(String(32))
    # The capacity reservation it draws its nodes from (prepaid; migration 0016), fixed at create.
    reservation_id: Mapped[str | None] = mapped_column(String(30), index=True)
    # The host pool whose servers are its nodes (migration 0029; None: the datacenter's), fixed at create.
    host_pool_id: Mapped[str | None] = mapped_column(String(30), index=True)
    labels: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False, default=dict)
    deletion_protection: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    # Money as integer micro-dollars (exact on every database).
    max_hourly_cost_micros: Mapped[int | None] = mapped_column(BigInteger)
    # Day 2: "auto" replaces a failed node in place (same hostname and fabric position), "manual" leaves
    # it failed until a node action (migration 0007_node_repair).
    node_repair: Mapped[str] = mapped_column(String(8), nullable=False, default="auto", server_default="auto")
    # on_demand | spot | spot_with_fallback (migration 0018_spot_capacity; docs/engine.md "Spot capacity").
    capacity_type: Mapped[str] = mapped_column(String(24), nullable=False, default="on_demand",
                                               server_default="on_demand")
    # Time to live (migration 0011): `ttl` as written ("8h"), the moment the engine deletes the cluster,
    # and the idle time (no Slurm jobs) after which it does. `expiry_blocked_at`: when deletion_protection
    # kept an expired cluster (one audit event and a warning on the cluster; cleared by a new expiry).
    ttl: Mapped[str | None] = mapped_column(String(32))
    expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    idle_teardown_minutes: Mapped[int | None] = mapped_column(Integer)
    expiry_blocked_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    # Autoscaling range (migration 0017): while set, the engine moves node_count between min and max
    # from the Slurm queue, and releases nodes idle for `autoscaling_idle_minutes`.
    autoscaling_min_nodes: Mapped[int | None] = mapped_column(Integer)
    autoscaling_max_nodes: Mapped[int | None] = mapped_column(Integer)
    autoscaling_idle_minutes: Mapped[int | None] = mapped_column(Integer)
    # The Slurm configuration the user declares (partitions, QoS, prolog/epilog; 0025_slurm_config): the
    # API's `slurm_config` with defaults filled in, None when none is declared.
    slurm_config: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # How long a scale-down waits for the jobs on a node it removes before requeueing them (migration
    # 0024_scale_down_grace; backend.provisioning.scale_down).
    scale_down_grace_minutes: Mapped[int] = mapped_column(Integer, nullable=False, default=30,
                                                          server_default="30")
    # Container images (migration 0027): name -> OCI reference as declared; the registry credentials
    # (registry -> {username, password}) as one sealed JSON document, loaded only when an import reads it,
    # and their usernames (registry -> username), what the API returns.
    container_images: Mapped[dict[str, str]] = mapped_column(JSON, nullable=False, default=dict,
                                                             server_default="{}")
    registry_credentials: Mapped[str | None] = mapped_column(EncryptedString(), deferred=True)
    registry_usernames: Mapped[dict[str, str]] = mapped_column(JSON, nullable=False, default=dict,
                                                               server_default="{}")
    # Written by the engine (backend.provisioning); core only sets the initial values.
    status: Mapped[str] = mapped_column(String(32), nullable=False, default="PENDING")
    phase: Mapped[str | None] = mapped_column(String(64))
    status_reason: Mapped[str | None] = mapped_column(Text)
    # Set when the user asks for deletion; the engine tears down and marks the cluster DESTROYED.
    deletion_requested_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    # The reserved IP the login node answers on (migration 0013_reserved_ips); NULL: a floating address
    # from the region's pool. Unique: an address is never on two clusters; cleared when the cluster ends.
    # A reserved IP still attached cannot be deleted (migration 0019 adds the key on PostgreSQL, where
    # writers run concurrently; SQLite runs one writer at a time, so the release's own check holds there).
    reserved_ip_id: Mapped[str | None] = mapped_column(ID, ForeignKey("reserved_ips.id"))

    ssh_key_links: Mapped[list[ClusterSshKey]] = relationship(
        order_by="ClusterSshKey.position", cascade="all, delete-orphan", lazy="selectin"
    )
    volume_links: Mapped[list[ClusterVolume]] = relationship(
        order_by="ClusterVolume.position", cascade="all, delete-orphan", lazy="selectin"
    )
    # None: the project's default group applies (migration 0014_security_groups).
    security_group_links: Mapped[list[ClusterSecurityGroup]] = relationship(
        order_by="ClusterSecurityGroup.position", cascade="all, delete-orphan", lazy="selectin"
    )


class ReservedIp(Versioned, Base):
    """A public address held by the project until released (migration 0013_reserved_ips). Its holder is
    the cluster whose `reserved_ip_id` names it; unattached addresses are in no allocation row, so the
    allocator skips the addresses listed here too."""

    __tablename__ = "reserved_ips"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), nullable=False)
    name: Mapped[str | None] = mapped_column(String(128))
    region: Mapped[str] = mapped_column(String(64), nullable=False)
    address: Mapped[str] = mapped_column(String(45), nullable=False, unique=True)
    # User labels plus, for a scoped key, its scope label (as clusters'): what team scopes filter on.
    labels: Mapped[dict[str, str]] = mapped_column(JSON, nullable=False, default=dict, server_default="{}")


Index("ix_reserved_ips_project_id_id", ReservedIp.project_id, ReservedIp.id)
Index("ix_clusters_reserved_ip_id", Cluster.reserved_ip_id, unique=True)
Index("ix_clusters_project_id_id", Cluster.project_id, Cluster.id)
Index("ix_volumes_project_id_id", Volume.project_id, Volume.id)
Index("ix_ssh_keys_project_id_id", SshKey.project_id, SshKey.id)


class ClusterSshKey(Base):
    __tablename__ = "cluster_ssh_keys"

    cluster_id: Mapped[str] = mapped_column(ForeignKey("clusters.id", ondelete="CASCADE"), primary_key=True)
    ssh_key_id: Mapped[str] = mapped_column(ForeignKey("ssh_keys.id"), primary_key=True, index=True)
    # Keeps the order the user wrote, so the API echoes the list back unchanged.
    position: Mapped[int] = mapped_column(Integer, nullable=False)


class ClusterVolume(Base):
    __tablename__ = "cluster_volumes"

    cluster_id: Mapped[str] = mapped_column(ForeignKey("clusters.id", ondelete="CASCADE"), primary_key=True)
    volume_id: Mapped[str] = mapped_column(ForeignKey("volumes.id"), primary_key=True, index=True)
    position: Mapped[int] = mapped_column(Integer, nullable=False)


class SecurityGroup(Versioned, Base):
    """Firewall rules for clusters' nodes (migration 0014_security_groups). `is_default`: the project's
    default group, created when the first cluster without groups needs it, used by every such cluster."""

    __tablename__ = "security_groups"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), nullable=False)
    name: Mapped[str] = mapped_column(String(128), nullable=False)
    description: Mapped[str | None] = mapped_column(String(256))
    # Lists of rules as the API takes them (protocol, from_port, to_port, cidr_blocks, description).
    ingress: Mapped[list[dict[str, Any]]] = mapped_column(JSON, nullable=False, default=list)
    egress: Mapped[list[dict[str, Any]]] = mapped_column(JSON, nullable=False, default=list)
    is_default: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    # As SshKey.labels: the creating key's scope label, what team scopes filter on.
    labels: Mapped[dict[str, str]] = mapped_column(JSON, nullable=False, default=dict, server_default="{}")


Index("ix_security_groups_project_id_id", SecurityGroup.project_id, SecurityGroup.id)


class ClusterSecurityGroup(Base):
    __tablename__ = "cluster_security_groups"

    cluster_id: Mapped[str] = mapped_column(ForeignKey("clusters.id", ondelete="CASCADE"), primary_key=True)
    security_group_id: Mapped[str] = mapped_column(
        ForeignKey("security_groups.id"), primary_key=True, index=True
    )
    position: Mapped[int] = mapped_column(Integer, nullable=False)


class IdempotencyRecord(Base):
    __tablename__ = "idempotency_records"
    __table_args__ = (UniqueConstraint("project_id", "key", name="uq_idempotency_records_project_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), nullable=False)
    key: Mapped[str] = mapped_column(String(255), nullable=False)
    # What the key was first used for: method, path and a digest of the body.
    request_fingerprint: Mapped[str] = mapped_column(String(64), nullable=False)
    response_status: Mapped[int] = mapped_column(Integer, nullable=False)
    response_body: Mapped[str] = mapped_column(Text, nullable=False)
    response_headers: Mapped[dict[str, str]] = mapped_column(JSON, nullable=False, default=dict)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False, index=True)


class RateLimitCounter(Base):
    __tablename__ = "rate_limit_counters"

    api_key_id: Mapped[str] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"), primary_key=True)
    window_start: Mapped[int] = mapped_column(Integer, primary_key=True)  # unix seconds
    count: Mapped[int] = mapped_column(Integer, nullable=False, default=0)


class AuditEvent(Base):
    __tablename__ = "audit_events"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), nullable=False)
    occurred_at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)
    # Who: the API key prefix (or "cli" for the command line).
    actor: Mapped[str] = mapped_column(String(32), nullable=False)
    action: Mapped[str] = mapped_column(String(64), nullable=False)
    resource_type: Mapped[str] = mapped_column(String(32), nullable=False)
    resource_id: Mapped[str | None] = mapped_column(String(64))
    request_id: Mapped[str | None] = mapped_column(String(64))
    details: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False, default=dict)


Index("ix_audit_events_project_id_id", AuditEvent.project_id, AuditEvent.id)
