import json
import threading

import pytest

from provider._proto import tfplugin6_pb2 as pb
from provider.cty import UNKNOWN, decode_msgpack, encode_msgpack, is_unknown, type_from_json
from provider.framework.server import ProviderServer
from tests.provider.framework.sample_provider import SampleProvider, ThingResource

THING = ThingResource.schema.cty_type


@pytest.fixture
def provider():
    return SampleProvider()


@pytest.fixture
def server(provider):
    return ProviderServer(provider)


def dv(value, t=THING):
    return pb.DynamicValue(msgpack=encode_msgpack(value, t))


def value(d, t=THING):
    return decode_msgpack(d.msgpack, t)


def thing(**values):
    return {"id": None, "name": "a", "zone": None, "size": None, **values}


def errors(resp):
    return [d for d in resp.diagnostics if d.severity == pb.Diagnostic.ERROR]


def test_server_schema_advertises_capabilities_and_functions(server):
    resp = server.get_provider_schema(pb.GetProviderSchema.Request())
    caps = resp.server_capabilities
    assert caps.plan_destroy and caps.get_provider_schema_optional and caps.move_resource_state
    assert "add" in resp.functions
    schema = resp.resource_schemas["sample_thing"]
    assert schema.version == 1
    attrs = {a.name: a for a in schema.block.attributes}
    assert attrs["id"].computed and not attrs["id"].optional
    assert type_from_json(attrs["size"].type) == type_from_json(b'"number"')
    assert resp.ephemeral_resource_schemas["sample_token"].block.attributes
    assert server.get_provider_schema(pb.GetProviderSchema.Request()) is resp  # cached


def test_server_metadata_and_identity_schemas(server):
    meta = server.get_metadata(pb.GetMetadata.Request())
    assert [r.type_name for r in meta.resources] == ["sample_thing"]
    assert [f.name for f in meta.functions] == ["add"]
    assert not server.get_resource_identity_schemas(pb.GetResourceIdentitySchemas.Request()).diagnostics


def test_server_validate_reports_attribute_path(server):
    resp = server.validate_resource_config(
        pb.ValidateResourceConfig.Request(type_name="sample_thing", config=dv(thing(name="much-too-long")))
    )
    (diag,) = resp.diagnostics
    assert diag.severity == pb.Diagnostic.ERROR
    assert [s.attribute_name for s in diag.attribute.steps] == ["name"]


def test_server_unknown_type_is_a_diagnostic(server):
    resp = server.plan_resource_change(pb.PlanResourceChange.Request(type_name="sample_nope"))
    assert errors(resp)[0].summary == "Unknown Resource Type"


def test_server_plan_apply_read_lifecycle(server, provider):
    config = thing()
    plan = server.plan_resource_change(
        pb.PlanResourceChange.Request(
            type_name="sample_thing", prior_state=dv(None), proposed_new_state=dv(config), config=dv(config)
        )
    )
    assert not plan.diagnostics
    planned = value(plan.planned_state)
    assert is_unknown(planned["id"]) and planned["zone"] == "a"

    applied = server.apply_resource_change(
        pb.ApplyResourceChange.Request(
            type_name="sample_thing",
            prior_state=dv(None),
            planned_state=plan.planned_state,
            config=dv(config),
        )
    )
    assert not applied.diagnostics
    state = value(applied.new_state)
    assert state == {"id": "t-1", "name": "a", "zone": "a", "size": None}
    assert json.loads(applied.private) == {"etag": "1"}

    read = server.read_resource(
        pb.ReadResource.Request(
            type_name="sample_thing", current_state=applied.new_state, private=applied.private
        )
    )
    assert value(read.new_state) == state
    assert read.private == applied.private

    provider.thing.objects.clear()  # deleted out of band
    gone = server.read_resource(
        pb.ReadResource.Request(type_name="sample_thing", current_state=applied.new_state)
    )
    assert value(gone.new_state) is None


def test_server_plan_replace_and_destroy(server):
    prior = {"id": "t-1", "name": "a", "zone": "a", "size": None}
    config = thing(zone="b")
    plan = server.plan_resource_change(
        pb.PlanResourceChange.Request(
            type_name="sample_thing",
            prior_state=dv(prior),
            proposed_new_state=dv({**prior, "zone": "b"}),
            config=dv(config),
        )
    )
    assert [[s.attribute_name for s in p.steps] for p in plan.requires_replace] == [["zone"]]
    assert value(plan.planned_state)["id"] == "t-1"

    destroy = server.plan_resource_change(
        pb.PlanResourceChange.Request(
            type_name="sample_thing", prior_state=dv(prior), proposed_new_state=dv(None), config=dv(None)
        )
    )
    assert value(destroy.planned_state) is None


def test_server_internal_exception_becomes_diagnostic(server):
    config = thing(name="boom", id=UNKNOWN, zone="a")
    resp = server.apply_resource_change(
        pb.ApplyResourceChange.Request(
            type_name="sample_thing",
            prior_state=dv(None),
            planned_state=dv(config),
            config=dv(thing(name="boom")),
        )
    )
    (diag,) = resp.diagnostics
    assert diag.severity == pb.Diagnostic.ERROR
    assert diag.summary == "Internal Provider Error"
    assert "RuntimeError: backend exploded" in diag.detail
    assert value(resp.new_state) is None


def test_server_bad_message_never_raises(server):
    resp = server.plan_resource_change(
        pb.PlanResourceChange.Request(
            type_name="sample_thing", proposed_new_state=pb.DynamicValue(msgpack=b"\xc1garbage")
        )
    )
    assert errors(resp)


def test_server_upgrade_same_version_fills_missing_attributes(server):
    resp = server.upgrade_resource_state(
        pb.UpgradeResourceState.Request(
            type_name="sample_thing", version=1, raw_state=pb.RawState(json=b'{"id": "t-1", "name": "a"}')
        )
    )
    assert not resp.diagnostics
    assert value(resp.upgraded_state) == {"id": "t-1", "name": "a", "zone": None, "size": None}


def test_server_upgrade_from_older_version_uses_upgrader(server):
    resp = server.upgrade_resource_state(
        pb.UpgradeResourceState.Request(
            type_name="sample_thing", version=0, raw_state=pb.RawState(json=b'{"id": "t-9", "title": "old"}')
        )
    )
    assert value(resp.upgraded_state) == {"id": "t-9", "name": "old", "zone": None, "size": None}
    newer = server.upgrade_resource_state(
        pb.UpgradeResourceState.Request(
            type_name="sample_thing", version=7, raw_state=pb.RawState(json=b"{}")
        )
    )
    assert "newer provider" in errors(newer)[0].detail


def test_server_import_by_id_sets_type_name(server):
    resp = server.import_resource_state(pb.ImportResourceState.Request(type_name="sample_thing", id="t-5"))
    (imported,) = resp.imported_resources
    assert imported.type_name == "sample_thing"
    assert value(imported.state) == {"id": "t-5", "name": None, "zone": None, "size": None}


def test_server_move_resource_state(server):
    resp = server.move_resource_state(
        pb.MoveResourceState.Request(
            source_provider_address="registry.terraform.io/x/sample",
            source_type_name="sample_old_thing",
            source_state=pb.RawState(json=b'{"id": "t-3", "label": "moved"}'),
            target_type_name="sample_thing",
        )
    )
    assert value(resp.target_state) == {"id": "t-3", "name": "moved", "zone": "a", "size": None}
    refused = server.move_resource_state(
        pb.MoveResourceState.Request(
            source_type_name="other", source_state=pb.RawState(json=b"{}"), target_type_name="sample_thing"
        )
    )
    assert errors(refused)[0].summary == "Unable to Move Resource State"


def test_server_configure_with_unknown_values(server, provider):
    schema_type = provider.schema.cty_type
    resp = server.configure_provider(
        pb.ConfigureProvider.Request(
            terraform_version="1.11.4", config=dv({"endpoint": UNKNOWN}, schema_type)
        )
    )
    assert not resp.diagnostics
    assert is_unknown(provider.configured_with["endpoint"])


def test_server_data_source_and_ephemeral(server, provider):
    ds_type = provider.data_sources()[0].schema.cty_type
    read = server.read_data_source(
        pb.ReadDataSource.Request(
            type_name="sample_echo", config=dv({"input": "hi", "output": None}, ds_type)
        )
    )
    assert value(read.state, ds_type) == {"input": "hi", "output": "HI"}

    eph_type = provider.token.schema.cty_type
    opened = server.open_ephemeral_resource(
        pb.OpenEphemeralResource.Request(
            type_name="sample_token", config=dv({"scope": "x", "token": None}, eph_type)
        )
    )
    assert value(opened.result, eph_type)["token"] == "secret-x"
    assert opened.HasField("renew_at")
    renewed = server.renew_ephemeral_resource(
        pb.RenewEphemeralResource.Request(type_name="sample_token", private=opened.private)
    )
    assert not renewed.diagnostics
    server.close_ephemeral_resource(
        pb.CloseEphemeralResource.Request(type_name="sample_token", private=opened.private)
    )
    assert provider.token.closed == ["L1"]


def test_server_call_function(server):
    from provider.cty import NUMBER

    ok = server.call_function(pb.CallFunction.Request(name="add", arguments=[dv(2, NUMBER), dv(3, NUMBER)]))
    assert decode_msgpack(ok.result.msgpack, NUMBER) == 5
    bad = server.call_function(pb.CallFunction.Request(name="add", arguments=[dv(2, NUMBER), dv(0, NUMBER)]))
    assert bad.error.text == "b must not be zero" and bad.error.function_argument == 1


def test_server_stop_provider_cancels_in_flight_wait(server, provider):
    config = thing(name="slow")
    result = {}

    def apply():
        result["resp"] = server.apply_resource_change(
            pb.ApplyResourceChange.Request(
                type_name="sample_thing",
                prior_state=dv(None),
                planned_state=dv({**config, "id": UNKNOWN, "zone": "a"}),
                config=dv(config),
            )
        )

    worker = threading.Thread(target=apply)
    worker.start()
    assert provider.thing.started.wait(5)
    server.stop_provider(pb.StopProvider.Request())
    worker.join(5)
    assert not worker.is_alive()
    (diag,) = result["resp"].diagnostics
    assert diag.summary == "Operation Cancelled"


def test_server_unsupported_rpc_answers_diagnostic(server):
    resp = server.upgrade_resource_identity(pb.UpgradeResourceIdentity.Request(type_name="sample_echo"))
    assert errors(resp)
    with pytest.raises(AttributeError):
        server.not_an_rpc  # noqa: B018


def test_server_has_a_method_for_every_rpc(server):
    service = pb.DESCRIPTOR.services_by_name["Provider"]
    for method in service.methods:
        snake = "".join("_" + c.lower() if c.isupper() else c for c in method.name).lstrip("_")
        assert callable(getattr(server, snake)), method.name


def test_server_advertises_move_resource_state_only_when_a_resource_moves_state():
    from provider.framework import Provider, Resource

    class Plain(Resource):
        type_name = "sample_plain"

    class NoMoves(Provider):
        def resources(self):
            return [Plain()]

    server = ProviderServer(NoMoves())
    schema = server.get_provider_schema(pb.GetProviderSchema.Request())
    assert not schema.server_capabilities.move_resource_state
    assert not server.get_metadata(pb.GetMetadata.Request()).server_capabilities.move_resource_state
    assert ProviderServer(SampleProvider())._capabilities().move_resource_state  # ThingResource moves


def test_server_runs_inline_only_what_never_waits(server, provider, monkeypatch):
    thing = ThingResource.type_name
    assert server.runs_inline("ValidateResourceConfig", pb.ValidateResourceConfig.Request(type_name=thing))
    assert server.runs_inline("UpgradeResourceState", pb.UpgradeResourceState.Request(type_name=thing))
    assert not server.runs_inline("ConfigureProvider", pb.ConfigureProvider.Request())
    assert not server.runs_inline("ReadDataSource", pb.ReadDataSource.Request(type_name="sample_data"))
    # A resource's own hooks may call an API: in a worker thread unless it declares it never waits.
    plan = pb.PlanResourceChange.Request(type_name=thing)
    assert not server.runs_inline("PlanResourceChange", plan)
    monkeypatch.setattr(ThingResource, "blocking", False)
    assert server.runs_inline("PlanResourceChange", plan)
    assert server.runs_inline("ApplyResourceChange", pb.ApplyResourceChange.Request(type_name=thing))
    assert not server.runs_inline("PlanResourceChange", pb.PlanResourceChange.Request(type_name="none"))


def test_server_runs_a_plan_inline_when_only_planning_never_waits(server, monkeypatch):
    # `blocking_plan = False`: planning calls no API though create/read/update/delete do.
    thing = ThingResource.type_name
    plan = pb.PlanResourceChange.Request(type_name=thing)
    monkeypatch.setattr(ThingResource, "blocking_plan", False)
    assert server.runs_inline("PlanResourceChange", plan)
    for rpc in ("ApplyResourceChange", "ReadResource", "ImportResourceState"):
        assert not server.runs_inline(rpc, getattr(pb, rpc).Request(type_name=thing))
    monkeypatch.setattr(ThingResource, "blocking", False)
    monkeypatch.setattr(ThingResource, "blocking_plan", True)
    assert not server.runs_inline("PlanResourceChange", plan)
    assert server.runs_inline("ApplyResourceChange", pb.ApplyResourceChange.Request(type_name=thing))


def test_server_stop_is_final_until_the_next_command_configures(server, provider):
    # Terraform may send an ApplyResourceChange it had already decided on after StopProvider (Ctrl-C
    # right at "Creating..."): it is cancelled too. A later ConfigureProvider (the next command in a
    # long-lived debug process) starts afresh.
    config = thing(name="slow")
    apply = pb.ApplyResourceChange.Request(
        type_name="sample_thing",
        prior_state=dv(None),
        planned_state=dv({**config, "id": UNKNOWN, "zone": "a"}),
        config=dv(config),
    )
    server.stop_provider(pb.StopProvider.Request())
    (diag,) = server.apply_resource_change(apply).diagnostics
    assert diag.summary == "Operation Cancelled"
    config = dv({"endpoint": None}, provider.schema.cty_type)
    server.configure_provider(pb.ConfigureProvider.Request(config=config))
    assert not server._context().cancelled
