"""A resource declaring `blocking_plan = False` has its PlanResourceChange served on the plugin's event
loop: its planning must never call the API (create, update and destroy plans alike)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from provider._proto import tfplugin6_pb2 as pb
from provider.cty import UNKNOWN, encode_msgpack
from provider.cty.types import BOOL, DYNAMIC, NUMBER, STRING, CtyType, List, Map, Object, Set
from provider.framework import Resource
from provider.framework.server import ProviderServer
from provider.resources.provider import RESOURCES, GpuCloudProvider

PLANS_INLINE = [r for r in RESOURCES if r.blocking_plan is False]


def test_plans_inline_covers_the_resources_whose_planning_calls_no_api():
    names = {r.type_name for r in PLANS_INLINE}
    assert {"gpucloud_ssh_key", "gpucloud_budget", "gpucloud_security_group"} <= names
    # A reservation's create plan reads the catalog to show the up-front charge it will make.
    assert "gpucloud_reservation" not in names


def sample(t: CtyType) -> Any:
    """A known value of type `t` (planning runs no validators: any value of the type will do)."""
    if t in (STRING, DYNAMIC):
        return "x"
    if t == NUMBER:
        return 1
    if t == BOOL:
        return False
    if isinstance(t, List | Set):
        return [sample(t.element)]
    if isinstance(t, Map):
        return {"k": sample(t.element)}
    if isinstance(t, Object):
        return {name: sample(attribute) for name, attribute in t.attributes.items()}
    raise AssertionError(f"no sample for {t!r}")


@pytest.mark.parametrize("resource", PLANS_INLINE, ids=lambda r: r.type_name)
@pytest.mark.parametrize("unknowns", [False, True], ids=["known", "unknown"])
def test_plans_inline_never_call_the_api(resource: type[Resource], unknowns: bool):
    calls: list[httpx.Request] = []

    def api(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(200, json={"items": [], "next_page_token": None})

    server = ProviderServer(GpuCloudProvider(transport=httpx.MockTransport(api)))
    provider_config = {
        "endpoint": "http://api.test", "api_key": "k", "request_timeout": None, "max_retries": 0,
    }
    configured = server.configure_provider(pb.ConfigureProvider.Request(
        config=pb.DynamicValue(msgpack=encode_msgpack(provider_config, GpuCloudProvider.schema.cty_type))))
    assert not configured.diagnostics
    calls.clear()  # the credentials check

    schema = resource.schema
    t = schema.cty_type

    def dv(value: object) -> pb.DynamicValue:
        return pb.DynamicValue(msgpack=encode_msgpack(value, t))

    def value(name: str, attribute: Any) -> Any:
        if attribute.required or attribute.optional:
            return UNKNOWN if unknowns else sample(attribute.cty_type)
        return None

    config = {name: value(name, a) for name, a in schema.attributes.items()}
    prior = {name: sample(a.cty_type) for name, a in schema.attributes.items()}
    changed = {**prior, **{k: v for k, v in config.items() if v is not None}}
    request = pb.PlanResourceChange.Request(type_name=resource.type_name)
    assert server.runs_inline("PlanResourceChange", request)
    plans = ((None, config, config), (prior, changed, config), (prior, None, None))  # create, update, destroy
    for before, proposed, plan_config in plans:
        response = server.plan_resource_change(pb.PlanResourceChange.Request(
            type_name=resource.type_name, prior_state=dv(before), proposed_new_state=dv(proposed),
            config=dv(plan_config)))
        assert not [d.summary for d in response.diagnostics if d.severity == pb.Diagnostic.ERROR]
    assert calls == []
