"""Host pools (migration 0028_host_pools): a project's own Linux servers, reached over SSH with the key the
project gave (sealed at rest, never returned), and what the backend's checks last found on each host.

A host's check is claimed by a worker like an engine work item (`probe_due_at`, a lease with an owner), so
several workers never check one host at once and a worker killed mid-check leaves it to the next one.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from backend.store.base import Base, UtcDateTime
from backend.store.models import ID, Versioned
from backend.store.secrets import EncryptedString


class HostPool(Versioned, Base):
    __tablename__ = "host_pools"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), nullable=False)
    name: Mapped[str] = mapped_column(String(128), nullable=False)
    region: Mapped[str] = mapped_column(String(64), nullable=False)
    ssh_user: Mapped[str] = mapped_column(String(32), nullable=False)
    ssh_port: Mapped[int] = mapped_column(Integer, nullable=False)
    # Write-only in the API: read only by the worker that connects (deferred: a GET never opens it).
    ssh_private_key: Mapped[str] = mapped_column(EncryptedString(), nullable=False, deferred=True)
    ssh_public_key: Mapped[str] = mapped_column(Text, nullable=False)
    ssh_key_fingerprint: Mapped[str] = mapped_column(String(80), nullable=False)
    proxy_jump: Mapped[str | None] = mapped_column(String(300))
    shared_storage_path: Mapped[str | None] = mapped_column(String(1024))
    install_packages: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    # User labels plus the creating key's team label: what team scopes filter on.
    labels: Mapped[dict[str, str]] = mapped_column(JSON, nullable=False, default=dict)


class HostPoolHost(Base):
    __tablename__ = "host_pool_hosts"
    __table_args__ = (Index("ix_host_pool_hosts_pool", "pool_id", "position"),
                      Index("ix_host_pool_hosts_probe_due", "probe_due_at"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    pool_id: Mapped[str] = mapped_column(ForeignKey("host_pools.id", ondelete="CASCADE"), nullable=False)
    position: Mapped[int] = mapped_column(Integer, nullable=False)  # the order the user listed hosts in
    address: Mapped[str] = mapped_column(String(255), nullable=False)
    port: Mapped[int | None] = mapped_column(Integer)  # NULL: the pool's ssh_port
    # pending | ready | degraded | unreachable (backend.domain.host_pools.HOST_STATUSES)
    status: Mapped[str] = mapped_column(String(16), nullable=False, default="pending")
    reason_code: Mapped[str | None] = mapped_column(String(32))
    reason: Mapped[str | None] = mapped_column(Text)
    # The host's SSH key (`ssh-ed25519 AAAA...`): pinned by the user, or the first one seen (then required).
    host_key: Mapped[str | None] = mapped_column(Text)
    inventory: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    checked_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    probe_due_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    probe_lease_owner: Mapped[str | None] = mapped_column(String(128))
    probe_lease_expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    # Bumped when what the check must use changes (new key, user, port): a check that began before does
    # not write its result over the new state.
    probe_generation: Mapped[int] = mapped_column(Integer, nullable=False, default=1)
    # The engine node the host is lent to (migration 0029); None: free for a cluster of the pool.
    node_id: Mapped[str | None] = mapped_column(ForeignKey("engine_nodes.id", ondelete="SET NULL"),
                                                unique=True)
    # The pool's bastion's host key as this host's first check through it saw it (known_hosts lines under
    # the bastion's alias; migration 0030), then required; None: no bastion, or not reached through it yet.
    jump_known_hosts: Mapped[str | None] = mapped_column(Text)
