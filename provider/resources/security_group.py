"""gpucloud_security_group: firewall rules (ingress, egress) that clusters' nodes enforce."""

from __future__ import annotations

from typing import Any

from provider.client import ApiError, GpuCloudClient
from provider.client.collections import Collection
from provider.cty import STRING
from provider.framework import (
    BoolAttribute,
    Context,
    DiagnosticError,
    Int64Attribute,
    ListAttribute,
    ListNestedAttribute,
    Schema,
    State,
    StringAttribute,
    rfc3339_utc,
    use_state_for_unknown,
)
from provider.resources._common import api_id_identity
from provider.resources.api_rules import field_validators
from provider.resources.rest import RestResource
from provider.resources.ssh_key import NAME_RULE

SUBJECT = "security group"
SCHEMA = "SecurityGroupCreate"
RULE_FIELDS = ("protocol", "from_port", "to_port", "cidr_blocks", "description")
INTRA_CLUSTER = (
    "Traffic between the nodes of one cluster (Slurm, NCCL, the jumphost to its workers) is always allowed "
    "and no rule can cut it."
)


def _rule_attributes(direction: str) -> dict[str, Any]:
    peer = "Source" if direction == "ingress" else "Destination"

    def rules(field: str, **text: str) -> Any:
        return field_validators(SCHEMA, f"{direction}[].{field}", text=text)

    return {
        "protocol": StringAttribute(
            required=True, description="`tcp`, `udp`, `icmp` or `all`.", validators=rules("protocol")
        ),
        "from_port": Int64Attribute(
            optional=True,
            description="Port (1-65535), or the first of a range; required for `tcp` and `udp`, not allowed "
            "for `icmp` and `all`.",
            validators=rules("from_port"),
        ),
        "to_port": Int64Attribute(
            optional=True,
            description="Last port of a range (not below `from_port`); unset: `from_port` alone.",
            validators=rules("to_port"),
        ),
        "cidr_blocks": ListAttribute(
            element_type=STRING,
            required=True,
            description=f"{peer} networks in CIDR notation, e.g. `203.0.113.0/24` or `::/0`.",
            validators=rules("cidr_blocks", items="must be a CIDR block such as 10.0.0.0/8"),
        ),
        "description": StringAttribute(
            optional=True,
            description="What the rule is for.",
            validators=rules("description", pattern="must have no control characters"),
        ),
    }


class SecurityGroupResource(RestResource):
    type_name = "gpucloud_security_group"
    subject = SUBJECT
    title = "Security Group"
    blocking_plan = False  # planning calls no API (only create/read/update/delete do)
    import_id_attribute = "id"
    identity_schema = api_id_identity(SUBJECT, "sgr")
    schema = Schema(
        description="A security group: the traffic clusters' nodes accept from outside the cluster "
        "(`ingress`) and send out of it (`egress`). Attach groups with a cluster's `security_group_ids`; a "
        "cluster without any uses the project's default group (SSH in from anywhere, all out). Every "
        f"setting changes in place and the clusters using the group follow within a minute. {INTRA_CLUSTER}",
        attributes={
            # Required
            "name": StringAttribute(
                required=True,
                description="Display name of the group.",
                validators=field_validators(SCHEMA, "name", text={"pattern": NAME_RULE}),
            ),
            # Optional
            "description": StringAttribute(
                optional=True,
                description="What the group is for.",
                validators=field_validators(
                    SCHEMA, "description", text={"pattern": "must have no control characters"}
                ),
            ),
            "ingress": ListNestedAttribute(
                optional=True,
                attributes=_rule_attributes("ingress"),
                description="Allowed inbound traffic (up to 50 rules); everything else from outside the "
                "cluster is dropped, replies to the nodes' own connections excepted.",
                validators=field_validators(SCHEMA, "ingress"),
            ),
            "egress": ListNestedAttribute(
                optional=True,
                attributes=_rule_attributes("egress"),
                description="Allowed outbound traffic (up to 50 rules); everything else leaving the cluster "
                "is dropped, replies excepted.",
                validators=field_validators(SCHEMA, "egress"),
            ),
            # Computed
            "id": StringAttribute(
                computed=True,
                description="Identifier of the group (`sgr_...`); use it in a cluster's "
                "`security_group_ids`.",
                plan_modifiers=[use_state_for_unknown()],
            ),
            "is_default": BoolAttribute(
                computed=True,
                description="Whether this is the project's default group (true only for an imported one).",
                plan_modifiers=[use_state_for_unknown()],
            ),
            "created_at": StringAttribute(
                computed=True,
                description="When the group was created (RFC 3339, UTC).",
                plan_modifiers=[use_state_for_unknown()],
            ),
        },
    )

    def collection(self, client: GpuCloudClient) -> Collection:
        return client.security_groups

    def create_body(self, values: State) -> dict[str, Any]:
        return _body(values)

    def state_from(self, body: dict[str, Any], prior: State) -> State:
        return _state(body, prior)

    def update(self, ctx: Context, plan: State, state: State) -> State | None:
        before, after = _body(state), _body(plan)
        changes = {k: v for k, v in after.items() if before.get(k) != v}
        if not changes:
            return {**state, **{k: plan.get(k) for k in ("ingress", "egress", "description")}}
        return self.patch(ctx, plan, state, changes)

    def delete_refused(self, ctx: Context, error: ApiError) -> None:
        if error.code == "security_group_in_use":
            clusters = ", ".join(error.extra.get("cluster_ids") or []) or "a cluster"
            raise DiagnosticError(
                "Security Group In Use",
                f"The group is used by {clusters}. Remove it from their security_group_ids (or destroy "
                "them) first, then destroy the group.",
            ) from None
        super().delete_refused(ctx, error)


def _rules(rules: Any) -> list[dict[str, Any]]:
    return [{k: (list(r[k]) if k == "cidr_blocks" else r.get(k)) for k in RULE_FIELDS} for r in rules or []]


def _body(plan: State) -> dict[str, Any]:
    """The API fields of a planned state (absent rule lists: none)."""
    return {
        "name": plan["name"],
        "description": plan.get("description"),
        "ingress": _rules(plan.get("ingress")),
        "egress": _rules(plan.get("egress")),
    }


def _state(body: Any, prior: State) -> State:
    """State from the API object; an empty rule list stays null when it was not written."""
    if not isinstance(body, dict):
        raise DiagnosticError("Unexpected API Response", "The API answered without a security group object.")

    def rules(direction: str) -> list[dict[str, Any]] | None:
        found = _rules(body[direction])
        return None if not found and prior.get(direction) is None else found

    return {
        "id": body["id"],
        "name": body["name"],
        "description": body.get("description"),
        "ingress": rules("ingress"),
        "egress": rules("egress"),
        "is_default": bool(body["is_default"]),
        "created_at": rfc3339_utc(body["created_at"]),
    }
