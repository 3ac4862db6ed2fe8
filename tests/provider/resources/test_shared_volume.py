import json
from decimal import Decimal

import httpx
import pytest

from provider.cty import UNKNOWN
from provider.framework import DiagnosticError
from provider.resources.rest import ETAG_KEY, IDEMPOTENCY_KEY
from provider.resources.shared_volume import SharedVolumeResource, hourly_cost
from tests.provider.resources.fakes import context, plan, problem

PRIOR = {
    "id": "vol_01",
    "name": "data",
    "region": "us-east-1",
    "size_tib": 4,
    "status": "available",
    "mount_path": "/mnt/shared/vol_01",
    "attached_cluster_ids": [],
    "created_at": "2026-01-01T00:00:00Z",
    "estimated_hourly_cost_usd": Decimal("0.4488"),
}
REGIONS = {
    "items": [
        {
            "name": "us-east-1",
            "display_name": "East",
            "interconnects": [],
            "fabrics": [],
            "storage_usd_per_tib_hour": "0.1122",
        }
    ]
}


POOLS = {"items": [{"id": "hpl_01", "name": "lab", "region": "on-prem"}], "next_page_token": None}


def catalog(request):
    """The API: the catalog's regions, and the project's host pools (a region of theirs is one too)."""
    if request.url.path == "/v1/host-pools":
        return httpx.Response(200, json=POOLS)
    assert request.url.path == "/v1/regions", request.url
    return httpx.Response(200, json=REGIONS)


def test_shared_volume_shrink_is_a_plan_error_at_size_tib():
    ctx = context(catalog)
    plan(SharedVolumeResource(), ctx, {"name": "data", "region": "us-east-1", "size_tib": 2}, PRIOR)
    (diag,) = ctx.diagnostics
    assert diag.summary == "Shared Volume Cannot Shrink" and diag.path[0].name == "size_tib"
    assert "has 4 TiB" in diag.detail and "lose data" in diag.detail


def test_shared_volume_region_change_replaces_and_may_be_smaller():
    ctx = context(catalog)
    planned, replace = plan(
        SharedVolumeResource(),
        ctx,
        {"name": "data", "region": "us-east-1", "size_tib": 1},
        {**PRIOR, "region": "us-west-2"},
    )
    assert replace == ["region"] and not ctx.diagnostics and planned["size_tib"] == 1


def test_shared_volume_grow_plans_the_new_cost_and_keeps_stable_values():
    planned, replace = plan(
        SharedVolumeResource(),
        context(catalog),
        {"name": "data", "region": "us-east-1", "size_tib": 10},
        PRIOR,
    )
    assert replace == []
    assert planned["estimated_hourly_cost_usd"] == Decimal("1.122")
    assert planned["id"] == "vol_01" and planned["mount_path"] == PRIOR["mount_path"]
    assert planned["status"] is UNKNOWN and planned["attached_cluster_ids"] is UNKNOWN


def test_shared_volume_unknown_region_is_a_plan_error_naming_the_choices():
    ctx = context(catalog)
    plan(SharedVolumeResource(), ctx, {"name": "data", "region": "mars-1", "size_tib": 1}, None)
    (diag,) = ctx.diagnostics
    assert diag.summary == "Unknown Region" and diag.path[0].name == "region" and "us-east-1" in diag.detail


def test_a_volume_in_a_host_pools_region_is_on_its_storage_at_no_charge():
    ctx = context(catalog)
    planned, _ = plan(SharedVolumeResource(), ctx, {"name": "data", "region": "on-prem", "size_tib": 4}, None)
    assert not ctx.diagnostics and planned["estimated_hourly_cost_usd"] == 0


def test_shared_volume_plans_without_api_when_provider_config_is_unknown():
    ctx = context(None)  # any API call would fail: there is no client
    planned, _ = plan(SharedVolumeResource(), ctx, {"name": "data", "region": "mars-1", "size_tib": 1}, None)
    assert not ctx.diagnostics and planned["estimated_hourly_cost_usd"] is UNKNOWN


def test_shared_volume_unknown_size_is_not_rejected():
    ctx = context(catalog)
    planned, _ = plan(
        SharedVolumeResource(), ctx, {"name": "data", "region": "us-east-1", "size_tib": UNKNOWN}, PRIOR
    )
    assert not ctx.diagnostics and planned["estimated_hourly_cost_usd"] is UNKNOWN


def test_hourly_cost_matches_the_api_float_rendering():
    assert hourly_cost("0.1122", 3) == Decimal("0.3366")
    assert hourly_cost("0.1122", 10) == Decimal("1.122")
    assert hourly_cost("0.5", 2) == 1


def test_shared_volume_update_sends_only_changes_with_if_match():
    seen = []

    def handler(request):
        seen.append((request.headers.get("if-match"), json.loads(request.content)))
        body = {
            **PRIOR,
            "size_tib": 6,
            "estimated_hourly_cost_usd": 0.6732,
            "created_at": "2026-01-01T00:00:00",
            "updated_at": "2026-01-02T00:00:00",
        }
        return httpx.Response(200, json=body, headers={"etag": '"g3"'})

    ctx = context(handler, private={ETAG_KEY: '"g2"'})
    state = SharedVolumeResource().update(ctx, {**PRIOR, "size_tib": 6}, PRIOR)
    assert seen == [('"g2"', {"size_tib": 6})]
    assert state["size_tib"] == 6 and state["estimated_hourly_cost_usd"] == Decimal("0.6732")
    assert state["created_at"] == "2026-01-01T00:00:00Z"


def test_shared_volume_validation_error_lands_on_the_attribute():
    errors = [{"field": "region", "code": "unknown_region", "message": "unknown region 'x'"}]
    ctx = context(lambda r: problem(422, "validation_failed", "invalid", errors=errors))
    assert SharedVolumeResource().create(ctx, {**PRIOR, "id": UNKNOWN}) is None
    (diag,) = ctx.diagnostics
    assert diag.summary == "Error Creating Shared Volume" and diag.path[0].name == "region"


def test_shared_volume_delete_while_attached_names_the_clusters():
    ctx = context(lambda r: problem(409, "volume_attached", "attached", cluster_ids=["cls_1"]))
    with pytest.raises(DiagnosticError) as raised:
        SharedVolumeResource().delete(ctx, PRIOR)
    assert raised.value.diagnostic.summary == "Shared Volume Still Attached"
    assert "cls_1" in raised.value.diagnostic.detail


def test_shared_volume_read_404_removes_from_state():
    assert SharedVolumeResource().read(context(lambda r: problem(404, "not_found", "gone")), PRIOR) is None


def test_shared_volume_unconfirmed_create_is_kept_with_its_key_in_the_id():
    ctx = context(
        lambda r: httpx.Response(503, headers={"retry-after": "0"}), private={IDEMPOTENCY_KEY: "k1"}
    )
    planned = {
        **PRIOR,
        "id": UNKNOWN,
        "status": UNKNOWN,
        "mount_path": UNKNOWN,
        "created_at": UNKNOWN,
        "attached_cluster_ids": UNKNOWN,
    }
    state = SharedVolumeResource().create(ctx, planned)
    assert state["id"] == "unconfirmed-create:k1" and state["status"] is None
    assert state["name"] == "data" and state["size_tib"] == 4
    assert IDEMPOTENCY_KEY not in ctx.private
    (diag,) = ctx.diagnostics
    assert diag.summary == "Error Creating Shared Volume" and "may have happened" in diag.detail


def test_shared_volume_refused_create_keeps_nothing():
    ctx = context(
        lambda r: problem(422, "validation_failed", "bad", field="size_tib"), private={IDEMPOTENCY_KEY: "k"}
    )
    assert SharedVolumeResource().create(ctx, {**PRIOR, "id": UNKNOWN}) is None


def test_shared_volume_delete_of_unconfirmed_create_replays_it_then_deletes():
    seen = []

    def handler(request):
        seen.append((request.method, request.url.path, request.headers.get("idempotency-key")))
        if request.method == "POST":
            return httpx.Response(201, json={**PRIOR, "id": "vol_made", "estimated_hourly_cost_usd": 0.4488})
        return httpx.Response(204)

    ctx = context(handler)  # Terraform gives no private state to the delete of a tainted object
    SharedVolumeResource().delete(ctx, {**PRIOR, "id": "unconfirmed-create:k1", "status": None})
    assert seen == [("POST", "/v1/volumes", "k1"), ("DELETE", "/v1/volumes/vol_made", None)]
    assert not ctx.diagnostics


def test_shared_volume_delete_of_unconfirmed_create_that_made_nothing():
    ctx = context(lambda r: problem(422, "validation_failed", "bad"))
    SharedVolumeResource().delete(ctx, {**PRIOR, "id": "unconfirmed-create:k1"})
    assert not ctx.diagnostics


def test_unconfirmed_state_is_not_read():
    ctx = context(lambda r: pytest.fail("no API call expected"))
    state = {**PRIOR, "id": "unconfirmed-create:k1"}
    assert SharedVolumeResource().read(ctx, state) is state
