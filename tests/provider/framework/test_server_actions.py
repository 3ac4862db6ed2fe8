"""Actions through ProviderServer (protocol 6.10, Terraform 1.14+): schemas and metadata, validation,
plan-time checks with unknown values, and the invoke stream (progress events, then exactly one completed
event carrying every problem, an exception or a cancellation included)."""

import threading
import time

import pytest

from provider._proto import tfplugin6_pb2 as pb
from provider.cty import UNKNOWN, encode_msgpack
from provider.framework.server import ProviderServer
from tests.provider.framework.sample_provider import PokeAction, SampleProvider

POKE = PokeAction.schema.cty_type


@pytest.fixture
def provider():
    provider = SampleProvider()
    provider.thing.objects["t-1"] = {"id": "t-1", "name": "a", "zone": "a", "size": None}
    return provider


@pytest.fixture
def server(provider):
    return ProviderServer(provider)


def config(thing_id, times=None, wait=None):
    return pb.DynamicValue(msgpack=encode_msgpack({"thing_id": thing_id, "times": times, "wait": wait}, POKE))


def invoked(server, thing_id, times=None, wait=None, action_type="sample_poke"):
    request = pb.InvokeAction.Request(action_type=action_type, config=config(thing_id, times, wait))
    return list(server.invoke_action(request))


def progress(events):
    return [e.progress.message for e in events if e.WhichOneof("type") == "progress"]


def test_action_schema_and_metadata(server):
    schema = server.get_provider_schema(pb.GetProviderSchema.Request())
    attrs = {a.name: a for a in schema.action_schemas["sample_poke"].schema.block.attributes}
    assert attrs["thing_id"].required and attrs["times"].optional
    meta = server.get_metadata(pb.GetMetadata.Request())
    assert [m.type_name for m in meta.actions] == ["sample_poke"]


def test_action_validate_config_runs_validators(server):
    bad = server.validate_action_config(
        pb.ValidateActionConfig.Request(type_name="sample_poke", config=config(""))
    )
    (error,) = bad.diagnostics
    assert error.severity == pb.Diagnostic.ERROR and error.attribute.steps[0].attribute_name == "thing_id"
    good = server.validate_action_config(
        pb.ValidateActionConfig.Request(type_name="sample_poke", config=config(UNKNOWN))
    )
    assert list(good.diagnostics) == []


def test_action_plan_checks_known_values_only(server):
    missing = server.plan_action(pb.PlanAction.Request(action_type="sample_poke", config=config("t-9")))
    assert [d.summary for d in missing.diagnostics] == ["Thing Not Found"]
    for thing_id in ("t-1", UNKNOWN):
        request = pb.PlanAction.Request(action_type="sample_poke", config=config(thing_id))
        planned = server.plan_action(request)
        assert list(planned.diagnostics) == []


def test_action_invoke_streams_progress_then_one_completed_event(server, provider):
    events = invoked(server, "t-1", times=3)
    assert progress(events) == ["poke 1/3", "poke 2/3", "poke 3/3"]
    assert [e.WhichOneof("type") for e in events][-1] == "completed"
    assert list(events[-1].completed.diagnostics) == []
    assert provider.poke.poked == ["t-1"] * 3


def test_action_invoke_error_reported_by_author_stops_the_action(server, provider):
    events = invoked(server, "tired", times=3)
    assert progress(events) == ["poke 1/3", "poke 2/3"]  # the message of the failing step still shows
    (error,) = events[-1].completed.diagnostics
    assert error.summary == "Too Tired" and error.severity == pb.Diagnostic.ERROR
    assert provider.poke.poked == ["tired", "tired"]


def test_action_invoke_exception_becomes_internal_error_after_progress(server):
    events = invoked(server, "boom", times=3)
    assert progress(events) == ["poke 1/3"]
    (error,) = events[-1].completed.diagnostics
    assert error.summary == "Internal Provider Error" and "the poker broke" in error.detail


def test_action_invoke_unknown_type_completes_with_error(server):
    (event,) = invoked(server, "t-1", action_type="sample_nope")
    (error,) = event.completed.diagnostics
    assert error.summary == "Unknown Action Type" and "sample_nope" in error.detail


def test_action_invoke_cancelled_by_stop_provider(server):
    events: list[pb.InvokeAction.Event] = []
    worker = threading.Thread(target=lambda: events.extend(invoked(server, "t-1", times=2, wait=600)))
    worker.start()
    deadline = time.monotonic() + 60  # a ceiling: the first poke comes at once, unless the machine is busy
    while not server.provider.poke.poked and time.monotonic() < deadline:
        time.sleep(0.01)  # until the first poke, after which the action waits 10 minutes
    server.stop_provider(pb.StopProvider.Request())
    worker.join(60)
    assert not worker.is_alive()  # the stop cut the 10-minute wait short
    assert progress(events) == ["poke 1/2"]
    assert [d.summary for d in events[-1].completed.diagnostics] == ["Operation Cancelled"]
