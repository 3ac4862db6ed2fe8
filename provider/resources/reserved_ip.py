"""gpucloud_reserved_ip: a public address of a region the project keeps across clusters."""

from __future__ import annotations

from typing import Any

from provider.client import ApiError, GpuCloudClient
from provider.client.collections import Collection
from provider.cty import STRING, is_unknown
from provider.framework import (
    Context,
    DiagnosticError,
    MapAttribute,
    NumberAttribute,
    Schema,
    State,
    StringAttribute,
    requires_replace,
    rfc3339_utc,
    root,
    use_state_for_unknown,
)
from provider.resources._common import api_id_identity, configured, number, regions_by_name
from provider.resources.api_rules import field_validators
from provider.resources.rest import RestResource, plan_create_key
from provider.resources.ssh_key import NAME_RULE

SUBJECT = "reserved IP"


class ReservedIpResource(RestResource):
    type_name = "gpucloud_reserved_ip"
    subject = SUBJECT
    title = "Reserved IP"
    create_verb = "Reserving"
    delete_verb = "Releasing"
    import_id_attribute = "id"
    identity_schema = api_id_identity("reserved IP", "rip")
    schema = Schema(
        description="A reserved public IP: an address of a region's public pool that the project keeps "
        "until it destroys the resource, whatever happens to clusters. A cluster's login node answers on "
        "it when the cluster's `reserved_ip_id` names it; several clusters cannot hold it at once (naming "
        "it on another cluster moves it there). Billed per hour while reserved, at a lower rate while "
        "attached (see the `gpucloud_regions` prices). Destroying it while a cluster holds it fails: "
        "unset that cluster's `reserved_ip_id` first. To keep the address a cluster has now, call "
        "`POST /v1/clusters/{id}/reserve-ip` and import the reserved IP it returns.",
        attributes={
            # Required
            "region": StringAttribute(
                required=True,
                description="Region whose public pool the address comes from, for example `us-east-1`. "
                "Changing it replaces the reserved IP (the address is released and another reserved).",
                validators=field_validators(
                    "ReservedIpCreate", "region", text={"pattern": "must be a region name such as us-east-1"}
                ),
                plan_modifiers=[requires_replace()],
            ),
            # Optional
            "name": StringAttribute(
                optional=True,
                description="Display name. Changes in place.",
                validators=field_validators("ReservedIpCreate", "name", text={"pattern": NAME_RULE}),
            ),
            "labels": MapAttribute(
                element_type=STRING,
                optional=True,
                description="Free-form key/value tags (up to 64). Changes in place.",
                validators=field_validators(
                    "ReservedIpCreate", "labels",
                    text={"keys": "key must be 1-63 lowercase letters, digits, '.', '_', '/' or '-', "
                          "starting and ending with a letter or digit",
                          "values": "must have no control characters"},
                ),
            ),
            # Computed
            "id": StringAttribute(
                computed=True,
                description="Identifier (`rip_...`); use it in a cluster's `reserved_ip_id`.",
                plan_modifiers=[use_state_for_unknown()],
            ),
            "address": StringAttribute(
                computed=True,
                description="The public IPv4 address; the project's until the reserved IP is destroyed.",
                plan_modifiers=[use_state_for_unknown()],
            ),
            "cluster_id": StringAttribute(
                computed=True,
                description="The cluster whose login node answers on the address, if any (set through "
                "that cluster's `reserved_ip_id`).",
            ),
            "status": StringAttribute(computed=True, description="`reserved` (unattached) or `attached`."),
            "hourly_cost_usd": NumberAttribute(
                computed=True, description="What the address costs per hour in its current status."
            ),
            "created_at": StringAttribute(
                computed=True,
                description="When the address was reserved (RFC 3339, UTC).",
                plan_modifiers=[use_state_for_unknown()],
            ),
        },
    )

    # ---- plan ------------------------------------------------------------------------------------------

    def modify_plan(
        self, ctx: Context, plan: State | None, state: State | None, config: State | None
    ) -> State | None:
        if plan is None:
            return None
        plan_create_key(ctx, state, plan)
        region = plan["region"]
        if not configured(ctx) or is_unknown(region) or region is None or state is not None:
            return plan
        regions = regions_by_name(ctx)
        if region not in regions:
            ctx.error(
                "Unknown Region",
                f'There is no region "{region}". Choose one of: {", ".join(sorted(regions))} '
                "(see the gpucloud_regions data source).",
                root("region"),
            )
        return plan

    # ---- CRUD (the create/read/delete policy is RestResource's) ----------------------------------------

    def collection(self, client: GpuCloudClient) -> Collection:
        return client.reserved_ips

    def create_body(self, values: State) -> dict[str, Any]:
        return self._create_body(values)

    def state_from(self, body: dict[str, Any], prior: State) -> State:
        return self._state(body, prior)

    def summary(self, verb: str) -> str:
        return "Error Reserving IP" if verb == "Reserving" else super().summary(verb)

    def update(self, ctx: Context, plan: State, state: State) -> State | None:
        changes: dict[str, Any] = {}
        if plan.get("name") != state.get("name"):
            changes["name"] = plan.get("name")
        if (plan.get("labels") or {}) != (state.get("labels") or {}):
            changes["labels"] = plan.get("labels") or {}
        return self.patch(ctx, plan, state, changes)

    def delete_refused(self, ctx: Context, error: ApiError) -> None:
        if error.code == "reserved_ip_attached":
            holder = error.extra.get("cluster_id") or "a cluster"
            raise DiagnosticError(
                "Reserved IP Still Attached",
                f"Cluster {holder} answers on this address. Unset that cluster's reserved_ip_id (or "
                "destroy the cluster) first, then destroy the reserved IP.",
            ) from None
        super().delete_refused(ctx, error)

    @staticmethod
    def state_from_api(body: Any) -> State:
        """The state of an API object (`terraform query` builds states of addresses it finds with it)."""
        return ReservedIpResource._state(body)

    @staticmethod
    def _create_body(values: State) -> dict[str, Any]:
        body: dict[str, Any] = {"region": values["region"]}
        if values.get("name") is not None:
            body["name"] = values["name"]
        if values.get("labels"):
            body["labels"] = values["labels"]
        return body

    @staticmethod
    def _state(body: Any, prior: State | None = None) -> State:
        if not isinstance(body, dict):
            raise DiagnosticError("Unexpected API Response", "The API answered without a reserved IP object.")
        labels = dict(body.get("labels") or {})
        return {
            "id": body["id"],
            "region": body["region"],
            "name": body.get("name"),
            # An empty map and no map are the same to the API: keep what the configuration wrote.
            "labels": labels if labels or (prior or {}).get("labels") is not None else None,
            "address": body["address"],
            "cluster_id": body.get("cluster_id"),
            "status": body["status"],
            "hourly_cost_usd": number(body["hourly_cost_usd"]),
            "created_at": rfc3339_utc(body["created_at"]),
        }
