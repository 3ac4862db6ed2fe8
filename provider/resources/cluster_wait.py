"""Waiting for a GPU cluster to converge (create, scale, attach/detach) or to be gone (delete).

Polls through transient API failures (the backend restarting, 5xx, rate limits) until the deadline, logs
each change of status, phase or running node count at INFO (visible with TF_LOG_PROVIDER=info), and ends
early when Terraform sends StopProvider (`ctx.sleep` and in-flight requests raise `Cancelled`). How a wait
ends decides what the resource does with the cluster:

- converged: returns the cluster object;
- `ClusterFailed` (a failed node, phase Degraded/RollingBack/Failed, or being deleted) and `ClusterGone`:
  the cluster is broken, an error (a create is then tainted);
- `ClusterStillConverging` (the deadline passed, or the cluster is held by billing): nothing is wrong with
  the cluster, it is saved as it is with a warning and the next apply resumes the wait.

Every outcome carries the last cluster object seen, so callers can save partial state.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from provider.client import (
    GpuCloudClient,
    NotFound,
    RateLimited,
    ServerError,
    TransportError,
)
from provider.client.http import Cancelled as ClientCancelled
from provider.framework import Cancelled, parse_instant
from provider.resources.cluster_images import images_settled

log = logging.getLogger("provider.resources.gpu_cluster")

TRANSIENT = (TransportError, ServerError, RateLimited)
FAILED_PHASES = ("Degraded", "RollingBack", "Failed")
REPAIRING_PHASE = "Repairing"
FAILED_STATUSES = ("FAILED", "DESTROYING", "DESTROYED")
HELD_STATUSES = ("PAUSED",)  # a billing hold: the engine applies nothing until it is lifted
# After a change that leaves the cluster looking converged (keys, volumes, container), accept it as done
# without any sign from the engine only after this long: a change the engine has nothing to do for
# shows nothing. Any visible work (a phase recorded, nodes not ready) ends this grace.
QUIET_CHANGE_GRACE_SECONDS = 30.0
FIRST_POLL_SECONDS = 0.5
MAX_POLL_SECONDS = 5.0


class ClusterWaitError(Exception):
    """The wait ended without convergence; `last` is the last cluster object seen (or None)."""

    def __init__(self, message: str, last: dict[str, Any] | None) -> None:
        super().__init__(message)
        self.message = message
        self.last = last


class ClusterFailed(ClusterWaitError):
    """The cluster (or some node of it) failed: it will not converge by waiting longer."""


class ClusterGone(ClusterWaitError):
    pass


class ClusterStillConverging(ClusterWaitError):
    """The wait stopped (deadline, billing hold) while the cluster is healthy: waiting again may finish."""


@dataclass
class Poller:
    """One wait: `sleep` must be the context's cancellable sleep."""

    client: GpuCloudClient
    cluster_id: str
    deadline: float
    sleep: Callable[[float], None]
    clock: Callable[[], float] = time.monotonic
    last: dict[str, Any] | None = None
    etag: str | None = None  # of the last object seen, for the next If-Match
    _delay: float = FIRST_POLL_SECONDS

    def poll(self) -> dict[str, Any] | None:
        """The cluster now; None when the API says it does not exist. Transient failures are retried;
        StopProvider during a request raises `Cancelled`."""
        while True:
            try:
                response = self.client.clusters.get(self.cluster_id)
            except NotFound:
                return None
            except ClientCancelled as error:
                raise Cancelled() from error
            except TRANSIENT as error:
                if self.clock() >= self.deadline:
                    raise ClusterStillConverging(
                        f"timed out while the API kept failing ({error})", self.last
                    ) from error
                log.warning("gpu cluster %s: API unavailable (%s); retrying", self.cluster_id, error)
                self.pause()
                continue
            if isinstance(response.body, dict):
                self.last, self.etag = response.body, response.etag
                return self.last
            raise ClusterWaitError("the API answered without a cluster object", self.last)

    def pause(self) -> None:
        self.sleep(min(self._delay, max(0.0, self.deadline - self.clock())))
        self._delay = min(self._delay * 1.5, MAX_POLL_SECONDS)

    def expired(self) -> bool:
        return self.clock() >= self.deadline


def members(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Nodes that belong to the cluster (nodes being released carry no network)."""
    return [n for n in body.get("nodes") or [] if n.get("network") is not None]


def is_converged(body: dict[str, Any]) -> bool:
    """RUNNING with exactly node_count member nodes, all RUNNING, none still being released, and no
    container image waiting to be imported."""
    nodes = body.get("nodes") or []
    joined = members(body)
    return (
        body.get("status") == "RUNNING"
        and body.get("phase") in (None, "Ready")
        and len(joined) == int(body.get("node_count") or 0)
        and len(joined) == len(nodes)
        and all(n.get("status") == "RUNNING" for n in joined)
        and images_settled(body)
    )


def engine_saw_change(body: dict[str, Any], since: datetime) -> bool:
    """A phase was recorded at or after `since`: the engine has acted on the change made then."""
    for record in body.get("phase_history") or []:
        at = parse_instant(record.get("at"))
        if at is not None and at >= since:
            return True
    return False


def failed_nodes(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [n for n in members(body) if n.get("status") == "FAILED"]


def failure_reason(body: dict[str, Any]) -> str | None:
    """Why the cluster cannot converge (a failed member node, a failed phase or status); None if it can.
    Names every failed node with the reason the API gives."""
    status, phase = body.get("status"), body.get("phase")
    # With node_repair = "auto" the engine replaces a failed node in place: wait for the repair.
    failed = [] if phase == REPAIRING_PHASE else failed_nodes(body)
    reason = str(body.get("status_reason") or "").strip()
    if reason and _given_up_short(body):  # e.g. a scale-up the engine rolled back: it will not retry
        return f"{len(members(body))} of {body.get('node_count')} nodes running: {reason}"
    if not failed and phase not in FAILED_PHASES and status not in FAILED_STATUSES:
        return None
    unnamed = [n for n in failed if str(n.get("name")) not in reason]
    parts = [reason] if reason else []
    parts += [f"node {n.get('name')}: {n.get('status_reason') or 'FAILED'}" for n in unnamed]
    where = f"status {status}, phase {phase}"
    return f"{where}: {'; '.join(parts)}" if parts else where


def came_up_then_lost_nodes(body: dict[str, Any]) -> bool:
    """Day 2 reached during the wait: the cluster was Ready, then a node failed and is left failed
    (node_repair = "manual", or automatic repairs used up). It is RUNNING on its other nodes, all placed
    and running: a created cluster, not a failed create."""
    joined = members(body)
    return (
        body.get("status") == "RUNNING"
        and body.get("phase") == "Degraded"
        and any(r.get("phase") == "Ready" for r in body.get("phase_history") or [])
        and len(joined) == int(body.get("node_count") or 0) == len(body.get("nodes") or [])
        and bool(failed_nodes(body))
        and all(n.get("status") in ("RUNNING", "FAILED") for n in joined)
    )


def _given_up_short(body: dict[str, Any]) -> bool:
    """Settled (RUNNING, Ready, nothing in progress) with fewer member nodes than node_count."""
    joined = members(body)
    return (
        body.get("status") == "RUNNING"
        and body.get("phase") in (None, "Ready")
        and len(joined) < int(body.get("node_count") or 0)
        and len(joined) == len(body.get("nodes") or [])
        and all(n.get("status") == "RUNNING" for n in joined)
    )


def hold_reason(body: dict[str, Any]) -> str | None:
    """Why the engine applies nothing to the cluster for now (a billing hold); None if it is not held."""
    if body.get("status") in HELD_STATUSES or body.get("phase") == "Paused":
        return str(body.get("status_reason") or "the cluster is paused (billing hold)")
    return None


@dataclass
class Progress:
    """Logs a wait's progress at INFO once per change of status, phase or running nodes (never per poll)."""

    started: float
    seen: tuple[Any, ...] | None = None

    def update(self, body: dict[str, Any], now: float) -> None:
        joined = members(body)
        running = sum(1 for n in joined if n.get("status") == "RUNNING")
        key = (body.get("status"), body.get("phase"), running, len(joined), body.get("node_count"))
        if key == self.seen:
            return
        self.seen = key
        log.info(
            "gpu cluster %s: %s, phase %s, %d/%s nodes running (%d placed), %.0fs elapsed",
            body.get("id"), body.get("status"), body.get("phase"), running, body.get("node_count"),
            len(joined), now - self.started,
        )

    def converged(self, body: dict[str, Any], now: float) -> dict[str, Any]:
        log.info("gpu cluster %s: converged in %.0fs", body.get("id"), now - self.started)
        return body


def wait_until_running(
    poller: Poller, *, changed_at: str | None = None, changed: dict[str, Any] | None = None,
    day_two_ok: bool = False,
) -> dict[str, Any]:
    """Poll until the cluster converged. After a change, pass `changed_at` (the server time of the change)
    and `changed` (the API's answer to it): a cluster that looks converged counts as done only once the
    engine visibly acted (a phase recorded since, or the cluster seen converging since). `day_two_ok`
    (a create): a cluster that came up and then lost a node it keeps failed is done, not failed."""
    since = parse_instant(changed_at) if changed_at else None
    acted = since is None or (changed is not None and not is_converged(changed))
    progress = Progress(poller.clock())
    steady_since: float | None = None
    while True:
        body = poller.poll()
        if body is None:
            raise ClusterGone("the cluster no longer exists (deleted outside Terraform?)", poller.last)
        progress.update(body, poller.clock())
        if day_two_ok and came_up_then_lost_nodes(body):
            return progress.converged(body, poller.clock())
        reason = failure_reason(body)
        if reason:
            raise ClusterFailed(f"the cluster failed ({reason})", body)
        held = hold_reason(body)
        if held:
            raise ClusterStillConverging(f"the cluster is held: {held}", body)
        if is_converged(body):
            if acted or (since is not None and engine_saw_change(body, since)):
                return progress.converged(body, poller.clock())
            steady_since = poller.clock() if steady_since is None else steady_since
            if poller.clock() - steady_since >= QUIET_CHANGE_GRACE_SECONDS:
                return progress.converged(body, poller.clock())
        else:
            acted, steady_since = True, None
        if poller.expired():
            raise ClusterStillConverging(
                f"timed out (status {body.get('status')}, phase {body.get('phase')})", body
            )
        poller.pause()


def wait_until_gone(poller: Poller) -> None:
    """Poll until the API answers 404 (or reports the cluster DESTROYED)."""
    progress = Progress(poller.clock())
    while True:
        body = poller.poll()
        if body is None or body.get("status") == "DESTROYED":
            return
        progress.update(body, poller.clock())
        if poller.expired():
            raise ClusterWaitError(
                f"timed out waiting for deletion (status {body.get('status')}, phase {body.get('phase')})",
                body,
            )
        poller.pause()
