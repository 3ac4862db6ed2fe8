"""gpucloud_reservation: capacity reserved apart from clusters (instance type, region, node count, term),
paid up front once for the whole term; `gpucloud_gpu_cluster`s draw from it with `reservation_id`."""

from __future__ import annotations

from typing import Any

from provider.client import ApiError, GpuCloudClient
from provider.client.collections import Collection
from provider.cty import STRING, UNKNOWN, is_unknown
from provider.framework import (
    RFC3339,
    Context,
    DiagnosticError,
    Int64Attribute,
    MapAttribute,
    NumberAttribute,
    Schema,
    State,
    StringAttribute,
    requires_replace,
    rfc3339_utc,
    use_state_for_unknown,
)
from provider.resources._common import client_of, configured, number
from provider.resources.api_rules import field_validators
from provider.resources.cluster_checks import catalog_of, known, reserved_gpu_hour, reserved_upfront
from provider.resources.cluster_reservation import warn_if_reservation_forfeited
from provider.resources.rest import RestResource

SUBJECT = "reservation"
NAME_RULE = "must be 1-128 printable characters without leading or trailing spaces"


def _rules(field: str, **text: str) -> Any:
    return field_validators("ReservationCreate", field, text=text)


def _stable() -> list[Any]:
    return [use_state_for_unknown()]


class ReservationResource(RestResource):
    type_name = "gpucloud_reservation"
    subject = SUBJECT
    title = "Reservation"
    import_id_attribute = "id"
    schema = Schema(
        description="Capacity reserved apart from clusters, as capacity blocks are sold: `node_count` nodes "
        "of one instance type on one fabric of a region for a term of 1 to 90 days, held for you from "
        "booking until the term ends (on-demand creates cannot take them). The whole term is charged once, "
        "up front, at `starts_at`, at the catalog's reserved rate for its length. Clusters draw from it "
        "with `reservation_id`; their nodes are prepaid, and destroying or replacing a cluster gives its "
        "nodes back to the reservation for the next one, so the term is never forfeited. The plan shows "
        "`upfront_cost_usd`, the charge the booking makes. `name` and `labels` change in place; every other "
        "setting replaces the reservation when changed (a new booking and a new charge). Destroying or "
        "replacing it while its term runs warns with the days left and the amount forfeited (nothing is "
        "refunded); destroying it while clusters draw from it fails.",
        attributes={
            # Required
            "name": StringAttribute(
                required=True,
                description="Display name. Changes in place.",
                validators=_rules("name", pattern=NAME_RULE),
            ),
            "region": StringAttribute(
                required=True,
                description="Region of the capacity, e.g. `us-east-1`.",
                validators=_rules("region", pattern="must be a catalog name such as us-east-1"),
                plan_modifiers=[requires_replace()],
            ),
            "instance_type": StringAttribute(
                required=True,
                description="Instance type of the nodes, e.g. `8xH100`.",
                validators=_rules("instance_type", pattern="must be a catalog name such as 8xH100"),
                plan_modifiers=[requires_replace()],
            ),
            "node_count": Int64Attribute(
                required=True,
                description="Nodes held for the term (1 to 4096).",
                validators=_rules("node_count"),
                plan_modifiers=[requires_replace()],
            ),
            "duration_days": Int64Attribute(
                required=True,
                description="Term length in days (1 to 90); longer terms get deeper discounts.",
                validators=_rules("duration_days"),
                plan_modifiers=[requires_replace()],
            ),
            # Optional
            "starts_at": StringAttribute(
                optional=True,
                computed=True,
                description="When the term starts (RFC 3339, e.g. `\"2026-12-01T08:00:00Z\"`); clusters draw "
                "from it and the charge is made from then. Default: when it is created.",
                semantic=RFC3339,
                plan_modifiers=[use_state_for_unknown(), requires_replace()],
            ),
            "labels": MapAttribute(
                element_type=STRING,
                optional=True,
                description="Free-form key/value tags (up to 64). `team` scopes the reservation as it scopes "
                "clusters: an API key limited to a team sees, draws from and manages only the reservations "
                "labelled with its team. Change in place (usage already charged keeps the labels it was "
                "charged with).",
                validators=_rules(
                    "labels",
                    keys="key must be 1-63 lowercase letters, digits, '.', '_', '/' or '-', starting and "
                    "ending with a letter or digit",
                    values="must have no control characters",
                ),
            ),
            # Computed
            "id": StringAttribute(
                computed=True, description="Identifier (`rsv_...`).", plan_modifiers=_stable()
            ),
            "ends_at": StringAttribute(
                computed=True, description="When the term ends (`starts_at` + `duration_days`).",
                plan_modifiers=_stable(),
            ),
            "fabric": StringAttribute(
                computed=True, description="The fabric of the region whose nodes are held.",
                plan_modifiers=_stable(),
            ),
            "upfront_cost_usd": NumberAttribute(
                computed=True, description="The one charge for the whole term, made at `starts_at`: term "
                "hours x nodes x GPUs per node x the catalog's exact reserved GPU-hour rate for the term's "
                "length, rounded once to the micro-dollar. Known at plan.",
                plan_modifiers=_stable(),
            ),
            "created_at": StringAttribute(
                computed=True, description="When it was booked (RFC 3339, UTC).", plan_modifiers=_stable()
            ),
        },
    )

    def collection(self, client: GpuCloudClient) -> Collection:
        return client.reservations

    def create_body(self, values: State) -> dict[str, Any]:
        return _body(values)

    def state_from(self, body: dict[str, Any], prior: State) -> State:
        return _state(body, prior)

    def modify_plan(
        self, ctx: Context, plan: State | None, state: State | None, config: State | None
    ) -> State | None:
        plan = super().modify_plan(ctx, plan, state, config)
        if plan is None:
            if state is not None:
                warn_if_reservation_forfeited(ctx, state, "Destroying")
            return None
        if state is not None and ctx.requires_replace:
            warn_if_reservation_forfeited(ctx, state, "Replacing")
        if state is None and is_unknown(plan.get("upfront_cost_usd")):
            plan = {**plan, "upfront_cost_usd": _planned_upfront(ctx, plan)}
        return plan

    def update(self, ctx: Context, plan: State, state: State) -> State | None:
        changes: dict[str, Any] = {}
        if plan["name"] != state["name"]:
            changes["name"] = plan["name"]
        if (plan.get("labels") or {}) != (state.get("labels") or {}):
            changes["labels"] = dict(plan.get("labels") or {})  # {} clears them
        if not changes:
            return {**state, "labels": plan.get("labels")}  # null and {} alike: nothing to send
        return self.patch(ctx, plan, state, changes)


def _planned_upfront(ctx: Context, plan: State) -> Any:
    """The charge the booking will make, as the API prices it (`book_reservation`): unknown while a
    value it needs is unknown or the catalog cannot be read (the API prices it at apply)."""
    itype, nodes, days = plan.get("instance_type"), plan.get("node_count"), plan.get("duration_days")
    if not (known(itype) and known(nodes) and known(days)) or not configured(ctx):
        return UNKNOWN
    try:
        catalog = catalog_of(client_of(ctx))
    except ApiError:
        return UNKNOWN
    shape = catalog.instance_types.get(itype)
    if shape is None:
        return UNKNOWN  # the API names the unknown type at apply
    gpus = int(shape["gpu_count"]) * int(nodes)
    return reserved_upfront(reserved_gpu_hour(catalog, str(itype), int(days)), gpus, int(days))


def _body(plan: State) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": plan["name"],
        "region": plan["region"],
        "instance_type": plan["instance_type"],
        "node_count": int(plan["node_count"]),
        "duration_days": int(plan["duration_days"]),
    }
    if isinstance(plan.get("starts_at"), str):
        body["starts_at"] = plan["starts_at"]
    if plan.get("labels"):
        body["labels"] = dict(plan["labels"])
    return body


def _state(body: Any, prior: State) -> State:
    """State from the API object (the user's spelling of the same start instant is kept by its semantic
    type); no labels stay null when the configuration wrote none."""
    if not isinstance(body, dict):
        raise DiagnosticError("Unexpected API Response", "The API answered without a reservation object.")
    labels = dict(body.get("labels") or {})
    return {
        "id": body["id"],
        "name": body["name"],
        "region": body["region"],
        "instance_type": body["instance_type"],
        "node_count": int(body["node_count"]),
        "duration_days": int(body["duration_days"]),
        "starts_at": rfc3339_utc(body["starts_at"]),
        "labels": labels if labels or prior.get("labels") is not None else None,
        "ends_at": rfc3339_utc(body["ends_at"]),
        "fabric": body["fabric"],
        "upfront_cost_usd": number(body["upfront_usd"]),
        "created_at": rfc3339_utc(body["created_at"]),
    }
