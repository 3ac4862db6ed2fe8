"""Delegation of tfplugin6.Provider RPCs to a provider server, and go-plugin's small services."""

from __future__ import annotations

import threading
from unittest import mock

import grpc
import pytest

from provider._proto import grpc_controller_pb2, health_pb2, tfplugin6_pb2
from provider.plugin.services import (
    PROVIDER_SERVICE,
    ControllerServicer,
    DelegatingProviderServicer,
    HealthServicer,
    UnavailableProvider,
    error_response,
    snake_case,
)

ALL_METHODS = list(PROVIDER_SERVICE.methods)


def _request_for(method_name: str) -> object:
    return getattr(
        tfplugin6_pb2, PROVIDER_SERVICE.methods_by_name[method_name].input_type.containing_type.name
    ).Request()


def _error_texts(response: object) -> list[str]:
    if not hasattr(response, "DESCRIPTOR"):  # a server-streaming RPC: the messages it sent
        return [text for message in response for text in _error_texts(message)]  # type: ignore[attr-defined]
    if hasattr(response, "diagnostic"):  # ListResource events
        return [d.summary + ": " + d.detail for d in response.diagnostic]
    if hasattr(response, "diagnostics"):
        assert all(d.severity == tfplugin6_pb2.Diagnostic.ERROR for d in response.diagnostics)
        return [d.summary + ": " + d.detail for d in response.diagnostics]
    if response.DESCRIPTOR.name == "Response" and hasattr(response, "Error"):  # StopProvider
        return [response.Error] if response.Error else []
    return [response.error.text] if response.error.text else []  # CallFunction


@pytest.mark.parametrize(
    ("rpc", "method"),
    [
        ("GetProviderSchema", "get_provider_schema"),
        ("ValidateDataResourceConfig", "validate_data_resource_config"),
        ("GetResourceIdentitySchemas", "get_resource_identity_schemas"),
        ("StopProvider", "stop_provider"),
    ],
)
def test_snake_case(rpc: str, method: str) -> None:
    assert snake_case(rpc) == method


@pytest.mark.parametrize("method", ALL_METHODS, ids=lambda m: m.name)
def test_error_response_carries_the_error_for_every_rpc(method: object) -> None:
    response = error_response(method, "Some Summary", "some detail")  # type: ignore[arg-type]
    texts = _error_texts(response)
    assert texts and "Some Summary" in texts[0] and "some detail" in texts[0]


def test_servicer_delegates_by_snake_case_name() -> None:
    expected = tfplugin6_pb2.GetProviderSchema.Response(provider=tfplugin6_pb2.Schema(version=3))
    delegate = mock.Mock(spec=["get_provider_schema"])
    delegate.get_provider_schema.return_value = expected
    servicer = DelegatingProviderServicer(delegate)
    request = tfplugin6_pb2.GetProviderSchema.Request()
    assert servicer.GetProviderSchema(request, None) is expected
    delegate.get_provider_schema.assert_called_once_with(request)


def test_servicer_turns_exceptions_into_diagnostics() -> None:
    delegate = mock.Mock(spec=["read_resource"])
    delegate.read_resource.side_effect = KeyError("missing")
    response = DelegatingProviderServicer(delegate).ReadResource(tfplugin6_pb2.ReadResource.Request(), None)
    assert response.diagnostics[0].summary == "Internal Provider Error"
    assert "KeyError" in response.diagnostics[0].detail


def test_servicer_answers_unimplemented_rpcs_with_a_diagnostic() -> None:
    response = DelegatingProviderServicer(object()).CallFunction(tfplugin6_pb2.CallFunction.Request(), None)
    assert "does not implement the CallFunction RPC" in response.error.text


def test_servicer_streams_and_ends_a_failing_stream_with_a_diagnostic() -> None:
    found = tfplugin6_pb2.ListResource.Event(display_name="first")

    def list_resource(request: object) -> object:
        yield found
        raise KeyError("page token")

    delegate = mock.Mock(spec=["list_resource"])
    delegate.list_resource.side_effect = list_resource
    servicer = DelegatingProviderServicer(delegate)
    events = list(servicer.ListResource(tfplugin6_pb2.ListResource.Request(), None))
    assert events[0] is found
    (error,) = events[1].diagnostic
    assert error.summary == "Internal Provider Error" and "KeyError" in error.detail


def test_servicer_answers_unimplemented_streaming_rpcs_with_a_diagnostic() -> None:
    (event,) = DelegatingProviderServicer(object()).ListResource(tfplugin6_pb2.ListResource.Request(), None)
    assert "does not implement the ListResource RPC" in event.diagnostic[0].detail


@pytest.mark.parametrize("method", ALL_METHODS, ids=lambda m: m.name)
def test_unavailable_provider_explains_itself_on_every_rpc(method: object) -> None:
    servicer = DelegatingProviderServicer(
        UnavailableProvider("Provider Failed To Start", "no module named x")
    )
    rpc = getattr(servicer, method.name)  # type: ignore[attr-defined]
    texts = _error_texts(rpc(_request_for(method.name), None))  # type: ignore[attr-defined]
    assert texts and texts[0].startswith("Provider Failed To Start")


def test_controller_shutdown_calls_back() -> None:
    called = threading.Event()
    ControllerServicer(called.set).Shutdown(grpc_controller_pb2.Empty(), None)  # type: ignore[arg-type]
    assert called.is_set()


def test_health_check_knows_only_the_plugin_service() -> None:
    servicer = HealthServicer(threading.Event())
    context = mock.Mock()
    for name in ("", "plugin"):
        response = servicer.Check(health_pb2.HealthCheckRequest(service=name), context)
        assert response.status == health_pb2.HealthCheckResponse.SERVING
    context.abort.side_effect = grpc.RpcError()
    with pytest.raises(grpc.RpcError):
        servicer.Check(health_pb2.HealthCheckRequest(service="other"), context)
    assert context.abort.call_args.args[0] == grpc.StatusCode.NOT_FOUND
