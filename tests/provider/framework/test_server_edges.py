"""ProviderServer behaviour at the edges: failures keep Terraform's state, paths into nested values."""

import pytest

from provider._proto import tfplugin6_pb2 as pb
from provider.cty import UNKNOWN, decode_msgpack, encode_json, encode_msgpack, is_unknown
from provider.framework import (
    Context,
    DiagnosticError,
    ListNestedAttribute,
    MapNestedAttribute,
    Provider,
    Resource,
    Schema,
    SetNestedBlock,
    SingleNestedBlock,
    StringAttribute,
    requires_replace,
    root,
)
from provider.framework.server import ProviderServer
from provider.framework.validators import string_length

NESTED = Schema(
    attributes={
        "id": StringAttribute(computed=True),
        "items": ListNestedAttribute(
            optional=True,
            attributes={
                "name": StringAttribute(
                    required=True, validators=[string_length(max=3)], plan_modifiers=[requires_replace()]
                )
            },
        ),
        "env": MapNestedAttribute(optional=True, attributes={"value": StringAttribute(required=True)}),
    },
    blocks={
        "rule": SetNestedBlock(
            attributes={
                "port": StringAttribute(required=True),
                "kind": StringAttribute(optional=True, computed=True, default="tcp"),
            }
        ),
        "options": SingleNestedBlock(attributes={"color": StringAttribute(optional=True)}),
    },
)
T = NESTED.cty_type


class EdgeResource(Resource):
    type_name = "edge_thing"
    schema = NESTED
    mode = "ok"

    def create(self, ctx: Context, plan: dict) -> dict | None:
        if self.mode == "unknown":
            return plan  # id still unknown: a provider bug the framework must name
        if self.mode == "partial":
            ctx.error("Error Creating Thing", "The backend failed half way.")
            return {**plan, "id": "half"}
        return {**plan, "id": "x"}

    def read(self, ctx: Context, state: dict) -> dict | None:
        raise DiagnosticError("Error Reading Thing", "backend down", root("id"))

    def update(self, ctx: Context, plan: dict, state: dict) -> dict | None:
        raise RuntimeError("update exploded")

    def delete(self, ctx: Context, state: dict) -> None:
        ctx.error("Error Deleting Thing", "still attached")


class EdgeProvider(Provider):
    type_name = "edge"

    def __init__(self) -> None:
        self.resource = EdgeResource()

    def resources(self) -> list[Resource]:
        return [self.resource]


@pytest.fixture
def server():
    return ProviderServer(EdgeProvider())


def dv(value):
    return pb.DynamicValue(msgpack=encode_msgpack(value, T))


def obj(**values):
    return {"id": None, "items": None, "env": None, "rule": [], "options": None, **values}


def steps(path):
    return [s.WhichOneof("selector") + "=" + str(getattr(s, s.WhichOneof("selector"))) for s in path.steps]


def test_validate_paths_index_into_lists_and_maps(server):
    config = obj(items=[{"name": "ok"}, {"name": "toolong"}], env={"A": {"value": "1"}})
    resp = server.validate_resource_config(
        pb.ValidateResourceConfig.Request(type_name="edge_thing", config=dv(config))
    )
    (diag,) = resp.diagnostics
    assert steps(diag.attribute) == ["attribute_name=items", "element_key_int=1", "attribute_name=name"]


def test_plan_requires_replace_inside_list_and_set_block_defaults(server):
    prior = obj(id="x", items=[{"name": "a"}], rule=[{"port": "22", "kind": "tcp"}])
    config = obj(items=[{"name": "b"}], rule=[{"port": "22", "kind": None}, {"port": "80", "kind": None}])
    proposed = obj(
        id="x", items=[{"name": "b"}], rule=[{"port": "22", "kind": "tcp"}, {"port": "80", "kind": None}]
    )
    resp = server.plan_resource_change(
        pb.PlanResourceChange.Request(
            type_name="edge_thing", prior_state=dv(prior), proposed_new_state=dv(proposed), config=dv(config)
        )
    )
    assert not resp.diagnostics
    assert [steps(p) for p in resp.requires_replace] == [
        ["attribute_name=items", "element_key_int=0", "attribute_name=name"]
    ]
    planned = decode_msgpack(resp.planned_state.msgpack, T)
    assert sorted(r["kind"] for r in planned["rule"]) == ["tcp", "tcp"]
    assert is_unknown(planned["id"])


def test_plan_reads_json_dynamic_values(server):
    config = obj()
    resp = server.plan_resource_change(
        pb.PlanResourceChange.Request(
            type_name="edge_thing",
            prior_state=pb.DynamicValue(json=b"null"),
            proposed_new_state=pb.DynamicValue(json=encode_json(config, T)),
            config=dv(config),
        )
    )
    assert is_unknown(decode_msgpack(resp.planned_state.msgpack, T)["id"])


def test_apply_unknown_after_create_is_named(server):
    server.provider.resource.mode = "unknown"
    resp = server.apply_resource_change(
        pb.ApplyResourceChange.Request(
            type_name="edge_thing", prior_state=dv(None), planned_state=dv(obj(id=UNKNOWN)), config=dv(obj())
        )
    )
    (diag,) = resp.diagnostics
    assert diag.summary == "Provider Returned Unknown Values After Apply" and "id" in diag.detail
    assert decode_msgpack(resp.new_state.msgpack, T) is None


def test_apply_partial_create_returns_state_with_error(server):
    server.provider.resource.mode = "partial"
    resp = server.apply_resource_change(
        pb.ApplyResourceChange.Request(
            type_name="edge_thing", prior_state=dv(None), planned_state=dv(obj(id=UNKNOWN)), config=dv(obj())
        )
    )
    assert resp.diagnostics[0].summary == "Error Creating Thing"
    assert decode_msgpack(resp.new_state.msgpack, T)["id"] == "half"  # Terraform taints it


def test_failed_update_and_delete_keep_prior_state(server):
    prior = obj(id="x")
    update = server.apply_resource_change(
        pb.ApplyResourceChange.Request(
            type_name="edge_thing",
            prior_state=dv(prior),
            planned_state=dv(obj(id="x", items=[{"name": "a"}])),
            config=dv(obj()),
        )
    )
    assert update.diagnostics[0].summary == "Internal Provider Error"
    assert decode_msgpack(update.new_state.msgpack, T) == prior
    delete = server.apply_resource_change(
        pb.ApplyResourceChange.Request(
            type_name="edge_thing", prior_state=dv(prior), planned_state=dv(None), config=dv(None)
        )
    )
    assert delete.diagnostics[0].summary == "Error Deleting Thing"
    assert decode_msgpack(delete.new_state.msgpack, T) == prior


def test_failed_read_keeps_current_state_and_private(server):
    resp = server.read_resource(
        pb.ReadResource.Request(
            type_name="edge_thing", current_state=dv(obj(id="x")), private=b'{"etag":"7"}'
        )
    )
    (diag,) = resp.diagnostics
    assert diag.severity == pb.Diagnostic.ERROR and steps(diag.attribute) == ["attribute_name=id"]
    assert decode_msgpack(resp.new_state.msgpack, T) == obj(id="x")
    assert resp.private == b'{"etag":"7"}'


def test_upgrade_fills_missing_blocks(server):
    resp = server.upgrade_resource_state(
        pb.UpgradeResourceState.Request(
            type_name="edge_thing",
            version=0,
            raw_state=pb.RawState(json=b'{"id":"x","items":[{"name":"a"}]}'),
        )
    )
    assert decode_msgpack(resp.upgraded_state.msgpack, T) == obj(id="x", items=[{"name": "a"}])


def test_import_without_support_is_a_diagnostic(server):
    resp = server.import_resource_state(pb.ImportResourceState.Request(type_name="edge_thing", id="x"))
    assert resp.diagnostics[0].summary == "Resource Import Not Implemented"
    assert not resp.imported_resources
