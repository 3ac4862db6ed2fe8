import httpx
import pytest

from provider._proto import tfplugin6_pb2 as pb
from provider.cty import UNKNOWN, encode_msgpack
from provider.framework.server import ProviderServer
from provider.resources.provider import GpuCloudConfig, GpuCloudProvider

TYPE = GpuCloudProvider.schema.cty_type


def config(**values):
    return {"endpoint": None, "api_key": None, "request_timeout": None, "max_retries": None, **values}


def accepting(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"items": [], "next_page_token": None})


def configure(values, handler=accepting):
    provider = GpuCloudProvider(transport=httpx.MockTransport(handler))
    server = ProviderServer(provider)
    resp = server.configure_provider(
        pb.ConfigureProvider.Request(
            terraform_version="1.11.4", config=pb.DynamicValue(msgpack=encode_msgpack(values, TYPE))
        )
    )
    return resp, server


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    monkeypatch.delenv("GPUCLOUD_ENDPOINT", raising=False)
    monkeypatch.delenv("GPUCLOUD_API_KEY", raising=False)


def test_provider_config_defaults_and_env(monkeypatch):
    monkeypatch.setenv("GPUCLOUD_API_KEY", "k-env")
    resp, server = configure(config())
    assert not resp.diagnostics
    assert server._provider_data == GpuCloudConfig("http://127.0.0.1:8080", "k-env", 30.0, 4)


def test_provider_config_explicit_values_win(monkeypatch):
    monkeypatch.setenv("GPUCLOUD_ENDPOINT", "http://env:1")
    resp, server = configure(
        config(endpoint="https://api.example/", api_key="k", request_timeout="2m", max_retries=0)
    )
    assert not resp.diagnostics
    assert server._provider_data == GpuCloudConfig("https://api.example", "k", 120.0, 0)


def test_provider_config_missing_key_is_diagnostic_at_api_key():
    resp, _ = configure(config())
    (diag,) = resp.diagnostics
    assert diag.severity == pb.Diagnostic.ERROR and diag.summary == "Missing API Key"
    assert [s.attribute_name for s in diag.attribute.steps] == ["api_key"]


def test_provider_config_unknown_values_do_not_fail():
    resp, server = configure(config(endpoint=UNKNOWN))
    assert not resp.diagnostics
    assert server._provider_data.complete is False


def test_provider_config_validation_names_attribute():
    server = ProviderServer(GpuCloudProvider())
    resp = server.validate_provider_config(
        pb.ValidateProviderConfig.Request(
            config=pb.DynamicValue(
                msgpack=encode_msgpack(config(request_timeout="soon", max_retries=99), TYPE)
            )
        )
    )
    paths = sorted(d.attribute.steps[0].attribute_name for d in resp.diagnostics)
    assert paths == ["max_retries", "request_timeout"]


def test_provider_schema_marks_api_key_sensitive():
    resp = ProviderServer(GpuCloudProvider()).get_provider_schema(pb.GetProviderSchema.Request())
    attrs = {a.name: a for a in resp.provider.block.attributes}
    assert attrs["api_key"].sensitive and attrs["api_key"].optional


def problem(status, code, detail):
    body = {"title": "x", "status": status, "code": code, "detail": detail}
    return httpx.Response(status, json=body, headers={"content-type": "application/problem+json"})


def test_provider_config_builds_client_and_verifies_key_once():
    seen = []

    def handler(request):
        seen.append((request.url.path, request.headers["authorization"]))
        return accepting(request)

    resp, server = configure(config(api_key="gpc_good", max_retries=0), handler)
    assert not resp.diagnostics
    assert server._provider_data.client is not None
    assert seen == [("/v1/ssh-keys", "Bearer gpc_good")]


def test_provider_config_rejected_key_is_diagnostic_at_api_key():
    resp, server = configure(
        config(api_key="gpc_bad", max_retries=0), lambda r: problem(401, "unauthorized", "unknown API key")
    )
    (diag,) = resp.diagnostics
    assert diag.severity == pb.Diagnostic.ERROR and diag.summary == "Invalid API Key"
    assert [s.attribute_name for s in diag.attribute.steps] == ["api_key"]
    assert "rejected the API key" in diag.detail
    assert server._provider_data is None


def test_provider_config_unreachable_endpoint_is_diagnostic_at_endpoint():
    def refuse(request):
        raise httpx.ConnectError("connection refused", request=request)

    resp, _ = configure(config(api_key="k", endpoint="http://127.0.0.1:9", max_retries=0), refuse)
    (diag,) = resp.diagnostics
    assert diag.summary == "Cannot Reach the gpucloud API"
    assert [s.attribute_name for s in diag.attribute.steps] == ["endpoint"]
    assert "http://127.0.0.1:9" in diag.detail


def test_provider_lists_resources_and_data_sources():
    resp = ProviderServer(GpuCloudProvider()).get_provider_schema(pb.GetProviderSchema.Request())
    assert {"gpucloud_ssh_key", "gpucloud_shared_volume"} <= set(resp.resource_schemas)
    assert {
        "gpucloud_regions",
        "gpucloud_instance_types",
        "gpucloud_ssh_key",
        "gpucloud_shared_volume",
    } <= set(resp.data_source_schemas)


def test_provider_schema_offers_identity_and_list_resources_but_no_state_moves():
    server = ProviderServer(GpuCloudProvider())
    schema = server.get_provider_schema(pb.GetProviderSchema.Request())
    assert not schema.server_capabilities.move_resource_state  # no gpucloud resource takes moved state
    typed = {"gpucloud_gpu_cluster", "gpucloud_shared_volume", "gpucloud_ssh_key", "gpucloud_reserved_ip"}
    assert set(schema.list_resource_schemas) == typed
    request = pb.GetResourceIdentitySchemas.Request()
    identities = server.get_resource_identity_schemas(request).identity_schemas
    assert set(identities) == typed | {"gpucloud_security_group", "gpucloud_host_pool"}
    assert all([a.name for a in s.identity_attributes] == ["id"] for s in identities.values())
