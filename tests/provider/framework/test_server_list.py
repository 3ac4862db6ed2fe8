"""List resources through ProviderServer (protocol 6.10, `terraform query`): schemas, validation, the
event stream with identities, optional full states, the limit, and errors as diagnostics."""

import pytest

from provider._proto import tfplugin6_pb2 as pb
from provider.cty import decode_msgpack, encode_msgpack
from provider.framework.server import ProviderServer
from tests.provider.framework.sample_provider import SampleProvider, ThingLister, ThingResource

THING = ThingResource.schema.cty_type
IDENTITY = ThingResource.identity_schema.cty_type  # type: ignore[union-attr]
CONFIG = ThingLister.schema.cty_type


@pytest.fixture
def provider():
    provider = SampleProvider()
    for n, name in enumerate(["train-a", "train-b", "infer"], start=1):
        provider.thing.objects[f"t-{n}"] = {"id": f"t-{n}", "name": name, "zone": "a", "size": None}
    return provider


@pytest.fixture
def server(provider):
    return ProviderServer(provider)


def listed(server, prefix=None, *, include=False, limit=100):
    request = pb.ListResource.Request(
        type_name="sample_thing",
        config=pb.DynamicValue(msgpack=encode_msgpack({"name_prefix": prefix}, CONFIG)),
        include_resource_object=include,
        limit=limit,
    )
    return list(server.list_resource(request))


def test_list_schema_and_metadata(server):
    schema = server.get_provider_schema(pb.GetProviderSchema.Request())
    (attr,) = schema.list_resource_schemas["sample_thing"].block.attributes
    assert attr.name == "name_prefix" and attr.optional
    meta = server.get_metadata(pb.GetMetadata.Request())
    assert [m.type_name for m in meta.list_resources] == ["sample_thing"]


def test_list_validate_config_runs_validators(server):
    bad = server.validate_list_resource_config(
        pb.ValidateListResourceConfig.Request(
            type_name="sample_thing",
            config=pb.DynamicValue(msgpack=encode_msgpack({"name_prefix": ""}, CONFIG)),
        )
    )
    (error,) = bad.diagnostics
    assert error.severity == pb.Diagnostic.ERROR and error.attribute.steps[0].attribute_name == "name_prefix"


def test_list_streams_identities_and_states_only_when_asked(server):
    events = listed(server, "train")
    assert [e.display_name for e in events] == ["train-a", "train-b"]
    assert [decode_msgpack(e.identity.identity_data.msgpack, IDENTITY) for e in events] == [
        {"id": "t-1"}, {"id": "t-2"}
    ]
    assert not any(e.HasField("resource_object") or e.diagnostic for e in events)

    (full,) = listed(server, "infer", include=True)
    assert decode_msgpack(full.resource_object.msgpack, THING) == {
        "id": "t-3", "name": "infer", "zone": "a", "size": None
    }


def test_list_stops_at_the_limit(server):
    assert [e.display_name for e in listed(server, limit=2)] == ["train-a", "train-b"]


def test_list_error_ends_the_stream_with_a_diagnostic(server, provider):
    provider.thing.objects["t-4"] = {"id": "t-4", "name": "broken", "zone": "a", "size": None}
    *found, last = listed(server)
    assert len(found) == 3
    (error,) = last.diagnostic
    assert (error.severity, error.summary) == (pb.Diagnostic.ERROR, "Broken Thing")
    assert not last.HasField("identity")


def test_list_of_resource_without_identity_is_a_provider_bug(server, provider):
    provider.thing.identity_schema = None
    (event,) = listed(server)
    assert event.diagnostic[0].summary == "List Resource Without Identity"


def test_list_unknown_type_answers_a_diagnostic(server):
    (event,) = server.list_resource(pb.ListResource.Request(type_name="sample_nothing"))
    assert event.diagnostic[0].summary == "Unknown List Resource Type"
