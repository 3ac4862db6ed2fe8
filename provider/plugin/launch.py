"""Serving a provider the way go-plugin expects, fast: the handshake line comes before the heavy imports.

Order of a launch (Terraform waits only for the handshake line; its connection then waits in the
listen backlog until the gRPC side is ready, so the work after the line overlaps Terraform's own):

1. magic cookie and protocol version (stdlib only);
2. private 0700 directory, fresh server certificate (pure-Python ECDSA, ~2 ms), listening socket;
3. the handshake line on stdout; stdout is then pointed at stderr so nothing else can corrupt it;
4. the TLS terminator's event loop (it accepts and handshakes Terraform's connection meanwhile), then
   the gRPC services, logging and the provider itself, which the loop then serves (provider.plugin.http2);
5. wait for GRPCController/Shutdown (or SIGTERM), remove the directory, exit at once.

A warm launch (provider.plugin.warm_daemon) finds step 2 and the loop and services of step 4 set up
ahead (`Staged`, by a spare child). Only this module's callees import the HTTP/2 server and the
provider, in step 4.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from collections.abc import Callable

from provider.plugin.handshake import (
    HandshakeError,
    check_magic_cookie,
    format_handshake_line,
    negotiate_protocol_version,
    socket_directory,
)

TYPE_CHECKING = False  # `typing` costs ~4 ms to import; mypy treats this name as True
if TYPE_CHECKING:
    import threading
    from typing import Any, NoReturn

# Worker threads for RPCs that may wait (the others run on the event loop): Terraform's -parallelism
# defaults to 10; allow far more.
MAX_PARALLEL_RPCS = 64
ORPHAN_CHECK_INTERVAL_S = 2.0
host_pid: int | None = os.getppid()  # taken at import, before the host could have died; None: not watched
on_exit: Callable[[int], None] | None = None  # the warm path reports the exit code to its launcher
staged: Staged | None = None  # a warm spare's set-up done ahead of its launch (see `Staged`)

MakeServer = Callable[[], object]


def serve(make_server: MakeServer, *, debug: bool, provider_address: str) -> None:
    """Serve the provider built by `make_server()` until the host shuts it down.

    `provider_address` is the source address (`registry.terraform.io/NS/TYPE`): it names the
    reattach entry in debug mode and the executable in messages for humans.
    """
    if debug:
        from provider.plugin.debug import serve_debug

        serve_debug(make_server, provider_address=provider_address)
        return
    _serve_for_terraform(make_server, provider_address=provider_address)


def _program_name(provider_address: str) -> str:
    return "terraform-provider-" + provider_address.rstrip("/").rsplit("/", 1)[-1]


def _serve_for_terraform(make_server: MakeServer, *, provider_address: str) -> NoReturn:
    environ = os.environ
    try:
        check_magic_cookie(environ, _program_name(provider_address))
        protocol_version = negotiate_protocol_version(environ)
    except HandshakeError as exc:
        sys.stderr.write(str(exc))
        sys.stderr.flush()
        raise SystemExit(1) from None

    # Ctrl-C reaches the whole process group; Terraform turns it into StopProvider for us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # SIGTERM, at any point, ends serving and still removes the socket directory.
    signal.signal(signal.SIGTERM, _terminate)
    ready = take_staged(environ)
    directory = ready.directory if ready is not None else socket_directory(environ)
    exit_code = 0
    try:
        _serve_in(
            directory, make_server, environ=environ, protocol_version=protocol_version,
            provider_address=provider_address, ready=ready,
        )
    except _Terminated:
        pass
    except BaseException:
        import traceback

        traceback.print_exc()
        exit_code = 1
    finally:
        _remove_directory(directory)
    # os._exit, without stopping the server first: it ends the loop and worker threads at once, and Terraform
    # waits for this exit after every launch (it kills a plugin only after 2 s).
    if on_exit is not None:
        on_exit(exit_code)
    os._exit(exit_code)


def _remove_directory(directory: str) -> None:
    """Remove the socket directory; it holds only our own sockets and key files (no `shutil`: ~2 ms)."""
    try:
        for name in os.listdir(directory):
            os.unlink(os.path.join(directory, name))
        os.rmdir(directory)
    except OSError:
        import shutil

        shutil.rmtree(directory, ignore_errors=True)


class _Terminated(BaseException):
    pass


def _terminate(_signo: int, _frame: object) -> None:
    raise _Terminated


def _serve_in(
    directory: str, make_server: MakeServer, *, environ: Any, protocol_version: int, provider_address: str,
    ready: Staged | None,
) -> None:
    public_path = os.path.join(directory, "plugin.sock")
    client_ca_pem = environ.get("PLUGIN_CLIENT_CERT") or None
    if ready is not None:
        ready.trust(client_ca_pem)
        _announce(public_path, protocol_version, ready.certificate.handshake_text())
        terminator, runtime = ready.terminator, ready.runtime
    else:
        listener = listen(public_path)
        if _uses_tls(environ):
            from provider.plugin.selfsigned import generate_server_certificate
            from provider.plugin.tls_terminator import trust_client

            certificate = generate_server_certificate()
            _announce(public_path, protocol_version, certificate.handshake_text())
            context = _tls_context(directory, certificate)
            trust_client(context, client_ca_pem)
            terminator = _start_terminator(listener, context)
        else:  # TF_DISABLE_PLUGIN_TLS: plaintext HTTP/2 on the public socket
            _announce(public_path, protocol_version, "")
            terminator = _start_terminator(listener, None)
        # Terraform connects as soon as it reads the handshake line: its TLS handshake runs on the
        # terminator's loop while the provider loads here; what it sends waits until `serve`.
        runtime = start_runtime()
    runtime.serve(make_server, environ, provider_address=provider_address)
    terminator.serve(runtime.server)
    runtime.wait_for_shutdown()


def _uses_tls(environ: Any) -> bool:
    return bool(environ.get("PLUGIN_CLIENT_CERT")) or not environ.get("TF_DISABLE_PLUGIN_TLS")


class Staged:
    """The part of a TLS launch that does not depend on its host, set up ahead by a warm spare
    (provider.plugin.warm_daemon) while nobody waits: private directory, server certificate, public
    socket, TLS relay and gRPC server, ~10 ms of a launch.

    A spare serves one launch, so nothing here is shared. Until `trust` loads the host's client
    certificate, the relay requires one that nothing can satisfy; no one can know the socket's path
    before the handshake line anyway.
    """

    def __init__(self) -> None:
        from provider.plugin.selfsigned import generate_server_certificate

        self.base = _directory_base(os.environ)
        self.directory = socket_directory(os.environ)
        try:
            self.certificate = generate_server_certificate()
            listener = listen(os.path.join(self.directory, "plugin.sock"))
            self.terminator = _start_terminator(listener, _tls_context(self.directory, self.certificate))
            self.runtime = start_runtime()
        except BaseException:
            _remove_directory(self.directory)
            raise

    def fits(self, environ: Any) -> bool:
        """Whether this launch would have set up the same: TLS, and its directory under the same TMPDIR."""
        return _uses_tls(environ) and _directory_base(environ) == self.base

    def trust(self, client_ca_pem: str | None) -> None:
        """Require the host's client certificate (or, without one, none: server-authenticated TLS)."""
        from provider.plugin.tls_terminator import trust_client

        trust_client(self.terminator.context, client_ca_pem)

    def discard(self) -> None:
        _remove_directory(self.directory)


def take_staged(environ: Any) -> Staged | None:
    """The staged set-up, if there is one and it fits this launch (any other is discarded)."""
    global staged
    ready, staged = staged, None
    if ready is not None and not ready.fits(environ):
        ready.discard()
        return None
    return ready


def _directory_base(environ: Any) -> str:
    return str(environ.get("TMPDIR") or "/tmp")  # as socket_directory chooses it


def listen(path: str) -> socket.socket:
    """The plugin's socket, listening: a connection made before the server is ready waits in the backlog."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(128)
    return listener


def _tls_context(directory: str, certificate: Any) -> Any:
    """Our TLS context (its key file goes into `directory`): no client verifies until `trust_client`."""
    from provider.plugin.tls_terminator import server_ssl_context

    return server_ssl_context(cert_pem=certificate.pem, key_pem=certificate.key_pem, directory=directory)


def _start_terminator(listener: socket.socket, context: Any) -> Any:
    """The connection loop on `listener`: TLS with `context`, or plaintext without one."""
    from provider.plugin.tls_terminator import TlsTerminator

    terminator = TlsTerminator(listener, context)
    terminator.start()
    return terminator


def _announce(address: str, protocol_version: int, cert_b64: str) -> None:
    line = format_handshake_line(
        network="unix", address=address, protocol_version=protocol_version, server_cert_b64=cert_b64
    )
    os.write(1, line.encode("ascii"))
    # From here on fd 1 is stderr: a stray print() can no longer corrupt the plugin's stdout.
    os.dup2(2, 1)


class _Runtime:
    """The gRPC services, the provider they serve, and the event that ends the process."""

    def __init__(self, server: Any, servicer: Any, shutdown: threading.Event) -> None:
        self.server = server
        self.servicer = servicer
        self._shutdown = shutdown

    def serve(self, make_server: MakeServer, environ: Any, *, provider_address: str) -> None:
        """Configure logging for this launch, then build the provider and serve it."""
        from provider.plugin.log import configure_logging

        configure_logging(environ, provider_address=provider_address)
        self.servicer.attach(build_provider(make_server))

    def wait_for_shutdown(self) -> None:
        """Until Shutdown or SIGTERM, or until Terraform itself is gone (killed: nobody would stop us).

        SIGTERM keeps its start-up handler, which raises `_Terminated` out of this wait: a handler that
        set `_shutdown` could deadlock, since it runs in this thread, maybe while `wait` holds the event's
        own lock.
        """
        while not self._shutdown.wait(ORPHAN_CHECK_INTERVAL_S):
            if host_pid is not None and os.getppid() != host_pid:
                break


def start_runtime() -> _Runtime:
    """The gRPC services, serving a provider once `_Runtime.serve` has built one."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from provider.plugin.http2 import GrpcServer
    from provider.plugin.services import AsyncProviderServicer, register_services

    shutdown = threading.Event()
    servicer = AsyncProviderServicer(None, ThreadPoolExecutor(MAX_PARALLEL_RPCS, thread_name_prefix="rpc"))
    server = GrpcServer()
    register_services(server, servicer, on_shutdown=shutdown.set)
    return _Runtime(server, servicer, shutdown)


def build_provider(make_server: MakeServer) -> object:
    """The provider server, or a stand-in answering every RPC with the reason it could not be built."""
    import logging

    from provider.plugin.services import UnavailableProvider

    try:
        return make_server()
    except Exception as exc:
        logging.getLogger("gpucloud.plugin").error("the provider could not be started", exc_info=True)
        return UnavailableProvider(
            "Provider Failed To Start",
            f"The provider could not be initialised: {exc!r}. Reinstall it, or run it with "
            "TF_LOG_PROVIDER=debug for the traceback.",
        )
