"""gpucloud_budget: a monthly spending budget of the project, optionally for the clusters with one label,
with alert thresholds and an action at 100 % (`notify` or `block_new`)."""

from __future__ import annotations

from typing import Any

from provider.client import GpuCloudClient
from provider.client.collections import Collection
from provider.cty import NUMBER
from provider.framework import (
    NUMBER_VALUE,
    Context,
    DiagnosticError,
    NumberAttribute,
    Schema,
    SetAttribute,
    SingleNestedAttribute,
    State,
    StringAttribute,
    rfc3339_utc,
    use_state_for_unknown,
)
from provider.resources._common import number
from provider.resources.api_rules import field_validators
from provider.resources.rest import RestResource

SUBJECT = "budget"
DEFAULT_THRESHOLDS = [50, 80, 100]
LABEL_KEY_RULE = (
    "must be 1-63 lowercase letters, digits, '.', '_', '/' or '-', starting and ending with a letter or digit"
)
NAME_RULE = "must be 1-128 printable characters without leading or trailing spaces"
SPEC = ("name", "amount_usd", "label_filter", "thresholds", "action")


def _rules(field: str, **text: str) -> Any:
    return field_validators("BudgetCreate", field, text=text)


class BudgetResource(RestResource):
    type_name = "gpucloud_budget"
    subject = SUBJECT
    title = "Budget"
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
                semantic=NUMBER_VALUE,
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

    def collection(self, client: GpuCloudClient) -> Collection:
        return client.budgets

    def create_body(self, values: State) -> dict[str, Any]:
        return _body(values)

    def state_from(self, body: dict[str, Any], prior: State) -> State:
        return _state(body)

    def update(self, ctx: Context, plan: State, state: State) -> State | None:
        changes = {k: v for k, v in _body(plan).items() if _body(state).get(k) != v}
        if "label_filter" not in _body(plan) and state.get("label_filter") is not None:
            changes["label_filter"] = None  # removed: the whole project again
        if not changes:
            return {**state, "amount_usd": plan["amount_usd"]}
        return self.patch(ctx, plan, state, changes)


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


def _state(body: Any) -> State:
    """State from the API object (the user's spelling of an equal amount is kept by its semantic type)."""
    if not isinstance(body, dict):
        raise DiagnosticError("Unexpected API Response", "The API answered without a budget object.")
    label = body.get("label_filter")
    return {
        "id": body["id"],
        "name": body["name"],
        "amount_usd": number(body["amount_usd"]),
        "label_filter": None if label is None else {"key": label["key"], "value": label["value"]},
        "thresholds": [int(t) for t in body["thresholds"]],
        "action": body["action"],
        "created_at": rfc3339_utc(body["created_at"]),
    }
