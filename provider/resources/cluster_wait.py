"""Waiting for a GPU cluster to converge (create, scale, attach/detach) or to be gone (delete).

Polls through transient API failures (the backend restarting, 5xx, rate limits) until the deadline, logs
progress (visible with TF_LOG=info), and ends early when Terraform sends StopProvider (`ctx.sleep`
raises `Cancelled`). Every outcome carries the last cluster object seen, so callers can save partial
state.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from provider.client import (
    GpuCloudClient,
    NotFound,
    RateLimited,
    ServerError,
    TransportError,
)
from provider.client.http import Cancelled as ClientCancelled

log = logging.getLogger("provider.resources.gpu_cluster")

TRANSIENT = (TransportError, ServerError, RateLimited, ClientCancelled)
FAILED_PHASES = ("RollingBack", "Failed")
# After a change the engine must pick up, accept a steady Ready cluster without a newer phase record
# only after this long (guards against a change the engine finishes without any visible phase).
QUIET_CHANGE_GRACE_SECONDS = 30.0
FIRST_POLL_SECONDS = 0.5
MAX_POLL_SECONDS = 5.0


class ClusterWaitError(Exception):
    """The wait ended without convergence; `last` is the last cluster object seen (or None)."""

    def __init__(self, message: str, last: dict[str, Any] | None) -> None:
        super().__init__(message)
        self.message = message
        self.last = last


class ClusterGone(ClusterWaitError):
    pass


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
        """The cluster now; None when the API says it does not exist. Transient failures are retried."""
        while True:
            try:
                response = self.client.request("GET", f"/v1/clusters/{quote(self.cluster_id, safe='')}")
            except NotFound:
                return None
            except TRANSIENT as error:
                if self.clock() >= self.deadline:
                    raise ClusterWaitError(f"the API kept failing: {error}", self.last) from error
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


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def members(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Nodes that belong to the cluster (nodes being released carry no network)."""
    return [n for n in body.get("nodes") or [] if n.get("network") is not None]


def is_converged(body: dict[str, Any]) -> bool:
    """RUNNING with exactly node_count member nodes, all RUNNING, and none still being released."""
    nodes = body.get("nodes") or []
    joined = members(body)
    return (
        body.get("status") == "RUNNING"
        and body.get("phase") in (None, "Ready")
        and len(joined) == int(body.get("node_count") or 0)
        and len(joined) == len(nodes)
        and all(n.get("status") == "RUNNING" for n in joined)
    )


def engine_saw_change(body: dict[str, Any], since: datetime) -> bool:
    """A phase was recorded at or after `since`: the engine has acted on the change made then."""
    for record in body.get("phase_history") or []:
        at = _parse_time(record.get("at"))
        if at is not None and at >= since:
            return True
    return False


def failure_reason(body: dict[str, Any]) -> str | None:
    if body.get("phase") in FAILED_PHASES or body.get("status") in ("DESTROYING", "DESTROYED"):
        return body.get("status_reason") or f"status {body.get('status')}, phase {body.get('phase')}"
    return None


def progress(body: dict[str, Any], elapsed: float) -> str:
    joined = members(body)
    running = sum(1 for n in joined if n.get("status") == "RUNNING")
    return (
        f"gpu cluster {body.get('id')}: {body.get('status')} ({body.get('phase')}), "
        f"{running}/{body.get('node_count')} nodes running, {elapsed:.0f}s elapsed"
    )


def wait_until_running(poller: Poller, *, changed_at: str | None = None) -> dict[str, Any]:
    """Poll until the cluster converged (after `changed_at`, the server time of the change, when given)."""
    since = _parse_time(changed_at) if changed_at else None
    started = poller.clock()
    steady_since: float | None = None
    last_status = None
    while True:
        body = poller.poll()
        if body is None:
            raise ClusterGone("the cluster no longer exists (deleted outside Terraform?)", poller.last)
        elapsed = poller.clock() - started
        line = progress(body, elapsed)
        if line != last_status:
            log.info(line)
            last_status = line
        reason = failure_reason(body)
        if reason:
            raise ClusterWaitError(f"the cluster failed: {reason}", body)
        if is_converged(body):
            if since is None or engine_saw_change(body, since):
                return body
            steady_since = poller.clock() if steady_since is None else steady_since
            if poller.clock() - steady_since >= QUIET_CHANGE_GRACE_SECONDS:
                return body
        else:
            steady_since = None
        if poller.expired():
            raise ClusterWaitError(
                f"timed out (status {body.get('status')}, phase {body.get('phase')})", body
            )
        poller.pause()


def wait_until_gone(poller: Poller) -> None:
    """Poll until the API answers 404 (or reports the cluster DESTROYED)."""
    started = poller.clock()
    while True:
        body = poller.poll()
        if body is None or body.get("status") == "DESTROYED":
            return
        log.info("gpu cluster %s: %s (%s), %.0fs elapsed", poller.cluster_id, body.get("status"),
                 body.get("phase"), poller.clock() - started)
        if poller.expired():
            raise ClusterWaitError(
                f"timed out waiting for deletion (status {body.get('status')}, phase {body.get('phase')})",
                body,
            )
        poller.pause()
