"""The time to live of a `gpucloud_gpu_cluster` at plan time: `expires_at` planned from `ttl` (the API
deletes the cluster at created_at + ttl, in whole seconds), and a warning when a protected cluster is
past its expiry and kept only by `deletion_protection`."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Mapping
from typing import Any

from provider.cty import UNKNOWN, is_unknown
from provider.framework import DAY_DURATION, Context, DurationType, State, parse_instant, rfc3339_utc, root

# The API's ttl: whole days, hours, minutes and seconds ("8h", "90m", "1d12h"). Its range (1 minute to
# 365 days, at most 6 digits a part) is the API's rule, checked at plan time by the attribute's validators.
TTL = DurationType(DAY_DURATION)


def ttl_seconds(text: str) -> int | None:
    """Seconds of a ttl such as "1d12h" (None when it is not one)."""
    try:
        return int(DAY_DURATION.parse(text).total_seconds())
    except ValueError:
        return None


def plan_expiry(ctx: Context, plan: State, state: State | None, config: State | None) -> None:
    """Set the planned `expires_at`: created_at + ttl once the cluster exists (known after apply at
    create), the configured time, or null without either; idle teardown needs a Slurm cluster."""
    config = config or {}
    ttl, configured = config.get("ttl"), config.get("expires_at")
    if ttl is not None and configured is not None:
        ctx.error(
            "Conflicting Cluster Expiry",
            "Set ttl (the cluster's lifetime from its creation) or expires_at (a fixed time), not both.",
            root("ttl"),
        )
        return
    if ttl is not None:
        seconds = ttl_seconds(ttl) if isinstance(ttl, str) else None
        created = parse_instant((state or {}).get("created_at"))
        if is_unknown(ttl) or seconds is None or created is None:
            plan["expires_at"] = UNKNOWN
        else:
            moment = (created + dt.timedelta(seconds=seconds)).replace(microsecond=0)
            plan["expires_at"] = rfc3339_utc(moment.isoformat())
    elif configured is None:
        plan["expires_at"] = None
    orchestrator = plan.get("orchestrator")
    if (
        plan.get("idle_teardown_minutes") is not None
        and isinstance(orchestrator, str)
        and orchestrator != "slurm"
    ):
        ctx.error(
            "Idle Teardown Needs Slurm",
            f"idle_teardown_minutes reads the Slurm job queue, and this cluster's orchestrator is "
            f'{orchestrator}. Set orchestrator = "slurm", or use ttl or expires_at instead.',
            root("idle_teardown_minutes"),
        )
    _warn_if_kept_past_expiry(ctx, state)


# Clusters the backend deleted at their expiry, as a refresh found them gone: (name, region) -> what the
# state said. Terraform refreshes and then plans in the same provider process, but the plan of the create
# that follows gets no prior state (nor private state), so the refresh leaves it here for that plan.
_expired: dict[tuple[str, str], dict[str, Any]] = {}
_expired_lock = threading.Lock()


def remember_if_expired(state: Mapping[str, Any], now: dt.datetime | None = None) -> None:
    """A refresh found the cluster gone: if its state had an expiry that has passed, the backend deleted
    it for its ttl (or expires_at), and the create Terraform now plans is told so."""
    expires_at = parse_instant(state.get("expires_at"))
    name, region = state.get("name"), state.get("region")
    if expires_at is None or expires_at > (now or dt.datetime.now(dt.UTC)):
        return
    if isinstance(name, str) and isinstance(region, str):
        with _expired_lock:
            _expired[(name, region)] = {k: state.get(k) for k in ("id", "ttl", "expires_at")}


def warn_if_recreating_expired(ctx: Context, plan: Mapping[str, Any]) -> None:
    """On a create plan: a warning when this cluster is the one the backend deleted at its expiry."""
    name, region = plan.get("name"), plan.get("region")
    if not (isinstance(name, str) and isinstance(region, str)):
        return
    with _expired_lock:
        gone = _expired.get((name, region))
    if gone is None:
        return
    lifetime = f"its ttl ({gone['ttl']})" if gone.get("ttl") else "its expires_at"
    ctx.warning(
        "Cluster Deleted At Its Expiry",
        f"Cluster {gone.get('id')} (\"{name}\" in {region}) was deleted by the backend at "
        f"{gone['expires_at']}, the end of {lifetime}; this plan creates a new cluster in its place, which "
        "expires in turn. Remove the resource from the configuration to leave it deleted, or change ttl or "
        "expires_at.",
        root("ttl") if gone.get("ttl") else root("expires_at"),
    )


def forget_expired() -> None:
    """Drop what refreshes found (tests)."""
    with _expired_lock:
        _expired.clear()


def _warn_if_kept_past_expiry(ctx: Context, state: State | None) -> None:
    if state is None or state.get("deletion_protection") is not True:
        return
    expires_at = parse_instant(state.get("expires_at"))
    if expires_at is None or expires_at > dt.datetime.now(dt.UTC):
        return
    ctx.warning(
        "Cluster Past Its Expiry",
        f"Cluster {state.get('id')} expired at {state.get('expires_at')} but deletion_protection = true "
        "keeps it running (and billing). Extend ttl or expires_at to keep it, or set deletion_protection "
        "= false and apply to let it be deleted at once.",
        root("expires_at"),
    )
