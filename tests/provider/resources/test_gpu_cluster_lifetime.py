"""gpucloud_gpu_cluster time to live: `expires_at` planned from `ttl` (created_at + ttl), the configured
time or null, both together refused at plan time, a warning for a protected cluster past its expiry, and
the API calls an apply makes."""

from __future__ import annotations

from typing import Any

from provider.cty import is_unknown
from provider.resources.cluster_lifetime import forget_expired
from tests.provider.resources.test_gpu_cluster_apply import RESOURCE, api, created, ctx_for, fresh_catalog
from tests.provider.resources.test_gpu_cluster_plan import BASE, errors, plan

__all__ = ["api", "fresh_catalog"]  # fixtures


def _patches(api: Any, before: int) -> list[Any]:
    return [r[2] for r in api.requests[before:] if r[0] == "PATCH"]


def test_gpu_cluster_lifetime_plan_at_create(api: Any) -> None:
    out, ctx = plan({**BASE, "ttl": "8h"})
    assert out is not None and is_unknown(out["expires_at"]) and not errors(ctx)
    out, ctx = plan({**BASE, "expires_at": "2026-12-01T18:00:00+02:00"})
    assert out is not None and out["expires_at"] == "2026-12-01T18:00:00+02:00"
    out, _ = plan(dict(BASE))
    assert out is not None and out["expires_at"] is None
    out, ctx = plan({**BASE, "ttl": "8h", "expires_at": "2026-12-01T18:00:00Z"})
    assert "ttl" in errors(ctx) and "not both" in errors(ctx)["ttl"]
    out, ctx = plan({**BASE, "ttl": "8 hours"})
    assert "ttl" in errors(ctx)  # the API's pattern, checked at plan time


def test_gpu_cluster_lifetime_plan_shows_expires_at_from_created_at(api: Any) -> None:
    state = created(api, ttl="8h")
    assert (state["ttl"], state["expires_at"]) == ("8h", "2026-11-26T09:00:00Z")
    config = {**BASE, "node_count": 2, "ttl": "1d12h"}
    out, ctx = plan(config, state)
    assert out is not None and out["expires_at"] == "2026-11-27T13:00:00Z" and not errors(ctx)
    out, _ = plan({**config, "ttl": "8h"}, state)
    assert out is not None and out["expires_at"] == "2026-11-26T09:00:00Z"  # no change planned
    out, _ = plan({**BASE, "node_count": 2}, state)
    assert out is not None and out["expires_at"] is None  # removing ttl plans no expiry


def test_gpu_cluster_lifetime_protected_cluster_past_expiry_warns(api: Any) -> None:
    state = created(api, ttl="8h", deletion_protection=True)  # expired on 2026-11-26 at 09:00
    _, ctx = plan({**BASE, "node_count": 2, "ttl": "8h", "deletion_protection": True}, state)
    warnings = [d for d in ctx.diagnostics if d.severity == "warning"]
    assert [d.summary for d in warnings] == ["Cluster Past Its Expiry"]
    assert "deletion_protection = true keeps it running" in warnings[0].detail


def test_gpu_cluster_lifetime_apply_sends_ttl_or_expires_at(api: Any) -> None:
    state = created(api, ttl="8h", idle_teardown_minutes=30)
    post = next(r[2] for r in api.requests if r[0] == "POST")
    assert post["ttl"] == "8h" and "expires_at" not in post and post["idle_teardown_minutes"] == 30
    assert state["idle_teardown_minutes"] == 30
    before = len(api.requests)
    new = RESOURCE.update(ctx_for(api), {**state, "ttl": "10h", "expires_at": "2026-11-26T11:00:00Z"}, state)
    assert _patches(api, before) == [{"ttl": "10h"}]
    assert new is not None and new["expires_at"] == "2026-11-26T11:00:00Z"
    before = len(api.requests)
    fixed = "2026-12-01T18:00:00+02:00"
    new2 = RESOURCE.update(ctx_for(api), {**new, "ttl": None, "expires_at": fixed}, new)
    assert _patches(api, before) == [{"expires_at": fixed}]
    assert new2 is not None and new2["expires_at"] == fixed  # the user's spelling of the same instant
    before = len(api.requests)
    new3 = RESOURCE.update(ctx_for(api), {**new2, "expires_at": None, "idle_teardown_minutes": None}, new2)
    assert _patches(api, before) == [{"idle_teardown_minutes": None, "expires_at": None}]
    assert new3 is not None and (new3["ttl"], new3["expires_at"], new3["idle_teardown_minutes"]) == (
        None, None, None
    )


def test_gpu_cluster_lifetime_recreating_a_cluster_deleted_at_its_ttl_warns_with_the_expiry(api: Any) -> None:
    # Issue 27: a cluster deleted by its ttl came back on the next apply with no word about why.
    forget_expired()
    try:
        state = created(api, ttl="8h")  # expired on 2026-11-26 at 09:00
        del api.clusters[state["id"]]  # the backend deleted it at its expiry
        assert RESOURCE.read(ctx_for(api), state) is None
        out, ctx = plan({**BASE, "node_count": 2, "ttl": "8h"})
        assert out is not None and not errors(ctx)
        (warning,) = [d for d in ctx.diagnostics if d.severity == "warning"]
        assert warning.summary == "Cluster Deleted At Its Expiry"
        assert "Cluster cls_1" in warning.detail and "at 2026-11-26T09:00:00Z, the end of its ttl (8h)" in (
            warning.detail)
        _, other = plan({**BASE, "name": "other", "ttl": "8h"})  # another cluster: nothing to say
        assert not other.diagnostics
    finally:
        forget_expired()


def test_gpu_cluster_lifetime_cluster_gone_before_its_expiry_is_recreated_quietly(api: Any) -> None:
    forget_expired()
    try:
        state = created(api)
        del api.clusters[state["id"]]  # deleted by hand, no expiry
        assert RESOURCE.read(ctx_for(api), state) is None
        _, ctx = plan({**BASE, "node_count": 2})
        assert not ctx.diagnostics
    finally:
        forget_expired()
