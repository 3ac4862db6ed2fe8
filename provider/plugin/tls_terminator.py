"""TLS for the plugin socket, terminated by Python's `ssl` module in front of a private gRPC socket.

Why not grpcio's own TLS: when Terraform asks for a client certificate (mutual TLS, always, unless
TF_DISABLE_PLUGIN_TLS is set), its certificate is ECDSA P-521 and BoringSSL inside grpcio does not
offer the matching signature algorithm in its CertificateRequest, so Terraform sends no certificate
and the handshake fails. OpenSSL (the `ssl` module) offers ecdsa_secp521r1_sha512. So: the public
socket is served here (handshake, client-certificate check, ALPN h2 which grpc-go requires), and the
decrypted bytes are relayed to grpcio listening in plaintext on a socket inside the same 0700
directory. Both sockets are reachable only by this user. Costs: docs/plugin-tls.md.

Relaying runs on one asyncio event loop in a daemon thread: per connection a handshake and two
copy loops, nothing per RPC beyond copying bytes. The terminator starts before grpcio is imported,
so Terraform's TLS handshake overlaps the imports; `backend_ready()` releases the relay.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import ssl
import threading

log = logging.getLogger("gpucloud.plugin.tls")

_CHUNK = 256 * 1024
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
        self._backend_path = backend_path
        self._context = context
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="tls-terminator", daemon=True)
        self._started = threading.Event()
        self._startup_error: BaseException | None = None
        self._backend_ready = asyncio.Event()  # bound to the loop on first use (Python >= 3.10)
        if backend_listening:
            self._backend_ready.set()

    def start(self) -> None:
        self._thread.start()
        self._started.wait()
        if self._startup_error is not None:
            raise self._startup_error

    def backend_ready(self) -> None:
        """The gRPC server listens now: relay connections accepted before this (and all later ones)."""
        self._loop.call_soon_threadsafe(self._backend_ready.set)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(
                asyncio.start_unix_server(
                    self._relay,
                    sock=self._listener,
                    ssl=self._context,
                    ssl_handshake_timeout=_HANDSHAKE_TIMEOUT_S,
                )
            )
        except BaseException as exc:
            self._startup_error = exc
            self._started.set()
            return
        self._started.set()
        self._loop.run_forever()

    async def _relay(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        peer = client_writer.get_extra_info("peercert")
        log.debug("TLS connection accepted (client certificate: %s)", "verified" if peer else "none")
        await self._backend_ready.wait()
        try:
            backend_reader, backend_writer = await asyncio.open_unix_connection(self._backend_path)
        except OSError:
            log.error("cannot reach the gRPC server at %s", self._backend_path, exc_info=True)
            client_writer.close()
            return
        await asyncio.gather(
            _copy(client_reader, backend_writer),
            _copy(backend_reader, client_writer),
        )


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until EOF or error, then close the writing side (which ends the opposite copy too)."""
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, ssl.SSLError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()
