"""The plugin socket: TLS terminated by Python's `ssl` module, HTTP/2 served on the same event loop.

Why not grpcio's TLS: when Terraform asks for a client certificate (mutual TLS, always, unless
TF_DISABLE_PLUGIN_TLS is set), its certificate is ECDSA P-521 and BoringSSL inside grpcio does not
offer the matching signature algorithm in its CertificateRequest, so Terraform sends no certificate
and the handshake fails. OpenSSL (the `ssl` module) offers ecdsa_secp521r1_sha512. So the public
socket is served here (handshake, client-certificate check, ALPN h2 which grpc-go requires), and the
decrypted bytes of each connection go straight to a `GrpcConnection` (provider.plugin.http2) on the
same loop: an RPC crosses no socket and no Python thread after the one it arrived on. Without a TLS
context (TF_DISABLE_PLUGIN_TLS, debug mode) the same loop serves plaintext. Costs: docs/plugin-tls.md.

The loop runs in a daemon thread and watches each connection's non-blocking socket, moving bytes
through an `ssl.SSLObject` over memory buffers: one recv and one decrypt per chunk in, one encrypt and
one send per answer out, without asyncio's transport and stream layers, which cost more than the
copying itself. The terminator starts before the provider is imported, so Terraform's TLS handshake
overlaps the imports; `serve(server)` then lets the bytes through.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
import threading

TYPE_CHECKING = False
if TYPE_CHECKING:
    from provider.plugin.http2 import GrpcConnection, GrpcServer

log = logging.getLogger("gpucloud.plugin.tls")

_CHUNK = 256 * 1024
_HIGH_WATER = 4 * 1024 * 1024  # bytes queued for Terraform before we stop reading its requests
_HANDSHAKE_TIMEOUT_S = 30.0


def server_ssl_context(*, cert_pem: bytes, key_pem: bytes, directory: str) -> ssl.SSLContext:
    """TLS server context with our certificate. It requires a client certificate that nothing verifies
    until `trust_client` says which host to trust (a warm spare builds it before it knows).

    `load_cert_chain` only reads files, so the key is written (0600) into the private socket directory,
    which is removed when the process exits.
    """
    cert_path = os.path.join(directory, "server.crt")
    key_path = os.path.join(directory, "server.key")
    for path, data in ((cert_path, cert_pem), (key_path, key_pem)):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_path, key_path)
    context.set_alpn_protocols(["h2"])
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def trust_client(context: ssl.SSLContext, client_ca_pem: str | None) -> None:
    """Require a client certificate signed by `client_ca_pem` (Terraform's PLUGIN_CLIENT_CERT); without
    one, none: server-authenticated TLS, for a host that does not do mutual TLS."""
    if client_ca_pem:
        context.load_verify_locations(cadata=client_ca_pem)
    else:
        context.verify_mode = ssl.CERT_NONE


class TlsTerminator:
    """Accepts connections on `listener` (TLS with `context`, plaintext without one) and serves each with
    `GrpcConnection` on one event loop thread."""

    def __init__(self, listener: socket.socket, context: ssl.SSLContext | None) -> None:
        self._listener = listener
        self.context = context
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="plugin-loop", daemon=True)
        self._started = threading.Event()
        self._startup_error: BaseException | None = None
        self.server: GrpcServer | None = None
        self.waiting: list[_Connection] = []  # accepted (and handshaken) before there was a server

    def start(self) -> None:
        """Accept (and handshake) from now on; bytes wait for `serve`."""
        self._thread.start()
        self._started.wait()
        if self._startup_error is not None:
            raise self._startup_error

    def serve(self, server: GrpcServer) -> None:
        """Serve connections accepted before (and all later ones) with `server`; from any thread."""
        self.loop.call_soon_threadsafe(self._serve, server)

    def _serve(self, server: GrpcServer) -> None:
        self.server = server
        waiting, self.waiting = self.waiting, []
        for connection in waiting:
            connection.start_serving()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self._listener.setblocking(False)
            self.loop.add_reader(self._listener.fileno(), self._accept)
        except BaseException as exc:
            self._startup_error = exc
            self._started.set()
            return
        self._started.set()
        self.loop.run_forever()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                log.error("accepting a plugin connection failed", exc_info=True)
                return
            _Connection(self, client)


class _Connection:
    """One client connection: TLS (if any) on `client`, HTTP/2 served by a `GrpcConnection`."""

    def __init__(self, terminator: TlsTerminator, client: socket.socket) -> None:
        self.terminator = terminator
        self.loop = terminator.loop
        self.client = client
        client.setblocking(False)
        self.closed = False
        self.grpc: GrpcConnection | None = None
        self.early = bytearray()  # plaintext received before there was a server
        self.to_client = _Outbox(self, client)
        if terminator.context is None:
            self.tls: ssl.SSLObject | None = None
            self.handshaken = True
            self.handshake_timer: asyncio.TimerHandle | None = None
        else:
            self.incoming = ssl.MemoryBIO()
            self.outgoing = ssl.MemoryBIO()
            self.tls = terminator.context.wrap_bio(self.incoming, self.outgoing, server_side=True)
            self.handshaken = False
            self.handshake_timer = self.loop.call_later(_HANDSHAKE_TIMEOUT_S, self.close)
        self.loop.add_reader(client.fileno(), self.client_readable)
        if self.tls is None:
            # Only now: serving writes our SETTINGS at once, and a client already gone makes that send
            # fail and close the socket, which must not happen before the reader is registered.
            self._accepted()

    def client_readable(self) -> None:
        try:
            data = self.client.recv(_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.close()
            return
        if not data:
            self.close()
            return
        if self.tls is None:
            self.received(data)
            return
        self.incoming.write(data)
        if not self.handshaken and not self._handshake():
            return
        plaintext = bytearray()
        try:
            while chunk := self.tls.read(_CHUNK):
                plaintext += chunk
        except ssl.SSLWantReadError:
            pass
        except (ssl.SSLZeroReturnError, ssl.SSLError):
            self.close()  # close_notify or a broken record: the connection is over
            return
        self.flush_tls()  # TLS 1.3 may answer post-handshake messages
        if plaintext:
            self.received(bytes(plaintext))

    def received(self, plaintext: bytes) -> None:
        if self.grpc is not None:
            self.grpc.data_received(plaintext)
        else:
            self.early += plaintext

    def _handshake(self) -> bool:
        assert self.tls is not None and self.handshake_timer is not None
        try:
            self.tls.do_handshake()
        except ssl.SSLWantReadError:
            self.flush_tls()
            return False
        except (ssl.SSLError, OSError) as exc:
            log.warning("TLS handshake with the plugin client failed: %s", exc)
            self.flush_tls()  # the alert, so the client sees why
            self.close()
            return False
        self.handshaken = True
        self.handshake_timer.cancel()
        log.debug("TLS connection accepted (client certificate: %s)",
                  "verified" if self.tls.getpeercert() else "none")
        self.flush_tls()
        self._accepted()
        return True

    def _accepted(self) -> None:
        if self.terminator.server is not None:
            self.start_serving()
        else:
            self.terminator.waiting.append(self)

    def start_serving(self) -> None:
        if self.closed:
            return
        from provider.plugin.http2 import GrpcConnection  # h2: not before the TLS handshake can start

        assert self.terminator.server is not None
        self.grpc = GrpcConnection(self.terminator.server, self.send, self.close)
        if self.early:
            early, self.early = bytes(self.early), bytearray()
            self.grpc.data_received(early)

    def send(self, plaintext: bytes) -> None:
        if self.tls is None:
            self.to_client.send(plaintext)
            return
        try:
            self.tls.write(plaintext)
        except ssl.SSLError:
            self.close()
            return
        self.flush_tls()

    def flush_tls(self) -> None:
        if data := self.outgoing.read():
            self.to_client.send(data)

    # flow control: while Terraform does not read our answers, stop reading its requests
    def pause_reading(self) -> None:
        self.loop.remove_reader(self.client.fileno())

    def resume_reading(self) -> None:
        self.loop.add_reader(self.client.fileno(), self.client_readable)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.handshake_timer is not None:
            self.handshake_timer.cancel()
        if self.grpc is not None:
            self.grpc.connection_lost()
        if self.client.fileno() >= 0:
            self.loop.remove_reader(self.client.fileno())
            self.loop.remove_writer(self.client.fileno())
            self.client.close()


class _Outbox:
    """Bytes for one non-blocking socket: sent at once where the socket takes them, else queued."""

    def __init__(self, connection: _Connection, sock: socket.socket) -> None:
        self.connection = connection
        self.sock = sock
        self.queued = bytearray()

    def send(self, data: bytes) -> None:
        if self.connection.closed:
            return
        if self.queued:
            self.queued += data
        else:
            try:
                sent = self.sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                self.connection.close()
                return
            if sent == len(data):
                return
            self.queued += data[sent:]
            self.connection.loop.add_writer(self.sock.fileno(), self.writable)
        if len(self.queued) > _HIGH_WATER:
            self.connection.pause_reading()

    def writable(self) -> None:
        try:
            sent = self.sock.send(self.queued)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.connection.close()
            return
        was_high = len(self.queued) > _HIGH_WATER
        del self.queued[:sent]
        if self.queued:
            if was_high and len(self.queued) <= _HIGH_WATER:
                self.connection.resume_reading()
            return
        self.connection.loop.remove_writer(self.sock.fileno())
        if was_high:
            self.connection.resume_reading()
