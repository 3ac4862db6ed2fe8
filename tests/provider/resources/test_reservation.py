"""gpucloud_reservation: labels (sent on create, read back, null when unset), name and labels changed in
place with one PATCH (If-Match), the user's spelling of the start instant kept, and plan-time label checks
from the API's rules."""

from __future__ import annotations

import json
from typing import Any

import httpx

from provider.framework import Diagnostics
from provider.framework.validate import validate_config
from provider.resources.reservation import ReservationResource
from provider.resources.rest import ETAG_KEY
from tests.provider.resources.fakes import context, plan

RESOURCE = ReservationResource()
CONFIG = {"name": "q4", "region": "us-east-1", "instance_type": "8xH100", "node_count": 2,
          "duration_days": 7, "starts_at": "2026-12-01T09:00:00+01:00", "labels": {"team": "nlp"}}
BODY = {"id": "rsv_1", "name": "q4", "region": "us-east-1", "instance_type": "8xH100", "node_count": 2,
        "duration_days": 7, "starts_at": "2026-12-01T08:00:00Z", "ends_at": "2026-12-08T08:00:00Z",
        "fabric": "ib-a", "upfront_usd": "4558.176", "labels": {"team": "nlp"},
        "created_at": "2026-11-26T01:00:00+00:00"}


def created(config: dict[str, Any], body: dict[str, Any]) -> tuple[dict[str, Any], list[Any]]:
    ctx = context()
    planned, _ = plan(RESOURCE, ctx, config, None)
    assert planned is not None
    sent: list[Any] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(201, json=body, headers={"etag": '"e1"'})

    apply_ctx = context(handler, private=dict(ctx.private))
    state = RESOURCE.create(apply_ctx, planned)
    assert state is not None and not apply_ctx.diagnostics and apply_ctx.private == {ETAG_KEY: '"e1"'}
    return state, sent


def test_reservation_labels_are_sent_and_read_back_and_the_start_keeps_its_spelling():
    state, sent = created(CONFIG, BODY)
    assert sent == [CONFIG]
    assert state["labels"] == {"team": "nlp"} and state["starts_at"] == CONFIG["starts_at"]
    assert state["created_at"] == "2026-11-26T01:00:00Z" and state["ends_at"] == "2026-12-08T08:00:00Z"
    fresh = RESOURCE.read(context(lambda r: httpx.Response(200, json=BODY)), state)
    assert fresh == state


def test_reservation_without_labels_sends_none_and_keeps_null():
    config = {k: v for k, v in CONFIG.items() if k not in ("labels", "starts_at")}
    state, sent = created(config, {**BODY, "labels": {}})
    assert "labels" not in sent[0] and "starts_at" not in sent[0]
    assert state["labels"] is None and state["starts_at"] == "2026-12-01T08:00:00Z"


def test_reservation_name_and_label_changes_are_planned_in_place():
    # Issue 27: renaming or relabelling replaced the reservation (a second booking and charge).
    state, _ = created(CONFIG, BODY)
    for change in ({"labels": {"team": "cv"}}, {"name": "q4-renamed"}, {"labels": None}):
        planned, replace = plan(RESOURCE, context(), {**CONFIG, **change}, state)
        assert replace == [] and planned is not None, change
        assert planned["upfront_cost_usd"] == state["upfront_cost_usd"] and planned["id"] == "rsv_1"
    same, replace = plan(RESOURCE, context(), {**CONFIG, "starts_at": "2026-12-01T08:00:00Z"}, state)
    assert replace == [] and same == state  # the same instant respelled: no change
    _, replace = plan(RESOURCE, context(), {**CONFIG, "node_count": 3}, state)
    assert replace == ["node_count"]


def test_reservation_rename_and_relabel_is_one_patch_with_if_match():
    state, _ = created(CONFIG, BODY)
    sent: list[tuple[str, Any, str | None]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append((request.method, json.loads(request.content), request.headers.get("if-match")))
        return httpx.Response(200, json={**BODY, "name": "q4-b", "labels": {"team": "cv"}},
                              headers={"etag": '"e2"'})

    ctx = context(handler, private={ETAG_KEY: '"e1"'})
    config = {**CONFIG, "name": "q4-b", "labels": {"team": "cv"}}
    planned, _ = plan(RESOURCE, context(), config, state)
    assert planned is not None
    new = RESOURCE.update(ctx, planned, state)
    assert sent == [("PATCH", {"name": "q4-b", "labels": {"team": "cv"}}, '"e1"')]
    assert new is not None and new["name"] == "q4-b" and new["labels"] == {"team": "cv"}
    assert new["upfront_cost_usd"] == state["upfront_cost_usd"] and ctx.private[ETAG_KEY] == '"e2"'
    sent.clear()
    cleared = RESOURCE.update(context(handler), {**state, "labels": None}, state)
    assert sent[0][1] == {"labels": {}} and cleared is not None  # null config clears them


def test_reservation_label_keys_are_checked_at_plan_time():
    diags = Diagnostics()
    validate_config(RESOURCE.schema, {**dict.fromkeys(RESOURCE.schema.attributes), **CONFIG,
                                      "labels": {"Team!": "nlp"}}, diags)
    (error,) = [d for d in diags if d.severity == "error"]
    assert error.path[0].name == "labels" and "lowercase" in error.detail
