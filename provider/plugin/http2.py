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

What a client can make us hold, and what fails one stream rather than the connection:

- Inbound bytes are acknowledged (the client's flow-control windows reopened) only as they are taken:
  a length prefix once read and checked, a message's bytes as they join the message the prefix
  announced, and a request stream's next message only once the handler has taken the one before.
  Whatever is not taken waits unacknowledged, so a client has at most the connection's window
  (RECEIVE_WINDOW) of unread bytes here, across all its streams, however long it goes on sending.
- A length prefix over MAX_MESSAGE_BYTES is answered RESOURCE_EXHAUSTED as soon as it arrives (as
  grpc-go answers it), before any of its message is kept; so is one that would take the messages
  being received on the connection past MAX_PENDING_MESSAGE_BYTES (one largest message and a window).
- Stream-level limits are stream errors: a stream beyond MAX_CONCURRENT_STREAMS is refused
  (REFUSED_STREAM), a header list over MAX_HEADER_LIST_BYTES reset (FRAME_SIZE_ERROR, grpc-go's
  code), and a request that is not a gRPC call answered as grpc-go answers it (405 for a method other
  than POST, 415 for another content-type); the RPCs in flight go on. h2 makes the first two
  connection errors (GOAWAY), so `_H2Connection` leaves the counting of streams to `_open`, and HPACK
  decodes header lists up to twice our limit so that `_open` can measure them.
- A client's GOAWAY(NO_ERROR) lets the RPCs in flight finish (RFC 9113 6.8); h2 would close the
  connection at once. New streams are then refused, and the client closes the connection.
- A stream the client has reset is never written to again, even if its handler ignores the
  cancellation and returns an answer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from itertools import chain
from typing import Any, NoReturn

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from google.protobuf.message_factory import GetMessageClass
from h2.errors import ErrorCodes
from hyperframe.frame import Frame, GoAwayFrame

log = logging.getLogger("gpucloud.plugin.http2")

MAX_MESSAGE_BYTES = 256 * 1024 * 1024  # large states: far above gRPC's customary 4 MiB; Terraform's own limit
# Our receive windows, per stream and for the connection: large enough that a big request never waits
# for a WINDOW_UPDATE round trip (h2 sends those as `acknowledge_received_data` is called). The
# connection's window is what bounds the unread bytes a client can leave with us.
RECEIVE_WINDOW = 16 * 1024 * 1024
MAX_FRAME_SIZE = 1024 * 1024  # a large state in 64 frames rather than 512
# Bytes of request messages being received on one connection (from their length prefix until the
# handler takes them): a message that would go past it is refused with RESOURCE_EXHAUSTED. One largest
# message and a window's worth of others; Terraform's are KiBs, a large state tens of MiBs.
MAX_PENDING_MESSAGE_BYTES = MAX_MESSAGE_BYTES + RECEIVE_WINDOW
# Far more than Terraform's parallelism (10 by default) ever opens: a well-behaved client (grpc-go)
# queues its RPCs beyond it; one that does not gets REFUSED_STREAM for the extra streams only.
MAX_CONCURRENT_STREAMS = 1000
MAX_HEADER_LIST_BYTES = 16 * 1024 * 1024  # grpc-go's default; Terraform's headers are ~200 bytes
# HPACK decodes a header list whole, even one over our limit, so that its table stays in step with the
# client's and `_open` can refuse that stream alone; a list past twice the limit is a connection error.
_DECODED_HEADER_LIST_LIMIT = 2 * MAX_HEADER_LIST_BYTES

# grpc.StatusCode numbers (grpcio's enum carries them as value[0]).
OK, UNKNOWN, INVALID_ARGUMENT, NOT_FOUND, RESOURCE_EXHAUSTED, UNIMPLEMENTED, INTERNAL = 0, 2, 3, 5, 8, 12, 13



class _Configuration(h2.config.H2Configuration):
    """h2's options as plain attributes: h2 reads them through validating descriptors, a Python call each
    (~15 per RPC); here they are set once and read from the instance."""

    client_side = False
    header_encoding = None
    validate_outbound_headers = normalize_outbound_headers = split_outbound_cookies = False
    validate_inbound_headers = normalize_inbound_headers = False


_CONFIG = _Configuration(
    client_side=False,
    header_encoding=None,  # header names and values stay bytes
    # Validation and normalisation cost ~30 % of h2's time per request; the peer is Terraform (grpc-go)
    # over an authenticated connection, and a malformed frame is still a protocol error.
    validate_inbound_headers=False,
    normalize_inbound_headers=False,
    validate_outbound_headers=False,
    normalize_outbound_headers=False,
)
_CONTENT_TYPE = (b"content-type", b"application/grpc")
_RESPONSE_HEADERS = [(b":status", b"200"), _CONTENT_TYPE]
_STATUS = {code: (b"grpc-status", str(code).encode()) for code in range(17)}
_END = object()  # ends a request stream
_EMPTY = bytearray()  # a stream's `buffer` until it keeps bytes (never written to)


class _Abort(Exception):
    def __init__(self, code: int, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


class _Context:
    """What our handlers use of grpc.aio's ServicerContext: `abort`. (grpc-timeout is not enforced:
    Terraform sets none on plugin RPCs.)"""

    async def abort(self, code: Any, details: str = "") -> NoReturn:
        raise _Abort(code.value[0] if hasattr(code, "value") else int(code), details)


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


class _H2Connection(h2.connection.H2Connection):
    """h2's state machine with two of its connection errors made what RFC 9113 and grpc-go make them."""

    @property
    def open_inbound_streams(self) -> int:
        # h2 compares this with our MAX_CONCURRENT_STREAMS and answers the stream too many with GOAWAY,
        # which ends every RPC in flight: `GrpcConnection._open` counts instead and refuses that stream.
        self._open_streams(1)  # h2 forgets its closed streams as it counts
        return 0

    def _receive_goaway_frame(self, frame: GoAwayFrame) -> tuple[list[Frame], list[h2.events.Event]]:
        if frame.error_code != ErrorCodes.NO_ERROR:
            return super()._receive_goaway_frame(frame)
        # A graceful GOAWAY: h2 would close the connection and drop what it has not sent; the streams
        # the client opened go on (RFC 9113 6.8), so report it and leave the connection open.
        event = h2.events.ConnectionTerminated()
        event.error_code = ErrorCodes.NO_ERROR
        event.last_stream_id = frame.last_stream_id
        event.additional_data = frame.additional_data or None
        return [], [event]


class GrpcConnection:
    """One HTTP/2 connection: bytes in via `data_received`, out via `write`."""

    def __init__(self, server: GrpcServer, write: Callable[[bytes], None], close: Callable[[], None]) -> None:
        self.server = server
        self.write = write
        self.close_transport = close
        self.streams: dict[int, _Stream] = {}
        self.pending_message_bytes = 0  # reserved by the messages being received (MAX_PENDING_MESSAGE_BYTES)
        self.draining = False  # the client sent GOAWAY(NO_ERROR): no new streams
        self.h2 = _H2Connection(config=_CONFIG)
        self.h2.encoder = _UnindexedEncoder()  # type: ignore[assignment]
        # Our limits go into the first SETTINGS frame and count from the start: the client may use them
        # as soon as it reads them, before its ACK reaches us (a later `update_settings` would make h2
        # reject, until that ACK, frames the client was already allowed to send).
        codes = h2.settings.SettingCodes
        self.h2.local_settings = h2.settings.Settings(client=False, initial_values={
            codes.INITIAL_WINDOW_SIZE: RECEIVE_WINDOW,
            codes.MAX_FRAME_SIZE: MAX_FRAME_SIZE,
            codes.MAX_CONCURRENT_STREAMS: MAX_CONCURRENT_STREAMS,
            codes.MAX_HEADER_LIST_SIZE: MAX_HEADER_LIST_BYTES,
        })
        self.h2.max_inbound_frame_size = MAX_FRAME_SIZE
        self.h2.decoder.max_header_list_size = _DECODED_HEADER_LIST_LIMIT
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
            stream = self.streams.get(event.stream_id)
            if stream is not None:
                stream.received(event.data, event.flow_controlled_length)
            elif event.flow_controlled_length:  # a stream answered or refused: the bytes are dropped
                self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.RequestReceived):
            self._open(event)
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
            stream = self.streams.get(event.stream_id)
            if stream is not None:
                self.forget(stream)
                stream.cancel()
        elif isinstance(event, h2.events.RemoteSettingsChanged):
            for stream in list(self.streams.values()):  # a larger initial window may free sends
                self.send_pending(stream)
        elif isinstance(event, h2.events.ConnectionTerminated):
            if event.error_code == ErrorCodes.NO_ERROR:  # `_H2Connection` kept the connection open
                self.draining = True
            else:
                self.connection_lost()

    def _open(self, event: h2.events.RequestReceived) -> None:
        stream_id = event.stream_id
        if self.draining or len(self.streams) >= MAX_CONCURRENT_STREAMS:
            self.h2.reset_stream(stream_id, ErrorCodes.REFUSED_STREAM)
            return
        headers: list[tuple[bytes, bytes]] = event.headers  # bytes, as _CONFIG asks
        if sum(map(len, chain.from_iterable(headers))) + 32 * len(headers) > MAX_HEADER_LIST_BYTES:
            # the size of RFC 9113 6.5.2; FRAME_SIZE_ERROR is grpc-go's answer
            self.h2.reset_stream(stream_id, ErrorCodes.FRAME_SIZE_ERROR)
            return
        path = b""
        method = content_type = None
        for name, value in headers:
            if name == b":path":
                path = value
            elif name == b":method":
                method = value
            elif name == b"content-type":
                content_type = value
                break  # the pseudo-headers come first (RFC 9113 8.3)
        handler = self.server.methods.get(path)
        stream = _Stream(self, stream_id, handler, path, event.stream_ended is not None)
        self.streams[stream_id] = stream
        if method != b"POST":
            details = f"Received a HEADERS frame with :method {_text(method)} which should be POST"
            stream.finish(INTERNAL, details, status=b"405")
        elif content_type != b"application/grpc" and not _is_grpc_proto(content_type):
            stream.finish(INVALID_ARGUMENT, f"invalid gRPC request content-type {_text(content_type)}",
                          status=b"415")
        elif handler is None:
            stream.finish(UNIMPLEMENTED, f"unknown method {path.decode('ascii', 'replace')}")
        elif handler.request_streaming:
            stream.start()

    def send_pending(self, stream: _Stream) -> None:
        """Send what flow control allows of the stream's queued data, then its trailers once all is out."""
        if stream.closed:
            return
        connection = self.h2
        stream_id = stream.stream_id
        try:
            while stream.pending:
                size = min(
                    len(stream.pending),
                    connection.local_flow_control_window(stream_id),
                    connection.max_outbound_frame_size,
                )
                if size <= 0:
                    return  # until the client's WINDOW_UPDATE
                connection.send_data(stream_id, bytes(stream.pending[:size]))
                del stream.pending[:size]
            if stream.trailers is not None:
                connection.send_headers(stream_id, stream.trailers, end_stream=True)
                if not stream.ended:  # RFC 9113 8.1: the rest of the request is not wanted
                    connection.reset_stream(stream_id, ErrorCodes.NO_ERROR)
                self.forget(stream)
        except h2.exceptions.StreamClosedError:  # reset by the client in frames whose events are to come
            self.forget(stream)
            stream.cancel()

    def forget(self, stream: _Stream) -> None:
        """The stream is over (answered, refused or reset): nothing more is sent on it, and what it held is
        dropped, its unread bytes acknowledged so that they no longer count against the connection."""
        self.streams.pop(stream.stream_id, None)
        stream.closed = True
        if stream.unacknowledged:
            self.h2.acknowledge_received_data(stream.unacknowledged, stream.stream_id)
            stream.unacknowledged = 0
        if stream.reserved:
            self.pending_message_bytes -= stream.reserved
            stream.reserved = 0
            stream.body = stream.request = None
        stream.buffer = _EMPTY

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
            stream.closed = True
            stream.cancel()
        self.close_transport()


class _Stream:
    """One RPC: its request bytes, the task running its handler, its queued response."""

    context = _Context()  # it holds nothing of an RPC: one serves them all

    def __init__(self, connection: GrpcConnection, stream_id: int, handler: Method | None, path: bytes,
                 ended: bool) -> None:
        self.connection = connection
        self.stream_id = stream_id
        self.handler = handler
        self.path = path
        self.ended = ended  # the client's END_STREAM has come
        self.closed = False  # `forget` has run: nothing more goes out
        self.unacknowledged = 0  # bytes received and not acknowledged: those in `buffer`, or left by an error
        self.buffer = _EMPTY  # received and not taken yet (a bytearray of its own once there are any)
        self.body: bytearray | None = None  # the message being received, its length prefix taken
        self.missing = 0  # bytes of `body` still to come
        self.reserved = 0  # of the connection's MAX_PENDING_MESSAGE_BYTES, until the handler has the message
        self.request: bytes | bytearray | None = None  # a unary RPC's message, until the client's END_STREAM
        self.requests: asyncio.Queue[Any] | None = None  # a request stream's messages, for its handler
        self.waiting = False  # a request stream's message the handler has not taken yet
        self.end_queued = False  # a request stream's _END
        self.task: asyncio.Task[None] | None = None
        self.headers_sent = False
        self.pending = bytearray()  # response bytes waiting for the client's window
        self.trailers: list[tuple[bytes, bytes]] | None = None

    # requests
    def received(self, data: bytes, flow_controlled_length: int) -> None:
        if self.trailers is not None:  # answered already (an error): the rest of the request is of no use
            self.connection.h2.acknowledge_received_data(flow_controlled_length, self.stream_id)
            return
        if flow_controlled_length > len(data):  # padding: nothing to keep
            self.connection.h2.acknowledge_received_data(flow_controlled_length - len(data), self.stream_id)
        if not data:
            return
        if self.body is not None and len(data) < self.missing:  # more of a large message: every frame
            self.body += data
            self.missing -= len(data)
            self.connection.h2.acknowledge_received_data(len(data), self.stream_id)
            return
        size = len(data) - 5
        if (self.request is None and self.requests is None and self.body is None and not self.buffer
                and size >= 0 and not data[0] and int.from_bytes(data[1:5], "big") == size
                and size <= MAX_PENDING_MESSAGE_BYTES - self.connection.pending_message_bytes):
            # A unary RPC's whole request in one frame, the usual case: what `_take` would do.
            self.request = data[5:]
            self.reserved = size
            self.connection.pending_message_bytes += size
            self.connection.h2.acknowledge_received_data(len(data), self.stream_id)
            if self.ended:
                self._request_complete()
        else:
            self.unacknowledged += len(data)
            if self.buffer:
                self.buffer += data
                self._take(self.buffer)
            else:
                self._take(data)

    def _take(self, data: bytes | bytearray) -> None:
        """Take from `data` (the stream's unread bytes) what may be taken: length prefixes and the bytes of
        the messages they announce, at most one message ahead of the handler. Acknowledge what was taken;
        keep the rest, unacknowledged, in `buffer`."""
        taken = 0
        end = len(data)
        while taken < end:
            if self.body is None:  # a length prefix is next
                if self.request is not None:
                    self._fail(INTERNAL, "expected exactly one request message")
                    return
                if self.waiting or end - taken < 5:
                    break
                if data[taken]:
                    self._fail(UNIMPLEMENTED, "compressed messages are not supported")
                    return
                size = int.from_bytes(data[taken + 1:taken + 5], "big")
                room = MAX_PENDING_MESSAGE_BYTES - self.connection.pending_message_bytes
                if size > MAX_MESSAGE_BYTES or size > room:
                    self._refuse(size)
                    return
                self.connection.pending_message_bytes += size
                self.reserved = size
                taken += 5
                if end - taken >= size:  # the whole message is here
                    message = data[taken:taken + size]
                    taken += size
                else:
                    with memoryview(data) as view:
                        self.body = bytearray(view[taken:])
                    self.missing = size - (end - taken)
                    taken = end
                    break
            else:  # more of the message being received
                assert self.body is not None
                size = min(self.missing, end - taken)
                if size == end:
                    self.body += data
                else:
                    with memoryview(data) as view:
                        self.body += view[taken:taken + size]
                taken += size
                self.missing -= size
                if self.missing:
                    break
                message, self.body = self.body, None
            if self.requests is None:
                self.request = message  # a unary RPC runs once the client has ended its request
            else:
                self.waiting = True
                self.requests.put_nowait(message)
        if data is not self.buffer:
            if taken < end:
                with memoryview(data) as view:
                    self.buffer = bytearray(view[taken:])
        elif taken:
            del self.buffer[:taken]
        if taken:
            self.unacknowledged -= taken
            self.connection.h2.acknowledge_received_data(taken, self.stream_id)
        if self.ended:
            self._request_complete()

    def _refuse(self, size: int) -> None:
        """A length prefix announcing more than we keep: answered at once, nothing of the message kept."""
        if size > MAX_MESSAGE_BYTES:  # grpc-go's words
            details = f"grpc: received message larger than max ({size} vs. {MAX_MESSAGE_BYTES})"
        else:
            details = (f"grpc: a message of {size} bytes with those being received on this connection would "
                       f"exceed {MAX_PENDING_MESSAGE_BYTES} bytes")
        self._fail(RESOURCE_EXHAUSTED, details)

    def _fail(self, code: int, details: str) -> None:
        """The request cannot be read: answer, and stop a handler already reading a request stream."""
        self.finish(code, details)
        self.cancel()

    def request_ended(self) -> None:
        self.ended = True
        if self.trailers is None:
            self._request_complete()

    def _request_complete(self) -> None:
        """The client has ended its request: run a unary RPC, end a request stream once it is all taken."""
        if self.requests is None:
            if self.task is None:
                if self.request is None or self.buffer or self.body is not None:
                    self._fail(INTERNAL, "expected exactly one request message")
                    return
                message, self.request = self.request, None
                self.connection.pending_message_bytes -= self.reserved
                self.reserved = 0
                self.start(message)
        elif not self.waiting and not self.end_queued:
            if self.buffer or self.body is not None:
                self._fail(INTERNAL, "the request ended inside a message")
                return
            self.end_queued = True
            self.requests.put_nowait(_END)

    def _message_taken(self) -> None:
        """The handler of a request stream has its message: take the next."""
        self.waiting = False
        self.connection.pending_message_bytes -= self.reserved
        self.reserved = 0
        if not self.closed and self.trailers is None:
            self._take(self.buffer)
            self.connection.flush()

    # running the handler
    def start(self, message: bytes | bytearray | None = None) -> None:
        assert self.handler is not None
        if self.handler.request_streaming:
            self.requests = asyncio.Queue()
        self.task = asyncio.get_running_loop().create_task(self._run(message))

    async def _run(self, message: bytes | bytearray | None) -> None:
        handler = self.handler
        assert handler is not None
        try:
            if handler.request_streaming:
                request: Any = self._request_stream()
            else:
                request = handler.request_deserializer(message)  # type: ignore[arg-type]  # unary: bytes
            if handler.response_streaming:
                async for response in handler.behaviour(request, self.context):
                    if self.closed:
                        return  # reset, and the handler went on regardless: nobody to answer
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
            path = self.path.decode("ascii", "replace")
            if self.closed:
                log.debug("%s failed after the client had gone", path, exc_info=True)
                return
            log.error("%s failed", path, exc_info=True)
            self.finish(UNKNOWN, f"{type(exc).__name__}: {exc}")
        self.connection.flush()

    async def _request_stream(self) -> AsyncIterator[Any]:
        assert self.requests is not None and self.handler is not None
        requests, deserialize = self.requests, self.handler.request_deserializer
        while (message := await requests.get()) is not _END:
            self._message_taken()
            yield deserialize(message)

    def cancel(self) -> None:
        if self.task is not None:
            self.task.cancel()

    # responses
    def send_message(self, message: Any) -> None:
        if self.closed or self.trailers is not None:
            return  # the client reset the stream, or went away
        assert self.handler is not None
        payload = self.handler.response_serializer(message)
        connection = self.connection.h2
        if not self.headers_sent:
            connection.send_headers(self.stream_id, _RESPONSE_HEADERS)
            self.headers_sent = True
        prefix = b"\0" + len(payload).to_bytes(4, "big")
        if (not self.pending and len(payload) < connection.max_outbound_frame_size - 5
                and len(payload) < connection.local_flow_control_window(self.stream_id) - 5):
            connection.send_data(self.stream_id, prefix + payload)  # one frame: most answers
            return
        self.pending += prefix
        self.pending += payload
        self.connection.send_pending(self)

    def finish(self, code: int, details: str = "", status: bytes = b"200") -> None:
        if self.trailers is not None or self.closed:
            return
        trailers = [_STATUS.get(code) or (b"grpc-status", str(code).encode())]
        if details:
            trailers.append((b"grpc-message", _percent_encoded(details)))
        if not self.headers_sent:  # "Trailers-Only": one HEADERS frame ends the stream
            self.headers_sent = True
            trailers = [(b":status", status), _CONTENT_TYPE, *trailers]
        self.trailers = trailers
        self.connection.send_pending(self)


def _is_grpc_proto(content_type: bytes | None) -> bool:
    """`application/grpc+proto`, or either with parameters: what grpc-go accepts, but for other codecs."""
    if content_type is None:
        return False
    return content_type.split(b";", 1)[0].rstrip() in (b"application/grpc", b"application/grpc+proto")


def _text(value: bytes | None) -> str:
    """A header value in an error message, quoted (as grpc-go's %q does)."""
    return '"' + (value or b"").decode("utf-8", "replace") + '"'


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
