"""Delegation of tfplugin6.Provider RPCs to a provider server, and go-plugin's small services."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from typing import Any
from unittest import mock

import grpc
import pytest

from provider._proto import grpc_controller_pb2, health_pb2, tfplugin6_pb2
from provider.plugin.log import configure_logging
from provider.plugin.services import (
    PROVIDER_SERVICE,
    AsyncProviderServicer,
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
    if hasattr(response, "completed"):  # InvokeAction events
        return [d.summary + ": " + d.detail for d in response.completed.diagnostics]
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


def test_servicer_ends_a_failing_action_with_a_completed_event() -> None:
    # Terraform panics on an InvokeAction event that is neither progress nor completed.
    def invoke_action(request: object) -> object:
        step = tfplugin6_pb2.InvokeAction.Event.Progress(message="1")
        yield tfplugin6_pb2.InvokeAction.Event(progress=step)
        raise KeyError("node")

    delegate = mock.Mock(spec=["invoke_action"])
    delegate.invoke_action.side_effect = invoke_action
    request = tfplugin6_pb2.InvokeAction.Request(action_type="gpucloud_cluster_node_action")
    events = list(DelegatingProviderServicer(delegate).InvokeAction(request, None))
    assert [e.WhichOneof("type") for e in events] == ["progress", "completed"]
    (error,) = events[1].completed.diagnostics
    assert error.summary == "Internal Provider Error" and "KeyError" in error.detail
    (missing,) = DelegatingProviderServicer(object()).InvokeAction(request, None)
    assert "does not implement the InvokeAction RPC" in missing.completed.diagnostics[0].detail


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
    asyncio.run(ControllerServicer(called.set).Shutdown(grpc_controller_pb2.Empty(), None))
    assert called.is_set()


def test_health_check_knows_only_the_plugin_service() -> None:
    servicer = HealthServicer()
    context = mock.AsyncMock()
    for name in ("", "plugin"):
        response = asyncio.run(servicer.Check(health_pb2.HealthCheckRequest(service=name), context))
        assert response.status == health_pb2.HealthCheckResponse.SERVING
    context.abort.side_effect = grpc.RpcError()
    with pytest.raises(grpc.RpcError):
        asyncio.run(servicer.Check(health_pb2.HealthCheckRequest(service="other"), context))
    assert context.abort.call_args.args[0] == grpc.StatusCode.NOT_FOUND.value[0]


class _ThreadRecordingDelegate:
    """Answers PlanResourceChange and ListResource, noting the thread each ran in."""

    def __init__(self, inline: bool) -> None:
        self.inline = inline
        self.threads: list[str] = []

    def runs_inline(self, rpc: str, request: object) -> bool:
        return self.inline and rpc == "PlanResourceChange"

    def plan_resource_change(self, request: object) -> tfplugin6_pb2.PlanResourceChange.Response:
        self.threads.append(threading.current_thread().name)
        return tfplugin6_pb2.PlanResourceChange.Response()

    def list_resource(self, request: object) -> Iterator[tfplugin6_pb2.ListResource.Event]:
        for name in ("a", "b"):
            self.threads.append(threading.current_thread().name)
            yield tfplugin6_pb2.ListResource.Event(display_name=name)


class _ThreadPerCallExecutor(Executor):
    """Every call in a new thread: a stream's steps never share one (they may in a real pool)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()

        def run() -> None:
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:
                future.set_exception(exc)

        threading.Thread(target=run, name="rpc-worker").start()
        return future


@pytest.mark.parametrize("inline", [True, False])
def test_async_servicer_runs_an_rpc_on_the_loop_only_when_the_provider_says_it_never_waits(
    inline: bool,
) -> None:
    delegate = _ThreadRecordingDelegate(inline)

    async def serve() -> list[str]:
        with _ThreadPerCallExecutor() as executor:
            servicer = AsyncProviderServicer(delegate, executor)
            response = await servicer.PlanResourceChange(tfplugin6_pb2.PlanResourceChange.Request(), None)
            assert not response.diagnostics
            listing = servicer.ListResource(tfplugin6_pb2.ListResource.Request(), None)
            events = [event async for event in listing]
            return [event.display_name for event in events]

    assert asyncio.run(serve()) == ["a", "b"]
    plan_thread, *list_threads = delegate.threads
    assert plan_thread == "MainThread" if inline else plan_thread.startswith("rpc")
    assert all(name.startswith("rpc") for name in list_threads)  # streams always run in workers
    assert len(list_threads) == 2  # each step in its own thread, the log fields set and reset fine


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    """Trace-level provider logs captured as hclog JSON lines."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    stream = io.StringIO()
    configure_logging({"TF_LOG": "trace"}, stream=stream, provider_address="registry.terraform.io/x/gpucloud")
    yield stream
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.captureWarnings(False)


class _LoggingDelegate:
    def read_resource(self, request: object) -> tfplugin6_pb2.ReadResource.Response:
        logging.getLogger("provider.resources").info("reading")
        return tfplugin6_pb2.ReadResource.Response()

    def read_data_source(self, request: object) -> tfplugin6_pb2.ReadDataSource.Response:
        logging.getLogger("provider.resources").info("reading data")
        return tfplugin6_pb2.ReadDataSource.Response()

    def list_resource(self, request: object) -> Iterator[tfplugin6_pb2.ListResource.Event]:
        logging.getLogger("provider.resources").info("listing")
        yield tfplugin6_pb2.ListResource.Event()

    def invoke_action(self, request: object) -> Iterator[tfplugin6_pb2.InvokeAction.Event]:
        logging.getLogger("provider.resources").info("invoking")
        yield tfplugin6_pb2.InvokeAction.Event(completed=tfplugin6_pb2.InvokeAction.Event.Completed())


def test_servicer_logs_carry_terraform_plugin_go_fields(log_lines: io.StringIO) -> None:
    servicer = DelegatingProviderServicer(_LoggingDelegate())
    servicer.ReadResource(tfplugin6_pb2.ReadResource.Request(type_name="gpucloud_ssh_key"), None)
    servicer.ReadResource(tfplugin6_pb2.ReadResource.Request(type_name="gpucloud_ssh_key"), None)
    servicer.ReadDataSource(tfplugin6_pb2.ReadDataSource.Request(type_name="gpucloud_regions"), None)
    list(servicer.ListResource(tfplugin6_pb2.ListResource.Request(type_name="gpucloud_gpu_cluster"), None))
    invoke = tfplugin6_pb2.InvokeAction.Request(action_type="gpucloud_cluster_node_action")
    list(servicer.InvokeAction(invoke, None))
    entries = [json.loads(line) for line in log_lines.getvalue().splitlines()]
    by_message: dict[str, list[dict[str, object]]] = {}
    for entry in entries:
        by_message.setdefault(str(entry["@message"]), []).append(entry)

    first, second = by_message["reading"]
    assert first["tf_rpc"] == "ReadResource" and first["tf_resource_type"] == "gpucloud_ssh_key"
    assert first["tf_provider_addr"] == "registry.terraform.io/x/gpucloud"
    assert first["tf_req_id"] != second["tf_req_id"]  # one id per request
    (data,) = by_message["reading data"]
    assert data["tf_rpc"] == "ReadDataSource" and data["tf_data_source_type"] == "gpucloud_regions"
    (listing,) = by_message["listing"]
    assert listing["tf_rpc"] == "ListResource" and listing["tf_list_resource_type"] == "gpucloud_gpu_cluster"
    (invoking,) = by_message["invoking"]
    assert invoking["tf_rpc"] == "InvokeAction"
    assert invoking["tf_action_type"] == "gpucloud_cluster_node_action"
    # Each request is bracketed at trace level, with its duration, under the same request id.
    received = [e for e in by_message["Received request"] if e["tf_req_id"] == first["tf_req_id"]]
    served = [e for e in by_message["Served request"] if e["tf_req_id"] == first["tf_req_id"]]
    assert len(received) == len(served) == 1 and isinstance(served[0]["tf_req_duration_ms"], int)
    assert len(by_message["Served request"]) == 5
