"""gpucloud_budget: defaults planned, the API body (amount as an exact string, sorted thresholds), the
user's spelling of the amount kept, updates sending only changes (a removed filter as null), reads and
deletes of a gone budget, and plan-time checks from the API's rules."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import httpx

from provider.framework.validate import validate_config
from provider.resources.budget import BudgetResource
from provider.resources.rest import IDEMPOTENCY_KEY
from tests.provider.resources.fakes import context, plan, problem

RESOURCE = BudgetResource()
BODY = {
    "id": "bud_1",
    "name": "nlp",
    "amount_usd": "1000.500000",
    "label_filter": {"key": "team", "value": "nlp"},
    "thresholds": [50, 80, 100],
    "action": "block_new",
    "period": "2026-11",
    "spent_usd": "0.000000",
    "alerts": [],
    "created_at": "2026-11-26T01:00:00Z",
    "updated_at": "2026-11-26T01:00:00Z",
}
CONFIG = {
    "name": "nlp",
    "amount_usd": Decimal("1000.50"),
    "label_filter": {"key": "team", "value": "nlp"},
    "action": "block_new",
}


def _recorder(requests: list[tuple[str, Any]], body: dict[str, Any]) -> Any:
    def handler(request: httpx.Request) -> httpx.Response:
        sent = json.loads(request.content) if request.content else None
        requests.append((request.method, sent))
        if request.method == "DELETE":
            return httpx.Response(204)
        return httpx.Response(
            201 if request.method == "POST" else 200, json={**body, **(sent or {})}, headers={"ETag": '"1"'}
        )

    return handler


def test_budget_create_plans_defaults_and_sends_the_exact_amount() -> None:
    ctx = context(_recorder([], BODY))
    planned, replace = plan(RESOURCE, ctx, {"name": "nlp", "amount_usd": Decimal("1000.50")}, None)
    assert planned is not None and replace == []
    assert planned["thresholds"] == [50, 80, 100] and planned["action"] == "notify"
    requests: list[tuple[str, Any]] = []
    ctx = context(_recorder(requests, {**BODY, "amount_usd": "1000.500000"}), private={IDEMPOTENCY_KEY: "k"})
    state = RESOURCE.create(ctx, {**planned, **CONFIG, "thresholds": [100, 50, 80]})
    assert requests == [
        (
            "POST",
            {
                "name": "nlp",
                "amount_usd": "1000.50",
                "action": "block_new",
                "label_filter": {"key": "team", "value": "nlp"},
                "thresholds": [50, 80, 100],
            },
        )
    ]
    assert state is not None and state["amount_usd"] == Decimal("1000.50")  # the user's spelling
    assert state["id"] == "bud_1" and state["created_at"] == "2026-11-26T01:00:00Z"


def test_budget_update_sends_only_changes_and_a_removed_filter_as_null() -> None:
    prior = {**CONFIG, "id": "bud_1", "thresholds": [50, 80, 100], "created_at": "2026-11-26T01:00:00Z"}
    requests: list[tuple[str, Any]] = []
    answer = {**BODY, "label_filter": None, "action": "notify"}
    new = RESOURCE.update(
        context(_recorder(requests, answer)), {**prior, "label_filter": None, "action": "notify"}, prior
    )
    assert requests == [("PATCH", {"action": "notify", "label_filter": None})]
    assert new is not None and new["label_filter"] is None and new["action"] == "notify"


def test_budget_read_of_a_deleted_budget_and_delete_of_a_gone_one() -> None:
    state = {**CONFIG, "id": "bud_1", "thresholds": [50, 80, 100], "created_at": "2026-11-26T01:00:00Z"}
    gone = context(lambda request: problem(404, "not_found", "no budget with id 'bud_1'"))
    assert RESOURCE.read(gone, state) is None
    RESOURCE.delete(gone, state)
    assert not gone.diagnostics
    fresh = RESOURCE.read(context(_recorder([], {**BODY, "amount_usd": "2000.000000"})), state)
    assert fresh is not None and fresh["amount_usd"] == 2000  # drift shows


def test_budget_config_checked_at_plan_time_naming_the_attribute() -> None:
    ctx = context(None)
    config = dict.fromkeys(RESOURCE.schema.attributes) | {
        "name": "b",
        "amount_usd": Decimal("1.001"),
        "action": "stop",
    }
    validate_config(RESOURCE.schema, config, ctx.diagnostics)
    paths = {str(d.path) for d in ctx.diagnostics if d.severity == "error"}
    assert any("amount_usd" in p for p in paths) and any("action" in p for p in paths), paths
