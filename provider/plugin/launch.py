"""Serving a provider the way go-plugin expects, fast: the handshake line comes before the heavy imports.

Order of a launch (Terraform waits only for the handshake line; its connection then waits in the
listen backlog until the gRPC side is ready, so the work after the line overlaps Terraform's own):

1. magic cookie and protocol version (stdlib only);
2. private 0700 directory, fresh server certificate (pure-Python ECDSA, ~2 ms), listening socket;
3. the handshake line on stdout; stdout is then pointed at stderr so nothing else can corrupt it;
4. the TLS terminator's event loop (it accepts and handshakes Terraform's connection meanwhile), then
   logging, grpcio, the provider itself and the grpc.aio server on that loop and a private socket, to
   which the relay then connects;
5. wait for GRPCController/Shutdown (or SIGTERM), remove the directory, exit at once.

Only this module's callees import grpc, and only in step 4.
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
    directory = socket_directory(environ)
    exit_code = 0
    try:
        _serve_in(
            directory, make_server, environ=environ, protocol_version=protocol_version,
            provider_address=provider_address,
        )
    except _Terminated:
        pass
    except BaseException:
        import traceback

        traceback.print_exc()
        exit_code = 1
    finally:
        _remove_directory(directory)
    # os._exit, without stopping the gRPC server first: it ends grpcio's threads at once, and Terraform
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
    directory: str, make_server: MakeServer, *, environ: Any, protocol_version: int, provider_address: str
) -> None:
    public_path = os.path.join(directory, "plugin.sock")
    client_ca_pem = environ.get("PLUGIN_CLIENT_CERT") or None
    use_tls = client_ca_pem is not None or not environ.get("TF_DISABLE_PLUGIN_TLS")

    if use_tls:
        from provider.plugin.selfsigned import generate_server_certificate

        certificate = generate_server_certificate()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(public_path)
        listener.listen(128)
        _announce(public_path, protocol_version, certificate.handshake_text())

        from provider.plugin.tls_terminator import TlsTerminator, server_ssl_context

        context = server_ssl_context(
            cert_pem=certificate.pem,
            key_pem=certificate.key_pem,
            directory=directory,
            client_ca_pem=client_ca_pem,
        )
        # Terraform connects as soon as it reads the handshake line: its TLS handshake runs in the
        # terminator's thread while grpcio and the provider load here; the relay holds its bytes until then.
        grpc_path = os.path.join(directory, "grpc.sock")
        terminator = TlsTerminator(listener, grpc_path, context, backend_listening=False)
        terminator.start()
        runtime = _start_runtime(
            make_server, environ, grpc_path=grpc_path, provider_address=provider_address, loop=terminator.loop
        )
        terminator.backend_ready()
    else:
        # TF_DISABLE_PLUGIN_TLS: grpcio serves the public socket itself, so it must exist first.
        runtime = _start_runtime(
            make_server, environ, grpc_path=public_path, provider_address=provider_address, loop=None
        )
        _announce(public_path, protocol_version, "")

    runtime.wait_for_shutdown()


def _announce(address: str, protocol_version: int, cert_b64: str) -> None:
    line = format_handshake_line(
        network="unix", address=address, protocol_version=protocol_version, server_cert_b64=cert_b64
    )
    os.write(1, line.encode("ascii"))
    # From here on fd 1 is stderr: a stray print() can no longer corrupt the plugin's stdout.
    os.dup2(2, 1)


class _Runtime:
    """The gRPC server plus the event that ends the process."""

    def __init__(self, server: Any, grpc_path: str, shutdown: threading.Event) -> None:
        self.server = server
        self.grpc_path = grpc_path
        self._shutdown = shutdown

    def wait_for_shutdown(self) -> None:
        """Until Shutdown or SIGTERM, or until Terraform itself is gone (killed: nobody would stop us).

        SIGTERM keeps its start-up handler, which raises `_Terminated` out of this wait: a handler that
        set `_shutdown` could deadlock, since it runs in this thread, maybe while `wait` holds the event's
        own lock.
        """
        while not self._shutdown.wait(ORPHAN_CHECK_INTERVAL_S):
            if host_pid is not None and os.getppid() != host_pid:
                break


def _start_runtime(
    make_server: MakeServer, environ: Any, *, grpc_path: str, provider_address: str, loop: Any
) -> _Runtime:
    """Logging, the provider and the gRPC server, on `loop` (the terminator's) or a loop of its own."""
    import threading

    from provider.plugin.log import configure_logging

    configure_logging(environ, provider_address=provider_address)
    from provider.plugin.grpc_server import start_grpc_server, start_loop_thread

    shutdown = threading.Event()
    provider = build_provider(make_server)
    server = start_grpc_server(
        provider, "unix:" + grpc_path, loop=loop or start_loop_thread(), on_shutdown=shutdown.set,
        max_workers=MAX_PARALLEL_RPCS,
    )
    return _Runtime(server, grpc_path, shutdown)


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
