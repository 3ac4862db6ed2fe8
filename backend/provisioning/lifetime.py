"""Time to live: the engine deletes a cluster at `expires_at`, or once a Slurm cluster has had no job
for `idle_teardown_minutes`, as a user delete would; under `deletion_protection` it keeps the cluster
instead, with one audit event (`cluster.expiry_blocked`) and a warning on the cluster.

The reconciler calls `expire_if_due` at the start of every pass and wakes the cluster at its expiry
(and, while a watched cluster is busy, every `idle_check_seconds` to read its queue again).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from backend.domain.lifecycle import NodeStatus
from backend.provisioning import node_views
from backend.provisioning.driver import ProvisioningDriver, workload_of
from backend.provisioning.state import aware
from backend.store.audit_log import add_event
from backend.store.engine_models import PhaseRecord
from backend.store.models import Cluster

ACTOR = "engine"
# A failed or paused cluster runs no jobs of its own will: it is not torn down for being idle.
WITHOUT_IDLE_WATCH = (str(NodeStatus.FAILED), str(NodeStatus.PAUSED))


def expire_if_due(
    *,
    session: Any,
    driver: ProvisioningDriver,
    cluster: Cluster,
    now: dt.datetime,
    idle_check: dt.timedelta,
    due: list[dt.datetime],
) -> bool:
    """Request the deletion of a cluster whose time is up (True); else append when to look again."""
    if cluster.deletion_requested_at is not None:
        return False
    reason, moment = _expiry(cluster, now)
    if reason is None or moment is None:
        idle = _idle_due(session, driver, cluster, now, idle_check)
        if idle is None or idle[0] > now:
            due.extend(t for t in (cluster.expires_at, idle[0] if idle else None) if t is not None)
            return False
        moment, reason = idle
    if cluster.deletion_protection:
        _block(session, cluster, reason, moment, now)
        return False
    cluster.deletion_requested_at = now
    cluster.generation += 1
    cluster.updated_at = now
    session.add(PhaseRecord(cluster_id=cluster.id, phase="Expired", detail=reason, at=now))
    _audit(session, cluster, "cluster.expired", now, {"reason": reason, "expired_at": _iso(moment)})
    return True


def lifetime_warnings(row: Any) -> list[str]:
    """The cluster's warnings (for the API): an expiry that deletion_protection blocked."""
    blocked = aware(getattr(row, "expiry_blocked_at", None))
    if blocked is None or row.deletion_requested_at is not None:
        return []
    return [
        f"the cluster expired at {_iso(blocked)} but deletion_protection is on, so it keeps running and "
        "billing: extend ttl or expires_at (or remove idle_teardown_minutes) to keep it, or set "
        "deletion_protection = false to let it be deleted at once"
    ]


def _expiry(cluster: Cluster, now: dt.datetime) -> tuple[str | None, dt.datetime | None]:
    expires_at = cluster.expires_at
    if expires_at is None or expires_at > now:
        return None, None
    reason = f"ttl {cluster.ttl} is up" if cluster.ttl else "expires_at reached"
    return f"{reason} (expires_at {_iso(expires_at)})", expires_at


def _idle_due(
    session: Any, driver: ProvisioningDriver, cluster: Cluster, now: dt.datetime, idle_check: dt.timedelta
) -> tuple[dt.datetime, str] | None:
    """When an idle-watched RUNNING cluster is due for teardown (if it stays idle), with the reason; a
    busy one is looked at again after `idle_check`."""
    minutes = cluster.idle_teardown_minutes
    source = workload_of(driver)
    if minutes is None or source is None or cluster.status in WITHOUT_IDLE_WATCH:
        return None
    if cluster.status != str(NodeStatus.RUNNING):
        return now + idle_check, ""  # still coming up (this pass may finish it): look again then
    runs = node_views.node_runs(session, cluster.id)
    jobs = source.cluster_jobs(session, cluster.name, runs, now, cluster_id=cluster.id)
    if any(job.holds_nodes() or job.is_waiting() for job in jobs):
        return now + idle_check, ""
    moments = [run.up_since for run in runs] + [job.ended_at for job in jobs]
    idle_since = max((t for t in map(aware, moments) if t is not None), default=now)
    return idle_since + dt.timedelta(minutes=minutes), (
        f"no Slurm job for {minutes} minutes (idle since {_iso(idle_since)}, idle_teardown_minutes)"
    )


def _block(session: Any, cluster: Cluster, reason: str, moment: dt.datetime, now: dt.datetime) -> None:
    """Keep a protected cluster: one phase record, audit event and warning per expiry."""
    if cluster.expiry_blocked_at is not None:
        return
    cluster.expiry_blocked_at = moment
    detail = f"{reason}; deletion_protection is on, so the cluster is kept"
    session.add(PhaseRecord(cluster_id=cluster.id, phase="ExpiryBlocked", detail=detail, at=now))
    _audit(session, cluster, "cluster.expiry_blocked", now, {"reason": reason, "expired_at": _iso(moment)})


def _audit(session: Any, cluster: Cluster, action: str, now: dt.datetime, details: dict[str, Any]) -> None:
    add_event(session, project_id=cluster.project_id, actor=ACTOR, action=action, resource_type="cluster",
              resource_id=cluster.id, at=now, details=details)


def _iso(moment: dt.datetime | None) -> str:
    return "" if moment is None else moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
