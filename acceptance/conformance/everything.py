"""`conformance_everything`: one attribute or block of every kind the framework offers, kept in the store."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

from acceptance.conformance.data import ConformanceData
from provider.cty import NUMBER, STRING, is_unknown
from provider.framework import (
    BoolAttribute,
    Context,
    DynamicAttribute,
    Float64Attribute,
    IdentityAttribute,
    IdentitySchema,
    Int64Attribute,
    ListAttribute,
    ListNestedAttribute,
    ListNestedBlock,
    ListResource,
    ListResult,
    MapAttribute,
    MapNestedAttribute,
    NumberAttribute,
    ObjectAttribute,
    Resource,
    Schema,
    SetAttribute,
    SetNestedAttribute,
    SetNestedBlock,
    SingleNestedAttribute,
    SingleNestedBlock,
    State,
    StringAttribute,
    requires_replace,
    root,
    use_state_for_unknown,
)
from provider.framework.validators import (
    each_element,
    int_between,
    size_at_most,
    string_length,
    string_matches,
    string_one_of,
)

KIND = "everything"

SCHEMA = Schema(
    description="A resource with an attribute or block of every kind: used by the conformance tests.",
    attributes={
        "id": StringAttribute(
            computed=True, description="Identifier.", plan_modifiers=[use_state_for_unknown()]
        ),
        "name": StringAttribute(
            required=True,
            description="Name, 1 to 32 characters (changes in place).",
            validators=[
                string_length(min=1, max=32),
                string_matches(r"[A-Za-z0-9_.-]+", "must contain only letters, digits, '_', '.' and '-'"),
            ],
        ),
        "region": StringAttribute(
            optional=True,
            computed=True,
            default="eu-1",
            description="Region; changing it re-creates.",
            validators=[string_one_of("eu-1", "us-1", "ap-1")],
            plan_modifiers=[requires_replace()],
        ),
        "replicas": Int64Attribute(
            optional=True,
            computed=True,
            default=1,
            description="Replica count.",
            validators=[int_between(0, 100)],
        ),
        "ratio": Float64Attribute(optional=True, description="A float."),
        "big": NumberAttribute(optional=True, description="An arbitrary-precision number."),
        "enabled": BoolAttribute(optional=True, computed=True, default=True, description="A bool."),
        "secret": StringAttribute(optional=True, sensitive=True, description="A sensitive string."),
        "tags": ListAttribute(
            element_type=STRING,
            optional=True,
            description="A list of strings.",
            validators=[each_element(string_length(min=1))],
        ),
        "zones": SetAttribute(
            element_type=STRING, optional=True, description="A set of strings.", validators=[size_at_most(5)]
        ),
        "labels": MapAttribute(element_type=STRING, optional=True, description="A map of strings."),
        "settings": ObjectAttribute(
            attribute_types={"mode": STRING, "level": NUMBER}, optional=True, description="An object."
        ),
        "anything": DynamicAttribute(optional=True, description="A value of any type."),
        "legacy_note": StringAttribute(
            optional=True, description="Old field.", deprecation_message="Use `labels` instead."
        ),
        "endpoint": SingleNestedAttribute(
            optional=True,
            description="A single nested attribute.",
            attributes={
                "host": StringAttribute(required=True, description="Host name."),
                "port": Int64Attribute(optional=True, computed=True, default=443, description="Port."),
            },
        ),
        "disks": ListNestedAttribute(
            optional=True,
            description="A list nested attribute.",
            attributes={
                "size": Int64Attribute(required=True, description="Size in GiB."),
                "disk_id": StringAttribute(
                    computed=True, description="Disk id.", plan_modifiers=[use_state_for_unknown()]
                ),
            },
        ),
        "rules": SetNestedAttribute(
            optional=True,
            description="A set nested attribute: must never show a perpetual diff.",
            attributes={
                "port": Int64Attribute(required=True, description="Port."),
                "protocol": StringAttribute(
                    optional=True, computed=True, default="tcp", description="Protocol."
                ),
                "rule_id": StringAttribute(
                    computed=True, description="Rule id.", plan_modifiers=[use_state_for_unknown()]
                ),
            },
        ),
        "env": MapNestedAttribute(
            optional=True,
            description="A map nested attribute.",
            attributes={"value": StringAttribute(required=True, description="Value.")},
        ),
        "revision": Int64Attribute(computed=True, description="Increases on every update."),
        "created_at": StringAttribute(
            computed=True, description="Creation time.", plan_modifiers=[use_state_for_unknown()]
        ),
    },
    blocks={
        "network": ListNestedBlock(
            description="A list block.",
            attributes={
                "cidr": StringAttribute(required=True, description="CIDR."),
                "gateway": StringAttribute(computed=True, description="Gateway derived from the CIDR."),
            },
        ),
        "placement": SetNestedBlock(
            description="A set block.",
            attributes={
                "zone": StringAttribute(required=True, description="Zone."),
                "weight": Int64Attribute(optional=True, description="Weight."),
            },
        ),
        "options": SingleNestedBlock(
            description="A single block.",
            attributes={"color": StringAttribute(optional=True, description="Color.")},
        ),
    },
)


def _fill(state: State, object_id: str) -> State:
    """Set every computed value the plan left unknown, deterministically from the configuration."""
    out = dict(state)
    out["id"] = object_id
    if is_unknown(out["created_at"]):
        out["created_at"] = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if out["disks"] is not None:
        out["disks"] = [
            {**d, "disk_id": f"{object_id}-disk{i}" if is_unknown(d["disk_id"]) else d["disk_id"]}
            for i, d in enumerate(out["disks"])
        ]
    if out["rules"] is not None:
        out["rules"] = [
            {**r, "rule_id": f"rule-{r['port']}" if is_unknown(r["rule_id"]) else r["rule_id"]}
            for r in out["rules"]
        ]
    out["network"] = [{**n, "gateway": "gw-" + n["cidr"].split("/")[0]} for n in out["network"]]
    return out


class EverythingResource(Resource):
    type_name = "conformance_everything"
    schema = SCHEMA
    import_id_attribute = "id"
    identity_schema = IdentitySchema({"id": IdentityAttribute(description="Identifier in the store.")})

    def create(self, ctx: Context, plan: State) -> State:
        data: ConformanceData = ctx.provider_data
        object_id = data.store.next_id(KIND)
        state = _fill({**plan, "revision": 1}, object_id)
        data.store.put(KIND, object_id, state, SCHEMA.cty_type)
        return state

    def read(self, ctx: Context, state: State) -> State | None:
        data: ConformanceData = ctx.provider_data
        found: State | None = data.store.get(KIND, state["id"], SCHEMA.cty_type)
        return found

    def update(self, ctx: Context, plan: State, state: State) -> State:
        data: ConformanceData = ctx.provider_data
        new = _fill({**plan, "revision": int(state["revision"] or 0) + 1}, state["id"])
        data.store.put(KIND, state["id"], new, SCHEMA.cty_type)
        return new

    def delete(self, ctx: Context, state: State) -> None:
        data: ConformanceData = ctx.provider_data
        data.store.delete(KIND, state["id"])

    def validate_config(self, ctx: Context, config: State) -> None:
        if config.get("ratio") is not None and not is_unknown(config["ratio"]) and config["ratio"] < 0:
            ctx.error("Invalid Ratio", "ratio must not be negative.", root("ratio"))


class EverythingLister(ListResource):
    """`list "conformance_everything"`: the stored objects, filtered by name prefix and region."""

    type_name = "conformance_everything"
    schema = Schema(
        description="Filters; every one left unset matches all.",
        attributes={
            "name_prefix": StringAttribute(optional=True, description="Only names starting with this."),
            "region": StringAttribute(
                optional=True,
                description="Only this region.",
                validators=[string_one_of("eu-1", "us-1", "ap-1")],
            ),
        },
    )

    def list(self, ctx: Context, config: State, *, include_state: bool) -> Iterator[ListResult]:
        data: ConformanceData = ctx.provider_data
        prefix, region = config.get("name_prefix") or "", config.get("region")
        for found in data.store.all(KIND, SCHEMA.cty_type):
            if found["name"].startswith(prefix) and region in (None, found["region"]):
                yield ListResult({"id": found["id"]}, found["name"], found if include_state else None)
