"""TLS for the plugin socket, terminated by Python's `ssl` module in front of a private gRPC socket.

Why not grpcio's own TLS: when Terraform asks for a client certificate (mutual TLS, always, unless
TF_DISABLE_PLUGIN_TLS is set), its certificate is ECDSA P-521 and BoringSSL inside grpcio does not
offer the matching signature algorithm in its CertificateRequest, so Terraform sends no certificate
and the handshake fails. OpenSSL (the `ssl` module) offers ecdsa_secp521r1_sha512. So: the public
socket is served here (handshake, client-certificate check, ALPN h2 which grpc-go requires), and the
decrypted bytes are relayed to grpcio listening in plaintext on a socket inside the same 0700
directory. Both sockets are reachable only by this user. Costs: docs/plugin-tls.md.

Relaying runs on one asyncio event loop in a daemon thread, the loop the gRPC server's handlers run on
too (provider.plugin.grpc_server), so an RPC crosses no Python thread. Per connection the loop
watches two non-blocking sockets and moves bytes through an `ssl.SSLObject` over memory buffers: one
recv, one decrypt (or encrypt) and one send per chunk, without asyncio's transport and stream layers,
which cost more than the copying itself. The terminator starts before grpcio is imported, so
Terraform's TLS handshake overlaps the imports; `backend_ready()` releases the relay.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
import threading

log = logging.getLogger("gpucloud.plugin.tls")

_CHUNK = 256 * 1024
_HIGH_WATER = 4 * 1024 * 1024  # bytes queued for one side before reading from the other pauses
_HANDSHAKE_TIMEOUT_S = 30.0


def server_ssl_context(
    *, cert_pem: bytes, key_pem: bytes, directory: str, client_ca_pem: str | None
) -> ssl.SSLContext:
    """TLS server context with our certificate; requires a client certificate signed by `client_ca_pem`.

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
    if client_ca_pem:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cadata=client_ca_pem)
    return context


class TlsTerminator:
    """Accepts TLS on `listener` and relays each connection to the unix socket at `backend_path`."""

    def __init__(
        self,
        listener: socket.socket,
        backend_path: str,
        context: ssl.SSLContext,
        *,
        backend_listening: bool = True,
    ) -> None:
        """With `backend_listening=False`, relaying waits for `backend_ready()` (TLS is accepted before)."""
        self._listener = listener
        self.backend_path = backend_path
        self.context = context
        self.loop = asyncio.new_event_loop()  # public: the gRPC server is started on it
        self._thread = threading.Thread(target=self._run, name="plugin-loop", daemon=True)
        self._started = threading.Event()
        self._startup_error: BaseException | None = None
        self.backend_listening = backend_listening
        self.waiting: list[_Connection] = []  # handshaken before the backend listened

    def start(self) -> None:
        self._thread.start()
        self._started.wait()
        if self._startup_error is not None:
            raise self._startup_error

    def backend_ready(self) -> None:
        """The gRPC server listens now: relay connections accepted before this (and all later ones)."""
        self.loop.call_soon_threadsafe(self._release)

    def _release(self) -> None:
        self.backend_listening = True
        waiting, self.waiting = self.waiting, []
        for connection in waiting:
            connection.connect_backend()

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
    """One client connection: TLS on `client`, plaintext on `backend` (the gRPC server's socket)."""

    def __init__(self, terminator: TlsTerminator, client: socket.socket) -> None:
        self.terminator = terminator
        self.loop = terminator.loop
        self.client = client
        self.backend: socket.socket | None = None
        client.setblocking(False)
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.tls = terminator.context.wrap_bio(self.incoming, self.outgoing, server_side=True)
        self.handshaken = False
        self.closed = False
        self.to_client = _Outbox(self, client)
        self.to_backend = _Outbox(self, None)  # queues until the backend is connected
        self.handshake_timer = self.loop.call_later(_HANDSHAKE_TIMEOUT_S, self.close)
        self.loop.add_reader(client.fileno(), self.client_readable)

    # client -> backend
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
            self.to_backend.send(bytes(plaintext))

    def _handshake(self) -> bool:
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
        if self.terminator.backend_listening:
            self.connect_backend()
        else:
            self.terminator.waiting.append(self)
        return True

    def connect_backend(self) -> None:
        if self.closed:
            return
        backend = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            backend.settimeout(_HANDSHAKE_TIMEOUT_S)  # a unix connect with backlog room is immediate
            backend.connect(self.terminator.backend_path)
            backend.setblocking(False)
        except OSError:
            log.error("cannot reach the gRPC server at %s", self.terminator.backend_path, exc_info=True)
            backend.close()
            self.close()
            return
        self.backend = backend
        self.loop.add_reader(backend.fileno(), self.backend_readable)
        self.to_backend.attach(backend)

    # backend -> client
    def backend_readable(self) -> None:
        assert self.backend is not None
        try:
            data = self.backend.recv(_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.to_client.close_when_sent()
            return
        try:
            self.tls.write(data)
        except ssl.SSLError:
            self.close()
            return
        self.flush_tls()

    def flush_tls(self) -> None:
        if data := self.outgoing.read():
            self.to_client.send(data)

    # flow control: an outbox over its high water mark pauses reading from the other side
    def pause_source(self, outbox: _Outbox) -> None:
        source = self.backend if outbox is self.to_client else self.client
        if source is not None:
            self.loop.remove_reader(source.fileno())

    def resume_source(self, outbox: _Outbox) -> None:
        if outbox is self.to_client and self.backend is not None:
            self.loop.add_reader(self.backend.fileno(), self.backend_readable)
        elif outbox is not self.to_client:
            self.loop.add_reader(self.client.fileno(), self.client_readable)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.handshake_timer.cancel()
        for sock in (self.client, self.backend):
            if sock is not None and sock.fileno() >= 0:
                self.loop.remove_reader(sock.fileno())
                self.loop.remove_writer(sock.fileno())
                sock.close()


class _Outbox:
    """Bytes for one non-blocking socket: sent at once where the socket takes them, else queued (also
    while there is no socket yet: `attach` gives it)."""

    def __init__(self, connection: _Connection, sock: socket.socket | None) -> None:
        self.connection = connection
        self.sock = sock
        self.queued = bytearray()
        self.closing = False

    def attach(self, sock: socket.socket) -> None:
        self.sock = sock
        if self.queued:
            self.connection.loop.add_writer(sock.fileno(), self.writable)

    def send(self, data: bytes) -> None:
        if self.queued or self.sock is None:
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
            self.connection.pause_source(self)

    def writable(self) -> None:
        assert self.sock is not None  # registered only once attached
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
                self.connection.resume_source(self)
            return
        self.connection.loop.remove_writer(self.sock.fileno())
        if self.closing:
            self.connection.close()
        elif was_high:
            self.connection.resume_source(self)

    def close_when_sent(self) -> None:
        """The other side ended: close the connection once what is queued here has gone out."""
        self.closing = True
        if not self.queued:
            self.connection.close()
