"""gpucloud_reservation plans: the up-front charge known at plan on create (equal to what the backend's
booking charges, from the listing the API serves), and the warning when destroying or replacing a
reservation whose paid term has time left."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import httpx
import pytest

from backend.api.catalog import instance_types
from backend.billing.estimate import reserved_upfront_micros
from backend.billing.money import micros_to_usd
from backend.billing.pricing_catalog import price_book_from_catalog
from backend.domain.catalog import _builtin_catalog, catalog_from_dict, catalog_to_dict
from provider.cty import is_unknown
from provider.framework import Context
from provider.resources import cluster_checks
from provider.resources.reservation import ReservationResource
from tests.provider.resources.fakes import context, plan

RESOURCE = ReservationResource()
CONFIG = {"name": "q4", "region": "us-east-1", "instance_type": "8xH100", "node_count": 2, "duration_days": 7}


@pytest.fixture(autouse=True)
def fresh_catalog():
    cluster_checks.forget_catalogs()
    yield
    cluster_checks.forget_catalogs()


def _odd_catalog() -> Any:
    data = catalog_to_dict(_builtin_catalog())
    data["reserved_discounts"] = {"1": "0.1237", "7": "0.1913", "30": "0.2671", "90": "0.3333"}
    for itype in data["instance_types"]:
        itype["on_demand_usd_per_gpu_hour"] = "3.987"
    return catalog_from_dict(data)


def serving(catalog: Any, calls: list[str] | None = None) -> Context:
    """A context whose API serves `catalog` as the backend's listing routes write it."""
    listing = [t.model_dump(mode="json") for t in instance_types(catalog, {})]
    regions = [{"name": r.name} for r in catalog.regions]

    def handler(request: httpx.Request) -> httpx.Response:
        if calls is not None:
            calls.append(request.url.path)
        items = listing if request.url.path == "/v1/instance-types" else regions
        return httpx.Response(200, json={"items": items, "next_page_token": None})

    return context(handler)


def booked_upfront(catalog: Any, itype: str, nodes: int, days: int) -> Decimal:
    """What `book_reservation` charges: on-demand less the term's discount, for the whole term."""
    prices = price_book_from_catalog(catalog)
    rate = prices.on_demand_gpu_hour(itype, "us-east-1") * (1 - prices.reserved_discount(itype, days))
    gpus = prices.gpus_per_node(itype) * nodes
    return micros_to_usd(reserved_upfront_micros(reserved_rate=rate, gpus=gpus, duration_days=days))


@pytest.mark.parametrize("catalog", [_builtin_catalog(), _odd_catalog()], ids=["builtin", "odd"])
@pytest.mark.parametrize("days", [1, 6, 7, 30, 89, 90])
def test_reservation_upfront_is_known_at_plan_and_equals_what_booking_charges(catalog: Any, days: int):
    # Issue 27: upfront_cost_usd was "(known after apply)", so the term's charge was in no plan.
    for itype, nodes in (("8xH100", 2), ("8xB200", 5), ("1xH100", 3)):
        cluster_checks.forget_catalogs()
        planned, _ = plan(RESOURCE, serving(catalog), {**CONFIG, "instance_type": itype, "node_count": nodes,
                                                      "duration_days": days}, None)
        assert planned is not None
        assert Decimal(planned["upfront_cost_usd"]) == booked_upfront(catalog, itype, nodes, days), itype


def test_reservation_upfront_of_the_issue_example():
    planned, _ = plan(RESOURCE, serving(_builtin_catalog()), CONFIG, None)
    assert planned is not None and planned["upfront_cost_usd"] == Decimal("9116.352")  # 168 h x 16 x 3.3915


def test_reservation_upfront_unknown_when_it_cannot_be_priced():
    planned, _ = plan(RESOURCE, serving(_builtin_catalog()), {**CONFIG, "instance_type": "9xZ9"}, None)
    assert planned is not None and is_unknown(planned["upfront_cost_usd"])  # the API names it at apply
    planned, _ = plan(RESOURCE, context(), CONFIG, None)  # provider block not known yet
    assert planned is not None and is_unknown(planned["upfront_cost_usd"])


def test_reservation_in_place_plans_read_no_catalog():
    calls: list[str] = []
    state = {**dict.fromkeys(RESOURCE.schema.attributes), **CONFIG, "id": "rsv_1",
             "starts_at": "2026-12-01T08:00:00Z", "ends_at": "2026-12-08T08:00:00Z", "fabric": "ib-a",
             "upfront_cost_usd": Decimal("9116.352"), "created_at": "2026-11-26T01:00:00Z"}
    planned, _ = plan(RESOURCE, serving(_builtin_catalog(), calls), {**CONFIG, "name": "other"}, state)
    assert planned is not None and planned["upfront_cost_usd"] == Decimal("9116.352") and calls == []


def _state(starts_at: dt.datetime) -> dict[str, Any]:
    return {**dict.fromkeys(RESOURCE.schema.attributes), **CONFIG, "id": "rsv_1",
            "starts_at": starts_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "ends_at": (starts_at + dt.timedelta(days=7)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "fabric": "ib-a", "upfront_cost_usd": Decimal("9116.352"), "created_at": "2026-11-26T01:00:00Z"}


def warnings(ctx: Context) -> list[str]:
    return [f"{d.summary}: {d.detail}" for d in ctx.diagnostics if d.severity == "warning"]


def test_reservation_destroy_with_time_left_warns_days_and_amount_forfeited():
    # Issue 27: destroying a reservation with 7 days left warned of nothing.
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    state = _state(now - dt.timedelta(days=2))  # 5 of 7 days left
    ctx = context()
    assert RESOURCE.modify_plan(ctx, None, state, None) is None
    (text,) = warnings(ctx)
    assert text.startswith("Reserved Term Forfeited: Destroying reservation rsv_1")
    assert "5.0 days are left" in text and "about 6,512 USD of the 9,116.35 USD paid up front" in text


def test_reservation_replace_with_time_left_warns_and_a_scheduled_one_does_not():
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    state = _state(now - dt.timedelta(days=1))
    ctx = context()
    _, replace = plan(RESOURCE, ctx, {**CONFIG, "node_count": 3}, state)
    assert replace == ["node_count"]
    (text,) = warnings(ctx)
    assert "Replacing reservation rsv_1" in text and "6.0 days are left" in text and "new booking" in text
    not_started, ended = _state(now + dt.timedelta(days=1)), _state(now - dt.timedelta(days=8))
    for quiet in (not_started, ended):
        ctx = context()
        RESOURCE.modify_plan(ctx, None, quiet, None)
        assert warnings(ctx) == []
    ctx = context()
    plan(RESOURCE, ctx, {**CONFIG, "name": "renamed"}, state)  # in place: nothing forfeited
    assert warnings(ctx) == []
