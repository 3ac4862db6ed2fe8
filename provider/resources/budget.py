"""gpucloud_budget: a monthly spending budget of the project, optionally for the clusters with one label,
with alert thresholds and an action at 100 % (`notify` or `block_new`)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from provider.client import ApiError
from provider.cty import NUMBER
from provider.framework import (
    Context,
    DiagnosticError,
    NumberAttribute,
    Resource,
    Schema,
    SetAttribute,
    SingleNestedAttribute,
    State,
    StringAttribute,
    use_state_for_unknown,
)
from provider.resources._common import (
    api_error,
    client_of,
    configured,
    create_done,
    create_key,
    etag_of,
    get_with_etag,
    number,
    plan_create_key,
    remember_etag,
    timestamp,
)
from provider.resources.api_rules import field_validators

SUBJECT = "budget"
DEFAULT_THRESHOLDS = [50, 80, 100]
LABEL_KEY_RULE = (
    "must be 1-63 lowercase letters, digits, '.', '_', '/' or '-', starting and ending with a letter or digit"
)
NAME_RULE = "must be 1-128 printable characters without leading or trailing spaces"
SPEC = ("name", "amount_usd", "label_filter", "thresholds", "action")


def _rules(field: str, **text: str) -> Any:
    return field_validators("BudgetCreate", field, text=text)


def _path(budget_id: str) -> str:
    return f"/v1/budgets/{budget_id}"


class BudgetResource(Resource):
    type_name = "gpucloud_budget"
    blocking_plan = False  # planning calls no API (only create/read/update/delete do)
    import_id_attribute = "id"
    schema = Schema(
        description="A monthly spending budget: the metering job alerts once per month at each threshold "
        "(an audit event `billing.budget_threshold_crossed` and an entry in the budget's `alerts`, see "
        "`GET /v1/budgets/{id}`); at 100 % `block_new` makes cluster creates under the budget fail with "
        "402 `budget_exceeded` until the month ends or the amount is raised. Every setting changes in "
        "place.",
        attributes={
            # Required
            "name": StringAttribute(
                required=True,
                description="Display name of the budget.",
                validators=_rules("name", pattern=NAME_RULE),
            ),
            "amount_usd": NumberAttribute(
                required=True,
                description="Monthly amount in USD (up to two decimals).",
                validators=_rules("amount_usd"),
            ),
            # Optional
            "label_filter": SingleNestedAttribute(
                optional=True,
                attributes={
                    "key": StringAttribute(
                        required=True,
                        description="Cluster label key, e.g. `team`.",
                        validators=_rules("label_filter.key", pattern=LABEL_KEY_RULE),
                    ),
                    "value": StringAttribute(
                        required=True,
                        description="Its value, e.g. `nlp`.",
                        validators=_rules("label_filter.value", pattern="must have no control characters"),
                    ),
                },
                description='Count only the clusters with this label (e.g. `{ key = "team", value = '
                '"nlp" }`); without it, all of the project\'s usage, storage included.',
            ),
            "thresholds": SetAttribute(
                element_type=NUMBER,
                optional=True,
                computed=True,
                default=list(DEFAULT_THRESHOLDS),
                description="Percentages of the amount at which to alert (1 to 1000). Default: 50, 80, 100.",
                validators=_rules("thresholds"),
            ),
            "action": StringAttribute(
                optional=True,
                computed=True,
                default="notify",
                description="At 100 %: `notify` (alert only) or `block_new` (new clusters under the budget "
                "are refused). Default: `notify`.",
                validators=_rules("action"),
            ),
            # Computed
            "id": StringAttribute(
                computed=True,
                description="Identifier of the budget (`bud_...`).",
                plan_modifiers=[use_state_for_unknown()],
            ),
            "created_at": StringAttribute(
                computed=True,
                description="When the budget was created (RFC 3339, UTC).",
                plan_modifiers=[use_state_for_unknown()],
            ),
        },
    )

    def modify_plan(
        self, ctx: Context, plan: State | None, state: State | None, config: State | None
    ) -> State | None:
        plan_create_key(ctx, state, plan)
        return plan

    def create(self, ctx: Context, plan: State) -> State | None:
        try:
            response = client_of(ctx).request(
                "POST", "/v1/budgets", json=_body(plan), idempotency_key=create_key(ctx)
            )
        except ApiError as error:
            api_error(ctx, "Error Creating Budget", error, subject=SUBJECT, schema=self.schema)
            return None
        create_done(ctx)
        remember_etag(ctx, response.etag)
        return _state(response.body, plan)

    def read(self, ctx: Context, state: State) -> State | None:
        if not configured(ctx):
            return state
        try:
            body = get_with_etag(ctx, _path(state["id"]))
        except ApiError as error:
            api_error(ctx, "Error Reading Budget", error, subject=SUBJECT)
            return state
        return None if body is None else _state(body, state)

    def update(self, ctx: Context, plan: State, state: State) -> State | None:
        changes = {k: v for k, v in _body(plan).items() if _body(state).get(k) != v}
        if "label_filter" not in _body(plan) and state.get("label_filter") is not None:
            changes["label_filter"] = None  # removed: the whole project again
        if not changes:
            return {**state, "amount_usd": plan["amount_usd"]}
        try:
            response = client_of(ctx).request(
                "PATCH", _path(state["id"]), json=changes, if_match=etag_of(ctx)
            )
        except ApiError as error:
            api_error(ctx, "Error Updating Budget", error, subject=SUBJECT, schema=self.schema)
            return None
        remember_etag(ctx, response.etag)
        return _state(response.body, plan)

    def delete(self, ctx: Context, state: State) -> None:
        try:
            client_of(ctx).request("DELETE", _path(state["id"]), if_match=etag_of(ctx))
        except ApiError as error:
            if error.status != 404:  # already gone: the goal of a delete
                api_error(ctx, "Error Deleting Budget", error, subject=SUBJECT)


def _body(plan: State) -> dict[str, Any]:
    """The API fields of a planned state (unset optional values left to the API's defaults)."""
    body: dict[str, Any] = {"name": plan["name"], "amount_usd": str(plan["amount_usd"])}
    if plan.get("label_filter") is not None:
        body["label_filter"] = dict(plan["label_filter"])
    if plan.get("thresholds") is not None:
        body["thresholds"] = sorted(int(t) for t in plan["thresholds"])
    if plan.get("action") is not None:
        body["action"] = plan["action"]
    return body


def _state(body: Any, prior: State) -> State:
    """State from the API object; the user's spelling of an equal amount stays."""
    if not isinstance(body, dict):
        raise DiagnosticError("Unexpected API Response", "The API answered without a budget object.")
    amount = number(body["amount_usd"])
    known = prior.get("amount_usd")
    if isinstance(known, int | Decimal) and Decimal(known) == Decimal(amount):
        amount = known
    label = body.get("label_filter")
    return {
        "id": body["id"],
        "name": body["name"],
        "amount_usd": amount,
        "label_filter": None if label is None else {"key": label["key"], "value": label["value"]},
        "thresholds": [int(t) for t in body["thresholds"]],
        "action": body["action"],
        "created_at": timestamp(body["created_at"]),
    }
