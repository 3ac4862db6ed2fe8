"""gRPC over HTTP/2, served on the plugin's event loop from bytes the TLS relay has decrypted.

Why not grpcio's server: each RPC through it crossed the relay's plaintext socket to grpcio's own
I/O thread and completion-queue thread and back (~0.3 ms of CPU per RPC, 90 % of a provider's work
per resource; docs/plugin-tls.md). Here the relay hands the decrypted bytes of a connection straight
to `GrpcConnection`, which parses HTTP/2 with the `h2` library (framing, HPACK, flow control, settings
and pings are its job) and runs the handler on the same loop.

A service is registered from its protobuf descriptor and a servicer object whose async methods are
named after the RPCs (what grpc.aio would call: `await Method(request, context)` for a unary RPC, an
async generator for a streaming response, an async iterator of requests for a streaming request).
grpcio is not imported at all. What go-plugin's host uses is served: unary, server-streaming and
bidirectional RPCs, status codes with messages, cancellation by RST_STREAM or a closed connection.
Not served, as Terraform never sends them: compressed messages (answered with UNIMPLEMENTED).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, NoReturn

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from google.protobuf.message_factory import GetMessageClass

log = logging.getLogger("gpucloud.plugin.http2")

MAX_MESSAGE_BYTES = 256 * 1024 * 1024  # large states: far above gRPC's customary 4 MiB
# Our receive windows, per stream and for the connection: large enough that a big request never waits
# for a WINDOW_UPDATE round trip (h2 sends those as `acknowledge_received_data` is called).
RECEIVE_WINDOW = 16 * 1024 * 1024
MAX_FRAME_SIZE = 1024 * 1024  # a large state in 64 frames rather than 512

# grpc.StatusCode numbers (grpcio's enum carries them as value[0]).
OK, UNKNOWN, NOT_FOUND, RESOURCE_EXHAUSTED, UNIMPLEMENTED, INTERNAL = 0, 2, 5, 8, 12, 13

_CONFIG = h2.config.H2Configuration(
    client_side=False,
    header_encoding=None,  # header names and values stay bytes
    # Validation and normalisation cost ~30 % of h2's time per request; the peer is Terraform (grpc-go)
    # over an authenticated connection, and a malformed frame is still a protocol error.
    validate_inbound_headers=False,
    normalize_inbound_headers=False,
    validate_outbound_headers=False,
    normalize_outbound_headers=False,
)
_RESPONSE_HEADERS = [(b":status", b"200"), (b"content-type", b"application/grpc")]
_END = object()  # ends a request stream


class Method:
    """One RPC: how to read its request, run it and write its response."""

    def __init__(self, descriptor: MethodDescriptor, behaviour: Callable[..., Any]) -> None:
        self.request_streaming = descriptor.client_streaming
        self.response_streaming = descriptor.server_streaming
        self.request_deserializer = GetMessageClass(descriptor.input_type).FromString
        self.response_serializer = GetMessageClass(descriptor.output_type).SerializeToString
        self.behaviour = behaviour


class GrpcServer:
    """The methods served, by path (`/package.Service/Method`)."""

    def __init__(self) -> None:
        self.methods: dict[bytes, Method] = {}

    def add_service(self, service: ServiceDescriptor, servicer: object) -> None:
        """Serve every RPC of `service` that `servicer` has a method for."""
        for descriptor in service.methods:
            behaviour = getattr(servicer, descriptor.name, None)
            if behaviour is not None:
                path = f"/{service.full_name}/{descriptor.name}".encode()
                self.methods[path] = Method(descriptor, behaviour)


class GrpcConnection:
    """One HTTP/2 connection: bytes in via `data_received`, out via `write`."""

    def __init__(self, server: GrpcServer, write: Callable[[bytes], None], close: Callable[[], None]) -> None:
        self.server = server
        self.write = write
        self.close_transport = close
        self.streams: dict[int, _Stream] = {}
        self.h2 = h2.connection.H2Connection(config=_CONFIG)
        self.h2.encoder = _UnindexedEncoder()  # type: ignore[assignment]
        # Our limits go into the first SETTINGS frame and count from the start: the client may use them
        # as soon as it reads them, before its ACK reaches us (a later `update_settings` would make h2
        # reject, until that ACK, frames the client was already allowed to send).
        codes = h2.settings.SettingCodes
        self.h2.local_settings = h2.settings.Settings(client=False, initial_values={
            codes.INITIAL_WINDOW_SIZE: RECEIVE_WINDOW,
            codes.MAX_FRAME_SIZE: MAX_FRAME_SIZE,
            codes.MAX_CONCURRENT_STREAMS: 1000,
            codes.MAX_HEADER_LIST_SIZE: 64 * 1024,
        })
        self.h2.max_inbound_frame_size = MAX_FRAME_SIZE
        self.h2.initiate_connection()
        self.h2.increment_flow_control_window(RECEIVE_WINDOW - self.h2.inbound_flow_control_window)
        self.closed = False
        self.flush()

    def data_received(self, data: bytes) -> None:
        try:
            events = self.h2.receive_data(data)
        except h2.exceptions.ProtocolError as exc:
            log.warning("HTTP/2 protocol error from the plugin client: %s", exc)
            self.flush()  # the GOAWAY h2 has queued
            self.connection_lost()
            return
        for event in events:
            self._handle(event)
        self.flush()

    def _handle(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.DataReceived):
            self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            stream = self.streams.get(event.stream_id)
            if stream is not None:
                stream.received(event.data)
        elif isinstance(event, h2.events.RequestReceived):
            self._open(event.stream_id, event.headers)
        elif isinstance(event, h2.events.StreamEnded):
            stream = self.streams.get(event.stream_id)
            if stream is not None:
                stream.request_ended()
        elif isinstance(event, h2.events.WindowUpdated):
            if event.stream_id == 0:  # the connection's window: any stream may go on
                for stream in list(self.streams.values()):
                    self.send_pending(stream)
            elif (stream := self.streams.get(event.stream_id)) is not None:
                self.send_pending(stream)
        elif isinstance(event, h2.events.StreamReset):
            stream = self.streams.pop(event.stream_id, None)
            if stream is not None:
                stream.cancel()
        elif isinstance(event, h2.events.RemoteSettingsChanged):
            for stream in list(self.streams.values()):  # a larger initial window may free sends
                self.send_pending(stream)
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.connection_lost()

    def _open(self, stream_id: int, headers: list[tuple[bytes, bytes]]) -> None:
        path = b""
        for name, value in headers:
            if name == b":path":
                path = value
                break
        handler = self.server.methods.get(path)
        stream = _Stream(self, stream_id, handler, path.decode("ascii", "replace"))
        self.streams[stream_id] = stream
        if handler is None:
            stream.finish(UNIMPLEMENTED, f"unknown method {stream.path}")
        elif handler.request_streaming:
            stream.start()

    def send_pending(self, stream: _Stream) -> None:
        """Send what flow control allows of the stream's queued data, then its trailers once all is out."""
        if self.closed:
            return
        while stream.pending:
            size = min(
                len(stream.pending),
                self.h2.local_flow_control_window(stream.stream_id),
                self.h2.max_outbound_frame_size,
            )
            if size <= 0:
                return  # until the client's WINDOW_UPDATE
            self.h2.send_data(stream.stream_id, bytes(stream.pending[:size]))
            del stream.pending[:size]
        if stream.trailers is not None:
            self.h2.send_headers(stream.stream_id, stream.trailers, end_stream=True)
            self.streams.pop(stream.stream_id, None)

    def flush(self) -> None:
        data = self.h2.data_to_send()
        if data and not self.closed:
            self.write(data)

    def connection_lost(self) -> None:
        """The transport is gone (or must go): cancel every RPC still running."""
        if self.closed:
            return
        self.closed = True
        streams, self.streams = self.streams, {}
        for stream in streams.values():
            stream.cancel()
        self.close_transport()


class _Stream:
    """One RPC: its request bytes, the task running its handler, its queued response."""

    def __init__(self, connection: GrpcConnection, stream_id: int, handler: Any, path: str) -> None:
        self.connection = connection
        self.stream_id = stream_id
        self.handler = handler
        self.path = path
        self.buffer = bytearray()
        self.requests: asyncio.Queue[Any] | None = None
        self.task: asyncio.Task[None] | None = None
        self.headers_sent = False
        self.pending = bytearray()
        self.trailers: list[tuple[bytes, bytes]] | None = None
        self.context = _Context()

    # requests
    def received(self, data: bytes) -> None:
        if self.trailers is not None:
            return  # answered already (an error): the rest of the request is of no use
        self.buffer += data
        if len(self.buffer) > MAX_MESSAGE_BYTES + 5:
            self.finish(RESOURCE_EXHAUSTED, f"request larger than {MAX_MESSAGE_BYTES} bytes")
            self.connection.flush()
        elif self.requests is not None:
            while (message := self._next_message()) is not None:
                self.requests.put_nowait(message)

    def request_ended(self) -> None:
        if self.trailers is not None:
            return
        if self.requests is not None:
            self.requests.put_nowait(_END)
            return
        message = self._next_message()
        if message is None or self.buffer:
            self.finish(INTERNAL, "expected exactly one request message")
            return
        self.start(message)

    def _next_message(self) -> bytes | None:
        """One complete length-prefixed message taken from the buffer, if there is one."""
        if len(self.buffer) < 5:
            return None
        size = int.from_bytes(self.buffer[1:5], "big")
        if len(self.buffer) < 5 + size:
            return None
        if self.buffer[0]:
            self.finish(UNIMPLEMENTED, "compressed messages are not supported")
            return None
        message = bytes(self.buffer[5:5 + size])
        del self.buffer[:5 + size]
        return message

    # running the handler
    def start(self, message: bytes | None = None) -> None:
        if self.handler.request_streaming:
            self.requests = asyncio.Queue()
        self.task = asyncio.get_running_loop().create_task(self._run(message))

    async def _run(self, message: bytes | None) -> None:
        handler = self.handler
        try:
            if handler.request_streaming:
                request: Any = self._request_stream()
            else:
                request = handler.request_deserializer(message)
            if handler.response_streaming:
                async for response in handler.behaviour(request, self.context):
                    self.send_message(response)
                    self.connection.flush()
            else:
                self.send_message(await handler.behaviour(request, self.context))
            self.finish(OK)
        except _Abort as abort:
            self.finish(abort.code, abort.details)
        except asyncio.CancelledError:
            return  # the client reset the stream or went away: nobody to answer
        except Exception as exc:
            log.error("%s failed", self.path, exc_info=True)
            self.finish(UNKNOWN, f"{type(exc).__name__}: {exc}")
        self.connection.flush()

    async def _request_stream(self) -> AsyncIterator[Any]:
        assert self.requests is not None
        while (message := await self.requests.get()) is not _END:
            yield self.handler.request_deserializer(message)

    def cancel(self) -> None:
        if self.task is not None:
            self.task.cancel()

    # responses
    def send_message(self, message: Any) -> None:
        if self.connection.closed:
            return
        payload = self.handler.response_serializer(message)
        if not self.headers_sent:
            self.connection.h2.send_headers(self.stream_id, _RESPONSE_HEADERS)
            self.headers_sent = True
        self.pending += b"\0" + len(payload).to_bytes(4, "big")
        self.pending += payload
        self.connection.send_pending(self)

    def finish(self, code: int, details: str = "") -> None:
        if self.trailers is not None or self.connection.closed:
            return
        trailers = [(b"grpc-status", str(code).encode())]
        if details:
            trailers.append((b"grpc-message", _percent_encoded(details)))
        if not self.headers_sent:  # "Trailers-Only": one HEADERS frame ends the stream
            self.headers_sent = True
            trailers = _RESPONSE_HEADERS + trailers
        self.trailers = trailers
        self.connection.send_pending(self)


class _UnindexedEncoder:
    """HPACK for our responses without the dynamic table: the same headers are then the same bytes every
    time, so a block is encoded once and reused instead of re-encoded by h2's stateful encoder, twice per
    RPC (5 % of a small RPC's server time, measured in-process). The client's decoder is not affected:
    nothing is ever added to its table."""

    header_table_size = 4096  # h2 sets the client's HEADER_TABLE_SIZE here; no table is used

    def __init__(self) -> None:
        self._blocks: dict[tuple[tuple[bytes, bytes], ...], bytes] = {}

    def encode(self, headers: list[tuple[bytes, bytes]]) -> bytes:
        key = tuple(headers)
        block = self._blocks.get(key)
        if block is None:
            block = b"".join(_literal(name, value) for name, value in key)
            if len(self._blocks) < 64:  # the constant blocks; error messages vary
                self._blocks[key] = block
        return block


def _literal(name: bytes, value: bytes) -> bytes:
    """RFC 7541 6.2.2: literal header field without indexing, new name, no Huffman coding."""
    return b"\0" + _length(name) + name + _length(value) + value


def _length(data: bytes) -> bytes:
    """A string length: 7-bit prefix integer (RFC 7541 5.1), Huffman bit clear."""
    size = len(data)
    if size < 127:
        return bytes([size])
    encoded = bytearray([127])
    size -= 127
    while size >= 128:
        encoded.append(size % 128 + 128)
        size //= 128
    encoded.append(size)
    return bytes(encoded)


def _percent_encoded(text: str) -> bytes:
    """grpc-message: printable ASCII but `%` as is, every other byte of the UTF-8 as %XX."""
    return b"".join(
        bytes([byte]) if 0x20 <= byte <= 0x7E and byte != 0x25 else b"%%%02X" % byte
        for byte in text.encode("utf-8")
    )


class _Abort(Exception):
    def __init__(self, code: int, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


class _Context:
    """What our handlers use of grpc.aio's ServicerContext: `abort`. (grpc-timeout is not enforced:
    Terraform sets none on plugin RPCs.)"""

    async def abort(self, code: Any, details: str = "") -> NoReturn:
        raise _Abort(code.value[0] if hasattr(code, "value") else int(code), details)
