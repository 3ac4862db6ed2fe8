import pytest

from provider._proto import tfplugin6_pb2 as pb
from provider.cty import UNKNOWN, encode_msgpack
from provider.framework.server import ProviderServer
from provider.resources.provider import GpuCloudConfig, GpuCloudProvider

TYPE = GpuCloudProvider.schema.cty_type


def config(**values):
    return {"endpoint": None, "api_key": None, "request_timeout": None, "max_retries": None, **values}


def configure(values):
    provider = GpuCloudProvider()
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
