"""gpucloud_reserved_ip: create sends what was configured, release while attached names the cluster,
an unknown region fails the plan."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from provider.framework import DiagnosticError
from provider.resources.reserved_ip import ReservedIpResource
from tests.provider.resources.fakes import context, plan, problem

API_IP = {
    "id": "rip_01", "name": None, "region": "us-east-1", "labels": {}, "address": "198.18.0.7",
    "cluster_id": None, "status": "reserved", "hourly_cost_usd": 0.005,
    "created_at": "2026-11-26T10:00:00Z", "updated_at": "2026-11-26T10:00:00Z",
}


def test_reserved_ip_create_sends_only_configured_fields_and_keeps_null_labels() -> None:
    sent: list[Any] = []

    def api(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(201, json=API_IP, headers={"ETag": '"1"'})

    state = ReservedIpResource().create(context(api), {"region": "us-east-1", "name": None, "labels": None})
    assert sent == [{"region": "us-east-1"}]
    assert state is not None and state["labels"] is None and state["address"] == "198.18.0.7"
    assert state["status"] == "reserved" and state["cluster_id"] is None


def test_reserved_ip_release_while_attached_names_the_cluster() -> None:
    ctx = context(lambda r: problem(409, "reserved_ip_attached", "attached", cluster_id="cls_a"))
    with pytest.raises(DiagnosticError) as raised:
        ReservedIpResource().delete(ctx, {**API_IP, "labels": None})
    assert raised.value.diagnostic.summary == "Reserved IP Still Attached"
    assert "cls_a" in raised.value.diagnostic.detail and "reserved_ip_id" in raised.value.diagnostic.detail


def test_reserved_ip_unknown_region_is_a_plan_error_naming_the_choices() -> None:
    regions = {"items": [{"name": "us-east-1", "display_name": "East", "interconnects": [], "fabrics": [],
                          "storage_usd_per_tib_hour": "0.1122"}]}
    ctx = context(lambda r: httpx.Response(200, json=regions))
    plan(ReservedIpResource(), ctx, {"region": "mars-1"}, None)
    (diag,) = ctx.diagnostics
    assert diag.summary == "Unknown Region" and diag.path[0].name == "region" and "us-east-1" in diag.detail
