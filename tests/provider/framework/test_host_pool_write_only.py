"""The framework's write-only attributes (added for gpucloud_host_pool's key): declared only where Terraform
allows them, flagged in the protocol schema and the docs, null in every planned, applied, read and imported
state, and put back from the configuration for create and update."""

from __future__ import annotations

from typing import Any

import pytest

from provider._proto import tfplugin6_pb2 as pb
from provider.cty import decode_msgpack, encode_msgpack
from provider.framework import (
    Context,
    ListNestedAttribute,
    Provider,
    Resource,
    Schema,
    State,
    StringAttribute,
)
from provider.framework.docs import render_schema
from provider.framework.server import ProviderServer
from provider.framework.writeonly import with_write_only, without_write_only


class SecretResource(Resource):
    """Records what create and update were handed; stores nothing but `id` and `name`."""

    type_name = "sample_secret"
    import_id_attribute = "id"
    schema = Schema(attributes={
        "id": StringAttribute(computed=True, description="Id."),
        "name": StringAttribute(required=True, description="Name."),
        "secret_wo": StringAttribute(optional=True, write_only=True, description="Write-only secret."),
    })
    write_only_alternatives = {"secret_wo": "secret"}

    def __init__(self) -> None:
        self.seen: list[State] = []

    def create(self, ctx: Context, plan: State) -> State | None:
        self.seen.append(dict(plan))
        return {**plan, "id": "s-1"}  # returned as given: the server must drop the secret

    def update(self, ctx: Context, plan: State, state: State) -> State | None:
        self.seen.append(dict(plan))
        return dict(plan)

    def read(self, ctx: Context, state: State) -> State | None:
        return {**state, "secret_wo": "leaked by a buggy read"}


class SecretProvider(Provider):
    type_name = "sample"

    def __init__(self) -> None:
        self.resource = SecretResource()

    def resources(self) -> list[Resource]:
        return [self.resource]


T = SecretResource.schema.cty_type


def dv(value: Any) -> pb.DynamicValue:
    return pb.DynamicValue(msgpack=encode_msgpack(value, T))


def value(d: pb.DynamicValue) -> Any:
    return decode_msgpack(d.msgpack, T) if d.msgpack else None


@pytest.fixture
def provider() -> SecretProvider:
    return SecretProvider()


@pytest.fixture
def server(provider: SecretProvider) -> ProviderServer:
    return ProviderServer(provider)


def test_host_pool_write_only_cannot_be_computed_or_nested() -> None:
    with pytest.raises(ValueError, match="cannot be computed"):
        StringAttribute(optional=True, computed=True, write_only=True)
    with pytest.raises(ValueError, match="top level"):
        ListNestedAttribute(optional=True, attributes={"k": StringAttribute(optional=True, write_only=True)})


def test_host_pool_write_only_flag_reaches_the_protocol_and_the_docs(server: ProviderServer) -> None:
    schema = server.get_provider_schema(pb.GetProviderSchema.Request()).resource_schemas["sample_secret"]
    assert {a.name: a.write_only for a in schema.block.attributes} == {
        "id": False, "name": False, "secret_wo": True,
    }
    assert "`secret_wo` (String, Write-only, Terraform 1.11+)" in render_schema(SecretResource.schema)


def test_host_pool_write_only_value_is_never_planned(server: ProviderServer) -> None:
    config = {"id": None, "name": "a", "secret_wo": "s3cret"}
    created = server.plan_resource_change(pb.PlanResourceChange.Request(
        type_name="sample_secret", prior_state=dv(None), proposed_new_state=dv(config), config=dv(config)))
    assert value(created.planned_state)["secret_wo"] is None
    prior = {"id": "s-1", "name": "a", "secret_wo": None}
    unchanged = server.plan_resource_change(pb.PlanResourceChange.Request(
        type_name="sample_secret", prior_state=dv(prior),
        proposed_new_state=dv({**prior, "secret_wo": "s3cret"}), config=dv(config)))
    assert value(unchanged.planned_state) == prior  # the secret alone is no change


def test_host_pool_write_only_value_comes_from_config_at_apply_and_leaves_no_state(
    server: ProviderServer, provider: SecretProvider
) -> None:
    config = {"id": None, "name": "a", "secret_wo": "s3cret"}
    planned = {"id": None, "name": "a", "secret_wo": None}
    applied = server.apply_resource_change(pb.ApplyResourceChange.Request(
        type_name="sample_secret", prior_state=dv(None), planned_state=dv(planned), config=dv(config)))
    assert not applied.diagnostics
    assert provider.resource.seen == [{"id": None, "name": "a", "secret_wo": "s3cret"}]
    state = value(applied.new_state)
    assert state == {"id": "s-1", "name": "a", "secret_wo": None}

    read = server.read_resource(pb.ReadResource.Request(type_name="sample_secret", current_state=dv(state)))
    assert value(read.new_state)["secret_wo"] is None
    imported = server.import_resource_state(
        pb.ImportResourceState.Request(type_name="sample_secret", id="s-1"))
    assert value(imported.imported_resources[0].state)["secret_wo"] is None


def test_host_pool_write_only_refused_where_terraform_would_store_it(server: ProviderServer) -> None:
    config = {"id": None, "name": "a", "secret_wo": "s3cret"}

    def validate(allowed: bool, cfg: dict[str, Any]) -> list[Any]:
        return list(server.validate_resource_config(pb.ValidateResourceConfig.Request(
            type_name="sample_secret", config=dv(cfg),
            client_capabilities=pb.ClientCapabilities(write_only_attributes_allowed=allowed))).diagnostics)

    assert validate(True, config) == []
    assert validate(False, {**config, "secret_wo": None}) == []
    (error,) = validate(False, config)
    assert "Terraform 1.11" in error.detail and "`secret`" in error.detail and "s3cret" not in error.detail


def test_host_pool_write_only_helpers_copy_only_when_needed() -> None:
    schema = SecretResource.schema
    state = {"id": "s-1", "name": "a", "secret_wo": None}
    assert without_write_only(schema, state) is state
    assert without_write_only(schema, None) is None
    assert with_write_only(schema, state, None) is state
    assert with_write_only(schema, state, {"secret_wo": "x"}) == {**state, "secret_wo": "x"}
    assert with_write_only(Schema(attributes={"n": StringAttribute(optional=True, description="n")}),
                           {"n": "a"}, {"n": "b"}) == {"n": "a"}
