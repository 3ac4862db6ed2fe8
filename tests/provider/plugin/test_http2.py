"""The plugin's gRPC server over HTTP/2 (provider.plugin.http2), spoken to by grpcio's client: statuses,
streams both ways, cancellation, flow control for messages far larger than a window (one, and several
at once), refusals. What grpcio's client never sends is in test_http2_raw.py."""

from __future__ import annotations

import asyncio
import os
import socket
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest

from provider._proto import (
    grpc_broker_pb2,
    grpc_broker_pb2_grpc,
    health_pb2,
    health_pb2_grpc,
    tfplugin6_pb2,
    tfplugin6_pb2_grpc,
)
from provider.plugin.http2 import NOT_FOUND, GrpcServer
from provider.plugin.tls_terminator import TlsTerminator

LIMITS = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]


class Health:
    def __init__(self) -> None:
        self.cancelled = threading.Event()

    async def Check(self, request: health_pb2.HealthCheckRequest, context: Any) -> Any:
        if request.service == "abort":
            await context.abort(NOT_FOUND, "no service 'ü' (100% sure)")
        if request.service == "boom":
            raise RuntimeError("boom")
        if request.service == "slow":
            try:
                await asyncio.sleep(30)
            finally:
                self.cancelled.set()
        return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)

    async def Watch(
        self, request: health_pb2.HealthCheckRequest, context: Any
    ) -> AsyncIterator[health_pb2.HealthCheckResponse]:
        for status in (1, 2, 3):
            yield health_pb2.HealthCheckResponse(status=status)  # type: ignore[arg-type]


class Broker:
    async def StartStream(
        self, requests: AsyncIterator[grpc_broker_pb2.ConnInfo], context: Any
    ) -> AsyncIterator[grpc_broker_pb2.ConnInfo]:
        async for info in requests:
            yield grpc_broker_pb2.ConnInfo(service_id=info.service_id * 10)


class Provider:
    async def ReadResource(self, request: tfplugin6_pb2.ReadResource.Request, context: Any) -> Any:
        return tfplugin6_pb2.ReadResource.Response(new_state=request.current_state)


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, Health]]:
    health = Health()
    server = GrpcServer()
    server.add_service(health_pb2.DESCRIPTOR.services_by_name["Health"], health)
    server.add_service(grpc_broker_pb2.DESCRIPTOR.services_by_name["GRPCBroker"], Broker())
    server.add_service(tfplugin6_pb2.DESCRIPTOR.services_by_name["Provider"], Provider())
    with tempfile.TemporaryDirectory(prefix="h2-") as directory:
        path = os.path.join(directory, "plugin.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(8)
        terminator = TlsTerminator(listener, None)
        terminator.start()
        terminator.serve(server)
        yield "unix:" + path, health


def test_unary_answers_and_errors_carry_status_and_message(served: tuple[str, Health]) -> None:
    target, _ = served
    with grpc.insecure_channel(target) as channel:
        check = health_pb2_grpc.HealthStub(channel).Check
        assert check(health_pb2.HealthCheckRequest(service="plugin"), timeout=10).status == 1
        with pytest.raises(grpc.RpcError) as aborted:
            check(health_pb2.HealthCheckRequest(service="abort"), timeout=10)
        assert aborted.value.code() == grpc.StatusCode.NOT_FOUND
        assert aborted.value.details() == "no service 'ü' (100% sure)"  # percent-encoded on the wire
        with pytest.raises(grpc.RpcError) as failed:
            check(health_pb2.HealthCheckRequest(service="boom"), timeout=10)
        assert failed.value.code() == grpc.StatusCode.UNKNOWN and "boom" in (failed.value.details() or "")


def test_streams_in_both_directions(served: tuple[str, Health]) -> None:
    target, _ = served
    with grpc.insecure_channel(target) as channel:
        watched = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(), timeout=10)
        assert [response.status for response in watched] == [1, 2, 3]
        requests = (grpc_broker_pb2.ConnInfo(service_id=n) for n in range(1, 6))
        echoed = grpc_broker_pb2_grpc.GRPCBrokerStub(channel).StartStream(requests, timeout=10)
        assert [info.service_id for info in echoed] == [10, 20, 30, 40, 50]


def test_messages_far_larger_than_any_flow_control_window(served: tuple[str, Health]) -> None:
    target, _ = served
    state = os.urandom(24 << 20)  # beyond our 16 MiB receive window and grpcio's own windows
    options = [*LIMITS, ("grpc.http2.bdp_probe", 0)]  # grpcio then keeps its 64 KiB window: we must wait
    with grpc.insecure_channel(target, options=options) as channel:
        read = tfplugin6_pb2_grpc.ProviderStub(channel).ReadResource
        request = tfplugin6_pb2.ReadResource.Request(current_state=tfplugin6_pb2.DynamicValue(msgpack=state))
        assert read(request, timeout=60).new_state.msgpack == state


def test_several_messages_larger_than_the_window_at_once(served: tuple[str, Health]) -> None:
    # A message's bytes are acknowledged as they arrive (its length prefix checked first): were they
    # acknowledged only once the whole message was there, two of them sharing the connection's window
    # would each wait for the other.
    target, _ = served
    states = [os.urandom(20 << 20) for _ in range(3)]
    with grpc.insecure_channel(target, options=LIMITS) as channel:
        read = tfplugin6_pb2_grpc.ProviderStub(channel).ReadResource
        calls = [
            read.future(tfplugin6_pb2.ReadResource.Request(current_state=tfplugin6_pb2.DynamicValue(msgpack=state)),
                        timeout=60)
            for state in states
        ]
        assert [call.result().new_state.msgpack for call in calls] == states


def test_client_cancellation_cancels_the_handler(served: tuple[str, Health]) -> None:
    target, health = served
    health.cancelled.clear()
    with grpc.insecure_channel(target) as channel:
        with pytest.raises(grpc.RpcError) as timed_out:
            health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service="slow"), timeout=0.5
            )
        assert timed_out.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert health.cancelled.wait(10)  # RST_STREAM reached the handler as a cancellation


def test_unknown_methods_and_compressed_messages_are_refused(served: tuple[str, Health]) -> None:
    target, _ = served
    with grpc.insecure_channel(target) as channel:
        unknown = channel.unary_unary("/nowhere.Service/Nothing")
        with pytest.raises(grpc.RpcError) as refused:
            unknown(b"", timeout=10)
        assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED
    with grpc.insecure_channel(target, compression=grpc.Compression.Gzip) as channel:
        with pytest.raises(grpc.RpcError) as compressed:
            health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service="x" * 100), timeout=10
            )
        assert compressed.value.code() == grpc.StatusCode.UNIMPLEMENTED
