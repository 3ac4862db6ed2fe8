"""The gRPC services a go-plugin host expects: tfplugin6.Provider plus go-plugin's own four.

`tfplugin6.Provider` is served by delegation: RPC `GetProviderSchema` calls the provider server's
`get_provider_schema(request)`, and so on for every RPC of the proto. A missing method or an exception
(the framework promises none) becomes an error diagnostic in the RPC's own response type, never a
gRPC error: Terraform shows diagnostics to the user but reports gRPC errors as a crashed plugin.
Server-streaming RPCs (ListResource, InvokeAction) delegate to a method returning an iterator of
messages; a failure there ends the stream with one message carrying the error. The server is
`provider.plugin.http2`'s: `AsyncProviderServicer` runs each RPC on its event loop or in a worker
thread. Each RPC runs inside `request_fields`, so every log line it causes carries `tf_rpc`,
`tf_req_id` and the type it is about, as in Go providers.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Executor
from typing import Any

from google.protobuf import empty_pb2
from google.protobuf.descriptor import MethodDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass

from provider._proto import (
    grpc_broker_pb2,
    grpc_controller_pb2,
    grpc_stdio_pb2,
    health_pb2,
    tfplugin6_pb2,
)
from provider.plugin.http2 import NOT_FOUND, GrpcServer
from provider.plugin.log import TRACE, request_fields

log = logging.getLogger("gpucloud.plugin")

PROVIDER_SERVICE = tfplugin6_pb2.DESCRIPTOR.services_by_name["Provider"]
HEALTH_SERVICE_NAME = "plugin"  # the name go-plugin's host checks


def snake_case(rpc_name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", rpc_name).lower()


def error_response(method: MethodDescriptor, summary: str, detail: str) -> Message:
    """An RPC's response type carrying one error, in whichever field that response reports errors."""
    response = GetMessageClass(method.output_type)()
    fields = response.DESCRIPTOR.fields_by_name
    if "diagnostics" in fields:
        response.diagnostics.add(  # type: ignore[attr-defined]
            severity=tfplugin6_pb2.Diagnostic.ERROR, summary=summary, detail=detail
        )
    elif "diagnostic" in fields:  # ListResource events
        response.diagnostic.add(  # type: ignore[attr-defined]
            severity=tfplugin6_pb2.Diagnostic.ERROR, summary=summary, detail=detail
        )
    elif "completed" in fields:  # InvokeAction events: an error ends the action
        response.completed.diagnostics.add(  # type: ignore[attr-defined]
            severity=tfplugin6_pb2.Diagnostic.ERROR, summary=summary, detail=detail
        )
    elif "error" in fields:  # CallFunction
        response.error.text = f"{summary}: {detail}"  # type: ignore[attr-defined]
    elif "Error" in fields:  # StopProvider
        response.Error = f"{summary}: {detail}"  # type: ignore[attr-defined]
    return response


def type_field(rpc_name: str, request: Message) -> dict[str, str]:
    """The log field naming what an RPC is about, keyed as terraform-plugin-go keys it."""
    type_name = (
        getattr(request, "type_name", "")
        or getattr(request, "target_type_name", "")
        or getattr(request, "action_type", "")
    )
    if not type_name:
        return {}
    if "Action" in rpc_name:
        return {"tf_action_type": type_name}
    if "DataSource" in rpc_name or "DataResource" in rpc_name:
        return {"tf_data_source_type": type_name}
    if "Ephemeral" in rpc_name:
        return {"tf_ephemeral_resource_type": type_name}
    if "ListResource" in rpc_name:
        return {"tf_list_resource_type": type_name}
    return {"tf_resource_type": type_name}


def _unsupported(method: MethodDescriptor) -> Message:
    return error_response(
        method,
        "Unsupported Provider Operation",
        f"This provider does not implement the {method.name} RPC. "
        "Upgrade the provider, or avoid the feature that needs it.",
    )


def _failed(method: MethodDescriptor, exc: Exception) -> Message:
    log.error("%s failed", method.name, exc_info=True)
    return error_response(
        method,
        "Internal Provider Error",
        f"The provider failed while handling {method.name}: {exc!r}. "
        "This is a bug in the provider; the provider log (TF_LOG_PROVIDER=debug) has the traceback.",
    )


def _served(started: float) -> None:
    elapsed_ms = int((time.monotonic() - started) * 1000)
    log.log(TRACE, "Served request", extra={"tf_req_duration_ms": elapsed_ms})


def _delegating_handler(method: MethodDescriptor) -> Callable[..., Any]:
    if method.server_streaming:
        return _delegating_stream_handler(method)
    attribute = snake_case(method.name)

    def handle(self: DelegatingProviderServicer, request: Message, context: Any) -> Message:
        with request_fields(method.name, **type_field(method.name, request)):
            started = time.monotonic()
            log.log(TRACE, "Received request")
            implementation = getattr(self.delegate, attribute, None)
            if implementation is None:
                return _unsupported(method)
            try:
                response: Message = implementation(request)
            except Exception as exc:
                return _failed(method, exc)
            _served(started)
            return response

    handle.__name__ = method.name
    return handle


def _delegating_stream_handler(method: MethodDescriptor) -> Callable[..., Iterator[Message]]:
    attribute = snake_case(method.name)

    def handle(
        self: DelegatingProviderServicer, request: Message, context: Any
    ) -> Iterator[Message]:
        with request_fields(method.name, **type_field(method.name, request)):
            started = time.monotonic()
            log.log(TRACE, "Received request")
            implementation = getattr(self.delegate, attribute, None)
            if implementation is None:
                yield _unsupported(method)
                return
            try:
                yield from implementation(request)
            except Exception as exc:
                yield _failed(method, exc)
                return
            _served(started)

    handle.__name__ = method.name
    return handle


class DelegatingProviderServicer:
    """tfplugin6.Provider; every RPC method is generated from the service descriptor below."""

    def __init__(self, delegate: object) -> None:
        self.delegate = delegate


for _method in PROVIDER_SERVICE.methods:
    setattr(DelegatingProviderServicer, _method.name, _delegating_handler(_method))


class UnavailableProvider:
    """Stands in when the provider could not be constructed: every RPC answers why, as a diagnostic."""

    def __init__(self, summary: str, detail: str) -> None:
        self._summary = summary
        self._detail = detail

    def __getattr__(self, name: str) -> Callable[[Message], Message | list[Message]]:
        for method in PROVIDER_SERVICE.methods:
            if snake_case(method.name) == name:
                return functools.partial(self._answer, method)
        raise AttributeError(name)

    def _answer(self, method: MethodDescriptor, _request: Message) -> Message | list[Message]:
        answer = error_response(method, self._summary, self._detail)
        return [answer] if method.server_streaming else answer


class AsyncProviderServicer:
    """tfplugin6.Provider for the HTTP/2 server: each RPC of `DelegatingProviderServicer`, served on
    the event loop when the provider says it never waits (`runs_inline`), else in a worker thread, so a
    slow API call or a long wait in one RPC holds up no other.

    The delegate may come later (`attach`): a warm launch starts its server before the provider is
    built; no RPC can reach it before then."""

    def __init__(self, delegate: object | None, executor: Executor) -> None:
        self.executor = executor
        self.attach(delegate or UnavailableProvider("Provider Not Ready", "The provider is still starting."))

    def attach(self, delegate: object) -> None:
        self.serving = DelegatingProviderServicer(delegate)
        self.runs_inline: Callable[[str, Message], bool] = getattr(
            delegate, "runs_inline", lambda _rpc, _request: False
        )

    def in_worker(self, function: Callable[..., Any], *args: Any) -> Any:
        """`function(*args)` in a worker thread."""
        return asyncio.get_running_loop().run_in_executor(self.executor, function, *args)


def _async_handler(method: MethodDescriptor) -> Callable[..., Any]:
    name = method.name
    if method.server_streaming:

        async def stream(
            self: AsyncProviderServicer, request: Message, context: Any
        ) -> AsyncIterator[Message]:
            messages = getattr(self.serving, name)(request, context)
            # Every step in one context: the generator sets context variables (its log fields) in one
            # step and resets them in another, maybe in another worker thread.
            steps = contextvars.copy_context()
            while (message := await self.in_worker(steps.run, next, messages, None)) is not None:
                yield message

        stream.__name__ = name
        return stream

    async def unary(self: AsyncProviderServicer, request: Message, context: Any) -> Message:
        serve = getattr(self.serving, name)
        if self.runs_inline(name, request):
            return serve(request, context)  # type: ignore[no-any-return]
        response: Message = await self.in_worker(serve, request, context)
        return response

    unary.__name__ = name
    return unary


for _method in PROVIDER_SERVICE.methods:
    setattr(AsyncProviderServicer, _method.name, _async_handler(_method))


async def _until_cancelled() -> None:
    """Hold a stream open until the client ends it (the server then cancels the handler)."""
    await asyncio.get_running_loop().create_future()


class ControllerServicer:
    """plugin.GRPCController: Shutdown asks the process to exit (the caller does it promptly)."""

    def __init__(self, on_shutdown: Callable[[], None]) -> None:
        self._on_shutdown = on_shutdown

    async def Shutdown(
        self, request: grpc_controller_pb2.Empty, context: Any
    ) -> grpc_controller_pb2.Empty:
        log.debug("shutdown requested by the host")
        self._on_shutdown()
        return grpc_controller_pb2.Empty()


class StdioServicer:
    """plugin.GRPCStdio: nothing to forward (logs go straight to stderr); holds the stream open."""

    async def StreamStdio(
        self, request: empty_pb2.Empty, context: Any
    ) -> AsyncIterator[grpc_stdio_pb2.StdioData]:
        await _until_cancelled()
        return
        yield  # an async generator that sends nothing


class BrokerServicer:
    """plugin.GRPCBroker: providers open no side connections; drain the host's stream until it closes."""

    async def StartStream(
        self, request_iterator: AsyncIterator[grpc_broker_pb2.ConnInfo], context: Any
    ) -> AsyncIterator[grpc_broker_pb2.ConnInfo]:
        async for conn_info in request_iterator:
            log.debug("ignoring broker request for service %d", conn_info.service_id)
        return
        yield  # an async generator that sends nothing


class HealthServicer:
    """grpc.health.v1.Health: the plugin is serving as long as the process is up."""

    async def Check(
        self, request: health_pb2.HealthCheckRequest, context: Any
    ) -> health_pb2.HealthCheckResponse:
        if request.service not in ("", HEALTH_SERVICE_NAME):
            await context.abort(NOT_FOUND, f"unknown service {request.service!r}")
        return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)

    async def Watch(
        self, request: health_pb2.HealthCheckRequest, context: Any
    ) -> AsyncIterator[health_pb2.HealthCheckResponse]:
        statuses = health_pb2.HealthCheckResponse
        known = request.service in ("", HEALTH_SERVICE_NAME)
        yield statuses(status=statuses.SERVING if known else statuses.SERVICE_UNKNOWN)
        await _until_cancelled()


def register_services(
    server: GrpcServer, servicer: AsyncProviderServicer, *, on_shutdown: Callable[[], None]
) -> None:
    server.add_service(PROVIDER_SERVICE, servicer)
    server.add_service(grpc_controller_pb2.DESCRIPTOR.services_by_name["GRPCController"],
                       ControllerServicer(on_shutdown))
    server.add_service(grpc_stdio_pb2.DESCRIPTOR.services_by_name["GRPCStdio"], StdioServicer())
    server.add_service(grpc_broker_pb2.DESCRIPTOR.services_by_name["GRPCBroker"], BrokerServicer())
    server.add_service(health_pb2.DESCRIPTOR.services_by_name["Health"], HealthServicer())
