"""The plugin's gRPC server (provider.plugin.http2) spoken to by a raw `h2` client, frame by frame, for
what grpcio's client never does: sending past what the server takes, length prefixes over the limit,
streams beyond the limit, oversized header lists, GOAWAY with RPCs in flight, a handler that ignores
its cancellation, requests that are not gRPC, and a plaintext client gone before it is served.

Most run in one event loop without sockets (`Peer` moves the bytes), so nothing depends on timing;
what a client may send is read off its flow-control windows, not off the process's memory."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import grpc
import h2.config
import h2.connection
import h2.events
import pytest
from h2.errors import ErrorCodes
from h2.frame_buffer import FrameBuffer
from hyperframe.frame import DataFrame, Frame, GoAwayFrame, HeadersFrame

from provider._proto import grpc_broker_pb2, health_pb2, health_pb2_grpc, tfplugin6_pb2
from provider.plugin.http2 import (
    MAX_CONCURRENT_STREAMS,
    MAX_HEADER_LIST_BYTES,
    MAX_MESSAGE_BYTES,
    RECEIVE_WINDOW,
    GrpcConnection,
    GrpcServer,
    _literal,
)
from provider.plugin.tls_terminator import TlsTerminator

CHECK = b"/grpc.health.v1.Health/Check"
READ = b"/tfplugin6.Provider/ReadResource"
BROKER = b"/plugin.GRPCBroker/StartStream"


class Health:
    """Check answers at once, or waits for `gate` (service "slow"), or ignores its cancellation and
    answers anyway once the gate opens or it is cancelled (service "stubborn")."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.waiting = 0

    async def Check(self, request: health_pb2.HealthCheckRequest, context: Any) -> Any:
        if request.service in ("slow", "stubborn"):
            self.waiting += 1
            try:
                await self.gate.wait()
            except asyncio.CancelledError:
                if request.service == "slow":
                    raise
        return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)


class Broker:
    """Takes no request message before `gate` opens; then answers each with its size."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()

    async def StartStream(
        self, requests: AsyncIterator[grpc_broker_pb2.ConnInfo], context: Any
    ) -> AsyncIterator[grpc_broker_pb2.ConnInfo]:
        await self.gate.wait()
        async for info in requests:
            yield grpc_broker_pb2.ConnInfo(service_id=len(info.address))


class Provider:
    async def ReadResource(self, request: tfplugin6_pb2.ReadResource.Request, context: Any) -> Any:
        return tfplugin6_pb2.ReadResource.Response(new_state=request.current_state)


def make_server() -> tuple[GrpcServer, Health, Broker]:
    health, broker = Health(), Broker()
    server = GrpcServer()
    server.add_service(health_pb2.DESCRIPTOR.services_by_name["Health"], health)
    server.add_service(grpc_broker_pb2.DESCRIPTOR.services_by_name["GRPCBroker"], broker)
    server.add_service(tfplugin6_pb2.DESCRIPTOR.services_by_name["Provider"], Provider())
    return server, health, broker


class _UnlimitedClient(h2.connection.H2Connection):
    """A client that opens streams past the server's SETTINGS_MAX_CONCURRENT_STREAMS (h2 would refuse)."""

    @property
    def open_outbound_streams(self) -> int:
        return 0


class _LiteralEncoder:
    """HPACK literals without Huffman coding: a header list of megabytes encoded at once."""

    header_table_size = 4096

    def encode(self, headers: list[tuple[bytes, bytes]]) -> bytes:
        return b"".join(_literal(name, value) for name, value in headers)


class Peer:
    """A raw h2 client and a `GrpcConnection` wired together in this event loop: `pump` moves the bytes
    both ways; `settle` lets the handlers run until nothing moves any more."""

    def __init__(
        self, server: GrpcServer, client: type[h2.connection.H2Connection] = h2.connection.H2Connection
    ) -> None:
        config = h2.config.H2Configuration(
            client_side=True, header_encoding=None, validate_outbound_headers=False
        )
        self.client = client(config=config)
        self.client.initiate_connection()
        self.to_client = bytearray()
        self.transport_closed = False
        self.server = GrpcConnection(server, self.to_client.extend, self._close)
        self.events: list[h2.events.Event] = []
        self.sent_by_server: list[Frame] = []  # every frame, as the server wrote it
        self._frames = FrameBuffer(server=False)
        self._frames.max_frame_size = 1 << 24
        self.pump()

    def _close(self) -> None:
        self.transport_closed = True

    def pump(self) -> int:
        """Move bytes both ways until neither side has more; returns how many moved."""
        moved = 0
        while True:
            out = self.client.data_to_send()
            if out:
                moved += len(out)
                self.server.data_received(out)
            if not self.to_client:
                if not out:
                    return moved
                continue
            data, self.to_client[:] = bytes(self.to_client), b""
            moved += len(data)
            self._frames.add_data(data)
            self.sent_by_server += list(self._frames)
            events = self.client.receive_data(data)
            for event in events:
                if isinstance(event, h2.events.DataReceived) and event.flow_controlled_length:
                    self.client.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            self.events += events

    async def settle(self) -> None:
        """Run the loop and pump until ten rounds in a row move nothing."""
        quiet = 0
        while quiet < 10:
            await asyncio.sleep(0)
            quiet = 0 if self.pump() else quiet + 1

    def request(self, path: bytes, *messages: bytes, end: bool = True,
                headers: list[tuple[bytes, bytes]] | None = None) -> int:
        """Open a stream with gRPC's request headers (or `headers`) and send `messages`, each framed."""
        stream_id = self.client.get_next_available_stream_id()
        self.client.send_headers(stream_id, headers or request_headers(path), end_stream=end and not messages)
        for index, message in enumerate(messages):
            self.client.send_data(stream_id, framed(message), end_stream=end and index == len(messages) - 1)
        self.pump()
        return stream_id

    def outcome(self, stream_id: int) -> Outcome:
        return Outcome(stream_id, self.events)


class Outcome:
    """What the client saw of one stream: response headers and trailers, messages, reset, end."""

    def __init__(self, stream_id: int, events: list[h2.events.Event]) -> None:
        self.headers: dict[bytes, bytes] = {}
        data = bytearray()
        self.reset: int | None = None
        self.ended = False
        for event in events:
            if getattr(event, "stream_id", None) != stream_id:
                continue
            if isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                self.headers.update(dict(event.headers))
            elif isinstance(event, h2.events.DataReceived):
                data += event.data
            elif isinstance(event, h2.events.StreamReset):
                self.reset = event.error_code
            elif isinstance(event, h2.events.StreamEnded):
                self.ended = True
        self.messages = []
        while data:
            size = int.from_bytes(data[1:5], "big")
            self.messages.append(bytes(data[5:5 + size]))
            del data[:5 + size]

    @property
    def status(self) -> int | None:
        value = self.headers.get(b"grpc-status")
        return None if value is None else int(value)


def request_headers(path: bytes, method: bytes = b"POST", content_type: bytes = b"application/grpc",
                    extra: list[tuple[bytes, bytes]] | None = None) -> list[tuple[bytes, bytes]]:
    return [(b":method", method), (b":scheme", b"http"), (b":path", path), (b":authority", b"localhost"),
            (b"content-type", content_type), (b"te", b"trailers"), *(extra or [])]


def framed(message: bytes) -> bytes:
    return b"\0" + len(message).to_bytes(4, "big") + message


def check(service: str = "") -> bytes:
    return health_pb2.HealthCheckRequest(service=service).SerializeToString()


def run(test: Callable[[], Any]) -> Any:
    return asyncio.run(test())


@pytest.fixture(autouse=True)
def no_errors_logged(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Nothing these clients do is an error of the server's: none may be logged (ours or asyncio's)."""
    with caplog.at_level(logging.ERROR):
        yield
    assert [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR] == []


def test_a_client_that_never_finishes_can_make_us_hold_no_more_than_the_window() -> None:
    # 4 request streams whose handler takes nothing: the client sends 64 KiB messages as long as its
    # windows let it, never ending a stream, aiming at 24 MiB a stream. With every DATA frame acknowledged
    # on receipt (the server before) it sent all 96 MiB; now the server stops granting window once it
    # holds the connection's window of unread bytes (and one message per stream, taken for its handler).
    async def test() -> None:
        server, _, broker = make_server()
        peer = Peer(server)
        streams = [peer.request(BROKER, end=False) for _ in range(4)]
        message = framed(grpc_broker_pb2.ConnInfo(address="x" * (64 << 10)).SerializeToString())
        sent = dict.fromkeys(streams, 0)
        while True:
            progress = False
            for stream_id in streams:
                window = peer.client.local_flow_control_window
                while sent[stream_id] < 24 << 20 and window(stream_id) >= len(message):
                    peer.client.send_data(stream_id, message)
                    sent[stream_id] += len(message)
                    progress = True
                peer.pump()
            await peer.settle()
            if not progress:
                break
        total = sum(sent.values())
        assert total <= RECEIVE_WINDOW + 4 * len(message)
        assert peer.client.outbound_flow_control_window < len(message)  # the server stopped granting
        assert sum(len(stream.buffer) for stream in peer.server.streams.values()) <= RECEIVE_WINDOW

        # The handlers take their messages: every one arrives, and the windows open again.
        broker.gate.set()
        await peer.settle()
        assert peer.client.outbound_flow_control_window >= RECEIVE_WINDOW // 2
        for stream_id in streams:
            peer.client.end_stream(stream_id)
        await peer.settle()
        for stream_id in streams:
            outcome = peer.outcome(stream_id)
            assert outcome.status == 0
            assert len(outcome.messages) == sent[stream_id] // len(message)

    run(test)


def test_a_length_prefix_over_the_limit_is_refused_before_its_message_arrives() -> None:
    async def test() -> None:
        server, _, _ = make_server()
        peer = Peer(server)
        stream_id = peer.client.get_next_available_stream_id()
        peer.client.send_headers(stream_id, request_headers(READ))
        peer.client.send_data(stream_id, b"\0" + (MAX_MESSAGE_BYTES + 1).to_bytes(4, "big") + b"state")
        peer.pump()
        refused = peer.outcome(stream_id)  # at once: nothing more of the message was needed
        assert refused.status == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
        assert b"larger than max" in refused.headers[b"grpc-message"]
        assert refused.reset == ErrorCodes.NO_ERROR  # the rest of the request is not wanted

        # Messages being received on one connection reserve their size: past a largest message and a
        # window, another is refused; the reservation goes with its stream.
        big = b"\0" + (200 << 20).to_bytes(4, "big") + b"start of a state"
        first = peer.request(READ, end=False)
        peer.client.send_data(first, big)
        second = peer.request(READ, end=False)
        peer.client.send_data(second, big)
        peer.pump()
        assert peer.outcome(first).status is None  # still receiving
        assert peer.outcome(second).status == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
        peer.client.reset_stream(first, ErrorCodes.CANCEL)
        third = peer.request(READ, end=False)
        peer.client.send_data(third, big)
        peer.pump()
        assert peer.outcome(third).status is None
        assert peer.server.pending_message_bytes == 200 << 20

        state = tfplugin6_pb2.ReadResource.Request(current_state=tfplugin6_pb2.DynamicValue(msgpack=b"s"))
        fine = peer.request(READ, state.SerializeToString())
        await peer.settle()
        assert peer.outcome(fine).status == 0

    run(test)


def test_a_request_split_at_every_byte_and_messages_sharing_frames_arrive_whole() -> None:
    async def test() -> None:
        server, _, broker = make_server()
        broker.gate.set()
        peer = Peer(server)
        state = os.urandom(3000)
        request = tfplugin6_pb2.ReadResource.Request(current_state=tfplugin6_pb2.DynamicValue(msgpack=state))
        stream_id = peer.request(READ, end=False)
        for byte in framed(request.SerializeToString()):
            peer.client.send_data(stream_id, bytes([byte]))
            peer.pump()
        peer.client.end_stream(stream_id)
        await peer.settle()
        (answer,) = peer.outcome(stream_id).messages
        assert tfplugin6_pb2.ReadResource.Response.FromString(answer).new_state.msgpack == state

        sizes = [0, 1, 70000, 5, 200000, 3]
        infos = [grpc_broker_pb2.ConnInfo(address="a" * n) for n in sizes]
        messages = b"".join(framed(info.SerializeToString()) for info in infos)
        stream_id = peer.request(BROKER, end=False)
        for start in range(0, len(messages), 100003):  # frames cutting messages and prefixes anywhere
            peer.client.send_data(stream_id, messages[start:start + 100003])
            peer.pump()
        peer.client.end_stream(stream_id)
        await peer.settle()
        outcome = peer.outcome(stream_id)
        assert outcome.status == 0
        assert [grpc_broker_pb2.ConnInfo.FromString(m).service_id for m in outcome.messages] == sizes

    run(test)


def test_a_second_message_on_a_unary_rpc_is_refused_without_keeping_it() -> None:
    async def test() -> None:
        server, _, _ = make_server()
        peer = Peer(server)
        stream_id = peer.request(CHECK, check(), check(), end=False)
        outcome = peer.outcome(stream_id)
        assert outcome.status == grpc.StatusCode.INTERNAL.value[0]
        assert outcome.headers[b"grpc-message"] == b"expected exactly one request message"
        assert outcome.reset == ErrorCodes.NO_ERROR
        assert peer.server.streams == {}

    run(test)


def test_a_stream_beyond_the_concurrency_limit_is_refused_alone() -> None:
    # The server advertises MAX_CONCURRENT_STREAMS; a client that opens one more gets REFUSED_STREAM for
    # it (before: GOAWAY, and every RPC in flight was dropped) and the others complete.
    async def test() -> None:
        server, health, _ = make_server()
        peer = Peer(server, client=_UnlimitedClient)
        assert peer.client.remote_settings.max_concurrent_streams == MAX_CONCURRENT_STREAMS
        in_flight = [peer.request(CHECK, check("slow")) for _ in range(MAX_CONCURRENT_STREAMS)]
        await peer.settle()
        assert health.waiting == MAX_CONCURRENT_STREAMS
        extra = peer.request(CHECK, check())
        assert peer.outcome(extra).reset == ErrorCodes.REFUSED_STREAM
        health.gate.set()
        await peer.settle()
        assert all(peer.outcome(stream_id).status == 0 for stream_id in in_flight)
        assert not peer.transport_closed
        again = peer.request(CHECK, check())
        await peer.settle()
        assert peer.outcome(again).status == 0

    run(test)


def test_a_header_list_over_the_limit_resets_its_stream_alone() -> None:
    # Before: a header list over the advertised limit (then 64 KiB) was a connection error (GOAWAY).
    async def test() -> None:
        server, health, _ = make_server()
        peer = Peer(server)
        peer.client.encoder = _LiteralEncoder()  # type: ignore[assignment]
        in_flight = peer.request(CHECK, check("slow"))
        await peer.settle()
        large_headers = request_headers(CHECK, extra=[(b"x-large", b"l" * 102400)])  # the 100 KiB
        large = peer.request(CHECK, check(), headers=large_headers)
        huge_headers = request_headers(CHECK, extra=[(b"x-huge", b"h" * MAX_HEADER_LIST_BYTES)])
        huge = peer.request(CHECK, check(), headers=huge_headers)
        await peer.settle()
        assert peer.outcome(large).status == 0  # 100 KiB: within the limit
        assert peer.outcome(huge).reset == ErrorCodes.FRAME_SIZE_ERROR  # what grpc-go answers
        assert peer.outcome(huge).status is None
        health.gate.set()
        await peer.settle()
        assert peer.outcome(in_flight).status == 0
        after = peer.request(CHECK, check())  # HPACK's state went on in step
        await peer.settle()
        assert peer.outcome(after).status == 0 and not peer.transport_closed
        assert peer.client.remote_settings.max_header_list_size == MAX_HEADER_LIST_BYTES  # grpc-go's 16 MiB

    run(test)


def test_a_graceful_goaway_lets_the_rpcs_in_flight_finish() -> None:
    async def test() -> None:
        server, health, _ = make_server()
        peer = Peer(server)
        in_flight = peer.request(CHECK, check("slow"))
        await peer.settle()
        goaway = GoAwayFrame(0)
        goaway.last_stream_id, goaway.error_code = 0, ErrorCodes.NO_ERROR
        peer.server.data_received(goaway.serialize())  # the client's h2 could not read the answer after it
        late = peer.request(CHECK, check())
        assert peer.outcome(late).reset == ErrorCodes.REFUSED_STREAM  # no new streams once it said goodbye
        health.gate.set()
        await peer.settle()
        finished = peer.outcome(in_flight)
        assert finished.status == 0 and len(finished.messages) == 1
        assert not peer.transport_closed  # the client closes it

        # A GOAWAY with an error still ends the connection and what runs on it.
        health.gate.clear()
        peer = Peer(server)
        in_flight = peer.request(CHECK, check("slow"))
        await peer.settle()
        goaway.error_code = ErrorCodes.INTERNAL_ERROR
        peer.server.data_received(goaway.serialize())
        await peer.settle()
        assert peer.transport_closed and peer.server.streams == {}

    run(test)


def test_a_handler_that_returns_after_its_stream_was_reset_sends_nothing() -> None:
    # Before: the answer went to h2 for a closed stream, whose StreamClosedError was logged as the RPC's
    # failure and then escaped the handler's task.
    async def test() -> list[asyncio.Task[Any]]:
        server, health, _ = make_server()
        peer = Peer(server)
        stream_id = peer.request(CHECK, check("stubborn"))
        await peer.settle()
        tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        assert health.waiting == 1 and len(tasks) == 1
        peer.client.reset_stream(stream_id, ErrorCodes.CANCEL)
        peer.pump()
        frames_before = len(peer.sent_by_server)
        await peer.settle()  # the handler returns its answer regardless
        assert tasks[0].done()
        late = [frame for frame in peer.sent_by_server[frames_before:] if frame.stream_id == stream_id]
        assert not [frame for frame in late if isinstance(frame, (HeadersFrame, DataFrame))]
        other = peer.request(CHECK, check())
        await peer.settle()
        assert peer.outcome(other).status == 0
        return tasks

    (task,) = run(test)
    assert not task.cancelled() and task.exception() is None  # and nothing logged (no_errors_logged)


@pytest.mark.parametrize(
    ("headers", "http_status", "grpc_status", "message"),
    [
        (request_headers(CHECK, method=b"GET"), b"405", grpc.StatusCode.INTERNAL,
         b'Received a HEADERS frame with :method "GET" which should be POST'),
        (request_headers(CHECK, content_type=b"application/json"), b"415", grpc.StatusCode.INVALID_ARGUMENT,
         b'invalid gRPC request content-type "application/json"'),
        ([header for header in request_headers(CHECK) if header[0] != b"content-type"], b"415",
         grpc.StatusCode.INVALID_ARGUMENT, b'invalid gRPC request content-type ""'),
    ],
)
def test_requests_that_are_not_grpc_are_answered_as_grpc_go_answers_them(
    headers: list[tuple[bytes, bytes]], http_status: bytes, grpc_status: grpc.StatusCode, message: bytes
) -> None:
    async def test() -> None:
        server, _, _ = make_server()
        peer = Peer(server)
        stream_id = peer.request(CHECK, check(), end=False, headers=headers)
        await peer.settle()
        outcome = peer.outcome(stream_id)
        assert outcome.headers[b":status"] == http_status
        assert outcome.status == grpc_status.value[0]
        assert outcome.headers[b"grpc-message"] == message
        assert outcome.messages == [] and outcome.reset == ErrorCodes.NO_ERROR
        for content_type in (b"application/grpc+proto", b"application/grpc; charset=utf-8"):
            served = peer.request(CHECK, check(), headers=request_headers(CHECK, content_type=content_type))
            await peer.settle()
            assert peer.outcome(served).status == 0

    run(test)


def test_a_plaintext_client_gone_before_it_is_accepted_does_not_break_accepting() -> None:
    # Debug mode serves plaintext: a connection is served as soon as it is accepted, and our SETTINGS go
    # out at once. To a client already gone that send fails and closes the socket; before, that happened
    # before its reader was registered, and the ValueError escaped `_accept` (an error on the loop).
    server, _, _ = make_server()
    with tempfile.TemporaryDirectory(prefix="h2-") as directory:
        path = os.path.join(directory, "plugin.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(64)
        terminator = TlsTerminator(listener, None)
        failures: list[dict[str, Any]] = []
        terminator.loop.set_exception_handler(lambda loop, context: failures.append(context))
        terminator.start()
        terminator.serve(server)
        for _ in range(3):
            held, release = threading.Event(), threading.Event()
            terminator.loop.call_soon_threadsafe(_hold, held, release)
            assert held.wait(10)
            for _ in range(20):  # connected and gone before the loop accepts them
                client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                client.connect(path)
                client.close()
            release.set()
            with grpc.insecure_channel("unix:" + path) as channel:
                check_health = health_pb2_grpc.HealthStub(channel).Check
                response = check_health(health_pb2.HealthCheckRequest(), timeout=10)
                assert response.status == health_pb2.HealthCheckResponse.SERVING
        assert failures == []


def _hold(held: threading.Event, release: threading.Event) -> None:
    """Keep the event loop busy (nothing accepted) until `release`."""
    held.set()
    release.wait(10)
