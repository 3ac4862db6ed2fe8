"""What billing does to clusters, through the core's and the engine's public entry points, and how it
leaves a trace: a phase history entry on the cluster and an audit event, both at billing's clock time.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from sqlalchemy.orm import Session

from backend.domain.clock import ensure_utc
from backend.store.audit_log import add_event
from backend.store.engine_models import PhaseRecord
from backend.store.models import Cluster

ACTOR = "billing"


class ClusterEngine(Protocol):
    """The provisioning engine's entry points billing acts through (`backend.provisioning.engine`).
    Billing and provisioning are independent layers: the runtime installs the engine here (`use_engine`)."""

    def request_reconcile(self, session: Session, cluster_id: str, *, now: datetime | None = None
                          ) -> None: ...

    def pause_cluster(self, session: Session, cluster_id: str, reason: str, *, now: datetime | None = None
                      ) -> None: ...

    def resume_cluster(self, session: Session, cluster_id: str, reason: str, *, now: datetime | None = None
                       ) -> None: ...


class _NoEngine:
    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"billing cannot {name}: no provisioning engine is installed (backend.runtime "
                           "installs it when the process starts)")


engine_hooks: ClusterEngine = _NoEngine()


def use_engine(engine: ClusterEngine) -> None:
    """Install the engine billing acts through (the runtime does, once at start)."""
    global engine_hooks
    engine_hooks = engine


def record_phase(session: Session, *, cluster_id: str, phase: str, detail: str, at: datetime) -> None:
    """Append a billing step to the cluster's phase history (shown with the engine's own phases)."""
    session.add(PhaseRecord(cluster_id=cluster_id, phase=phase, detail=detail, at=ensure_utc(at)))


def record_audit(
    session: Session,
    *,
    project_id: str,
    action: str,
    resource_type: str,
    resource_id: str | None,
    at: datetime,
    details: dict[str, Any],
) -> None:
    """An audit event written by billing (actor "billing", no request id)."""
    add_event(session, project_id=project_id, actor=ACTOR, action=action, resource_type=resource_type,
              resource_id=resource_id, at=ensure_utc(at), details=details)


def decommission(session: Session, *, cluster: Cluster, reason: str, at: datetime) -> bool:
    """Tear the cluster down as a user delete would; False when `deletion_protection` forbids it (the
    user's protection is respected: the caller keeps the cluster unbilled or bills it on-demand)."""
    if cluster.deletion_requested_at is not None:
        return True
    if cluster.deletion_protection:
        record_phase(
            session,
            cluster_id=cluster.id,
            phase="DecommissionBlocked",
            detail=f"{reason}; deletion_protection is on, so the cluster is kept",
            at=at,
        )
        return False
    cluster.deletion_requested_at = ensure_utc(at)
    cluster.generation = cluster.generation + 1
    cluster.updated_at = ensure_utc(at)
    session.flush()
    engine_hooks.request_reconcile(session, cluster.id)
    record_phase(session, cluster_id=cluster.id, phase="Decommissioning", detail=reason, at=at)
    return True


def pause(session: Session, *, cluster: Cluster, reason: str, at: datetime) -> None:
    """Have the engine pause the cluster; billing stops metering a held cluster from `at`
    (see `credit holds` in docs/billing.md)."""
    record_phase(session, cluster_id=cluster.id, phase="Paused", detail=reason, at=at)
    engine_hooks.pause_cluster(session, cluster.id, reason)


def resume(session: Session, *, cluster: Cluster, reason: str, at: datetime) -> None:
    """Undo `pause` once credits are back."""
    record_phase(session, cluster_id=cluster.id, phase="Resumed", detail=reason, at=at)
    engine_hooks.resume_cluster(session, cluster.id, reason)
