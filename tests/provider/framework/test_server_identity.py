"""Resource identity through ProviderServer (protocol 6.9+): schemas, identity returned by create, read,
plan and import, import by identity, and upgrades of stored identities."""

import pytest

from provider._proto import tfplugin6_pb2 as pb
from provider.cty import UNKNOWN, Object, decode_msgpack, encode_msgpack, type_from_json
from provider.framework.server import ProviderServer
from tests.provider.framework.sample_provider import SampleProvider, ThingResource

THING = ThingResource.schema.cty_type
IDENTITY = ThingResource.identity_schema.cty_type  # type: ignore[union-attr]


@pytest.fixture
def provider():
    return SampleProvider()


@pytest.fixture
def server(provider):
    return ProviderServer(provider)


def dv(value, t=THING):
    return pb.DynamicValue(msgpack=encode_msgpack(value, t))


def identity_data(identity):
    return pb.ResourceIdentityData(identity_data=dv(identity, IDENTITY))


def identity_of(message):
    return decode_msgpack(message.identity_data.msgpack, IDENTITY) if message.identity_data.msgpack else None


def thing(**values):
    return {"id": None, "name": "a", "zone": None, "size": None, **values}


def errors(resp):
    return [d for d in resp.diagnostics if d.severity == pb.Diagnostic.ERROR]


def test_identity_schemas_list_resources_that_declare_one(server):
    resp = server.get_resource_identity_schemas(pb.GetResourceIdentitySchemas.Request())
    assert list(resp.identity_schemas) == ["sample_thing"]
    schema = resp.identity_schemas["sample_thing"]
    assert schema.version == 1
    (attr,) = schema.identity_attributes
    assert (attr.name, attr.required_for_import, attr.optional_for_import) == ("id", True, False)
    assert type_from_json(attr.type) == type_from_json(b'"string"')
    assert attr.description == "The thing's id."


def test_identity_returned_by_apply_and_read(server):
    planned = thing(id=UNKNOWN, zone="a")
    created = server.apply_resource_change(
        pb.ApplyResourceChange.Request(
            type_name="sample_thing", prior_state=dv(None), planned_state=dv(planned)
        )
    )
    assert not created.diagnostics
    assert identity_of(created.new_identity) == {"id": "t-1"}

    state = decode_msgpack(created.new_state.msgpack, THING)
    read = server.read_resource(pb.ReadResource.Request(type_name="sample_thing", current_state=dv(state)))
    assert identity_of(read.new_identity) == {"id": "t-1"}  # also for state that had no identity yet

    destroyed = server.apply_resource_change(
        pb.ApplyResourceChange.Request(
            type_name="sample_thing", prior_state=dv(state), planned_state=dv(None)
        )
    )
    assert not destroyed.HasField("new_identity")


def test_identity_read_of_gone_object_sends_none_and_failed_read_keeps_it(server, provider):
    gone = server.read_resource(
        pb.ReadResource.Request(
            type_name="sample_thing", current_state=dv(thing(id="t-404")),
            current_identity=identity_data({"id": "t-404"}),
        )
    )
    assert decode_msgpack(gone.new_state.msgpack, THING) is None
    assert not gone.HasField("new_identity")

    def broken_read(ctx, state):
        raise RuntimeError("API down")

    provider.thing.read = broken_read
    failed = server.read_resource(
        pb.ReadResource.Request(
            type_name="sample_thing", current_state=dv(thing(id="t-7")),
            current_identity=identity_data({"id": "t-7"}),
        )
    )
    assert errors(failed)
    assert identity_of(failed.new_identity) == {"id": "t-7"}


def test_identity_planned_on_update_none_on_create(server):
    create = server.plan_resource_change(
        pb.PlanResourceChange.Request(
            type_name="sample_thing", prior_state=dv(None), proposed_new_state=dv(thing()), config=dv(thing())
        )
    )
    assert not create.diagnostics and not create.HasField("planned_identity")  # the id is not known yet

    prior = thing(id="t-2", zone="a")
    update = server.plan_resource_change(
        pb.PlanResourceChange.Request(
            type_name="sample_thing", prior_state=dv(prior), proposed_new_state=dv({**prior, "size": 3}),
            config=dv(thing(size=3)), prior_identity=identity_data({"id": "t-2"}),
        )
    )
    assert not update.diagnostics
    assert identity_of(update.planned_identity) == {"id": "t-2"}


def test_identity_import_by_identity_and_by_id(server):
    by_identity = server.import_resource_state(
        pb.ImportResourceState.Request(type_name="sample_thing", identity=identity_data({"id": "t-5"}))
    )
    assert not by_identity.diagnostics
    (imported,) = by_identity.imported_resources
    assert imported.type_name == "sample_thing"
    assert decode_msgpack(imported.state.msgpack, THING) == thing(id="t-5", name=None)
    assert identity_of(imported.identity) == {"id": "t-5"}

    by_id = server.import_resource_state(pb.ImportResourceState.Request(type_name="sample_thing", id="t-6"))
    assert identity_of(by_id.imported_resources[0].identity) == {"id": "t-6"}


def test_identity_import_by_identity_refused_without_identity_schema(server, provider):
    provider.thing.identity_schema = None
    resp = server.import_resource_state(
        pb.ImportResourceState.Request(type_name="sample_thing", identity=identity_data({"id": "t-5"}))
    )
    (error,) = errors(resp)
    assert error.summary == "Resource Identity Not Supported" and not resp.imported_resources


def test_identity_upgrade_current_older_and_newer_versions(server):
    def upgrade(version, raw):
        return server.upgrade_resource_identity(
            pb.UpgradeResourceIdentity.Request(
                type_name="sample_thing", version=version, raw_identity=pb.RawState(json=raw)
            )
        )

    current = upgrade(1, b'{"id": "t-1"}')
    assert not current.diagnostics and identity_of(current.upgraded_identity) == {"id": "t-1"}
    older = upgrade(0, b'{"thing_id": "t-2"}')
    assert not older.diagnostics and identity_of(older.upgraded_identity) == {"id": "t-2"}
    newer = upgrade(5, b'{"id": "t-3"}')
    assert "newer provider" in errors(newer)[0].detail
    no_identity = server.upgrade_resource_identity(
        pb.UpgradeResourceIdentity.Request(type_name="sample_echo", version=0)
    )
    assert errors(no_identity)


def test_identity_schema_type_is_an_object_of_its_attributes():
    assert Object({"id": type_from_json(b'"string"')}) == IDENTITY
