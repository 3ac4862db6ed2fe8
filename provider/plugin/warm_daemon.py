"""The per-user warm daemon: imports the provider once, then forks one fresh provider per launch.

Started detached by the launcher (`warm_client`) on first use, with a scrubbed environment. It takes
`warm-KEY.lock` (one daemon per key; it holds the daemon's pid), imports the gRPC server and the provider
(and builds one throwaway provider server, which loads every lazily imported module, and the launch
module's own `WARM_IMPORTS`, e.g. the HTTP client a cold launch imports only when configured),
binds `warm-KEY.sock` in the user's 0700 runtime directory and serves until idle for
GPUCLOUD_PROVIDER_WARM_IDLE_S (default 300 s).

Per connection: the peer must be this uid (SO_PEERCRED); the request carries Terraform's stdio fds,
argv, environment, cwd and umask. If any imported source file changed since start-up (an upgrade in
place), the daemon answers "stale", removes its socket and exits; the launcher goes cold. Otherwise
it answers "accepted" and hands the launch to its spare: a child forked after the previous launch,
which has set up meanwhile what no launch depends on (`Spare`; if it died, a fresh one is forked).
The child takes the received fds as 0/1/2, replaces its environment, and runs the launch module's
`main()` as a cold launch would; it watches the connection (launcher gone: SIGTERM to itself, the
provider's orderly exit) and sends its exit code on it last. The daemon never runs provider code for
a launch itself and never serves RPCs, so a child inherits no per-launch state; killing the daemon
leaves running children serving to the end (and ends the waiting spare).
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import gc
import os
import signal
import socket
import sys
import time
from typing import Any

from provider.plugin.warm_client import (
    ACCEPTED,
    IDLE_ENV,
    PROTOCOL,
    STALE,
    lock_path,
    peer_uid,
    private_directory,
    runtime_directory,
    socket_path,
)

DEFAULT_IDLE_S = 300.0
REQUEST_TIMEOUT_S = 5.0
MAX_REQUEST_BYTES = 4 * 1024 * 1024
# Loaded by every launch after the handshake line; importing them here is what makes a launch warm.
WARM_IMPORTS = (
    "asyncio", "ssl", "logging", "concurrent.futures", "traceback", "provider.plugin.launch",
    "provider.plugin.http2", "provider.plugin.services", "provider.plugin.log",
    "provider.plugin.tls_terminator", "provider.plugin.selfsigned",
)


class Request:
    """One launch: the launcher's stdio fds and process context."""

    def __init__(self, fds: list[int], key: str, cwd: str, umask: int, argv: list[str],
                 environ: dict[bytes, bytes], payload: bytes) -> None:
        self.fds, self.key, self.cwd, self.umask = fds, key, cwd, umask
        self.argv, self.environ = argv, environ
        self.payload = payload  # as the launcher sent it: what the daemon forwards to a spare


def main(launch_module: str, key: str) -> None:
    directory = runtime_directory()
    if not private_directory(directory, create=True):
        return
    lock = os.open(lock_path(directory, key), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return  # another daemon for this key runs (or is starting)
    os.ftruncate(lock, 0)
    os.write(lock, str(os.getpid()).encode())  # for people (and tests) who want to stop it
    module = _warm_up(launch_module)
    fingerprint = source_fingerprint()
    path = socket_path(directory, key)
    listener = _listen(path)
    idle_s = float(os.environ.get(IDLE_ENV) or DEFAULT_IDLE_S)
    try:
        serve(listener, module, key=key, fingerprint=fingerprint, idle_s=idle_s, lock=lock)
    finally:
        _unlink(path)
        listener.close()
        os.close(lock)


def _warm_up(launch_module: str) -> Any:
    import importlib

    for name in WARM_IMPORTS:
        importlib.import_module(name)
    module = importlib.import_module(launch_module)
    make = getattr(module, "make_server", None) or getattr(module, "make_provider_server", None)
    if make is not None:
        # Thrown away: only its imports (and class-level caches) stay. A failure is left to the launch,
        # which builds it again and reports the error as a diagnostic.
        with contextlib.suppress(Exception):
            make()
    for extra in getattr(module, "WARM_IMPORTS", ()):
        importlib.import_module(extra)
    # What is imported now lives as long as every child: keep it out of their garbage collections
    # (a full collection would walk all of the server's and the provider's objects) and their copied pages.
    gc.collect()
    gc.freeze()
    return module


def source_fingerprint() -> dict[str, tuple[int, int]]:
    """(mtime, size) of every imported Python source file: a changed one means an upgraded provider."""
    files: dict[str, tuple[int, int]] = {}
    for module in list(sys.modules.values()):
        name = getattr(module, "__file__", None)
        if name:
            try:
                info = os.stat(name)
            except OSError:
                continue
            files[name] = (info.st_mtime_ns, info.st_size)
    return files


def _unchanged(fingerprint: dict[str, tuple[int, int]]) -> bool:
    for name, expected in fingerprint.items():
        try:
            info = os.stat(name)
        except OSError:
            return False
        if (info.st_mtime_ns, info.st_size) != expected:
            return False
    return True


def _listen(path: str) -> socket.socket:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # a dead daemon's socket; the lock proves no live one owns it
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    os.chmod(path, 0o600)
    listener.listen(64)
    listener.settimeout(1.0)
    return listener


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def serve(listener: socket.socket, module: Any, *, key: str, fingerprint: dict[str, tuple[int, int]],
          idle_s: float, lock: int) -> None:
    last_used = time.monotonic()
    spare: Spare | None = None
    try:
        while time.monotonic() - last_used < idle_s:
            _reap_children()
            if spare is None:
                spare = Spare.fork(listener, lock, module, key)
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            last_used = time.monotonic()
            with connection:
                request = receive(connection, key)
                if request is None:
                    continue
                if not _unchanged(fingerprint):
                    _close_fds(request.fds)
                    _unlink(listener.getsockname())  # before answering: the launcher may start a fresh daemon
                    _send(connection, STALE)
                    return
                if not _send(connection, ACCEPTED):
                    _close_fds(request.fds)
                    continue
                if not spare.take(connection, request):  # the spare died: a fresh one takes the launch
                    Spare.fork(listener, lock, module, key).take(connection, request)
                spare = None
                _close_fds(request.fds)
    finally:
        if spare is not None:
            spare.close()


def receive(connection: socket.socket, key: str, *, descriptors: int = 3,
            timeout: float | None = REQUEST_TIMEOUT_S) -> Request | None:
    """The launcher's request, or None (closing any received fds) if it is not one we serve.

    A spare receives the same request from the daemon, with the launcher's connection as a fourth fd.
    """
    fds: list[int] = []
    try:
        if peer_uid(connection) != os.getuid():
            return None  # another user's process: never serve it
        connection.settimeout(timeout)
        data, ancillary, _flags, _address = connection.recvmsg(65536, socket.CMSG_SPACE(descriptors * 4))
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds += [int.from_bytes(payload[i:i + 4], sys.byteorder) for i in range(0, len(payload), 4)]
        if len(data) < 4:
            raise ValueError("short request")
        size = int.from_bytes(data[:4], "big")
        if size > MAX_REQUEST_BYTES:
            raise ValueError("request too large")
        rest = bytearray(data[4:])  # the request may take several reads
        while len(rest) < size:
            chunk = connection.recv(size - len(rest))
            if not chunk:
                raise ValueError("truncated request")
            rest += chunk
        request = parse_request(bytes(rest), fds)
        if request.key != key or len(fds) != descriptors:
            raise ValueError("wrong key or descriptors")
        return request
    except (OSError, ValueError):
        _close_fds(fds)
        return None


def parse_request(payload: bytes, fds: list[int]) -> Request:
    fields = payload.split(b"\0")
    if fields[0] != PROTOCOL or len(fields) < 5:
        raise ValueError("not a launch request")
    argc = int(fields[4])
    argv = [os.fsdecode(arg) for arg in fields[5:5 + argc]]
    environ: dict[bytes, bytes] = {}
    for item in fields[5 + argc:]:
        name, separator, value = item.partition(b"=")
        if separator:
            environ[name] = value
    return Request(fds, fields[1].decode(), fields[2].decode("utf-8", "surrogateescape"), int(fields[3]),
                   argv, environ, payload)


class Spare:
    """A child forked ahead of the next launch, which sets up what does not depend on it meanwhile.

    A launch's private directory, server certificate, TLS relay and gRPC server (`launch.Staged`,
    ~10 ms) do not depend on the host that launches it, so a spare builds them while nobody waits,
    then blocks until the daemon hands it a launch (the launcher's request and connection, over a
    socket pair). It serves that one launch only: nothing it set up is shared. When the daemon exits,
    the pair closes, and a spare still waiting removes its directory and exits.
    """

    def __init__(self, channel: socket.socket) -> None:
        self.channel = channel

    @classmethod
    def fork(cls, listener: socket.socket, lock: int, module: Any, key: str) -> Spare:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        sys.stdout.flush()
        sys.stderr.flush()
        if os.fork() == 0:
            try:
                listener.close()
                os.close(lock)  # the daemon's flock: a child outliving it must not block the next daemon
                ours.close()
                _wait_as_spare(theirs, module, key)
            finally:
                os._exit(1)
        theirs.close()
        return cls(ours)

    def take(self, connection: socket.socket, request: Request) -> bool:
        """Hand the launch to the spare; False if it is gone (the caller forks instead)."""
        message = len(request.payload).to_bytes(4, "big") + request.payload
        fds = [*request.fds, connection.fileno()]
        try:
            sent = self.channel.sendmsg(
                [message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())]
            )
            if sent < len(message):  # (sendall(b"") still sends: EPIPE once the spare has read and closed)
                self.channel.sendall(message[sent:])
            return True
        except OSError:
            return False
        finally:
            self.close()

    def close(self) -> None:
        self.channel.close()


def _wait_as_spare(channel: socket.socket, module: Any, key: str) -> None:
    from provider.plugin import launch

    if _serves_a_provider(module):
        # If this fails, the launch sets up everything itself (and reports what fails).
        with contextlib.suppress(Exception):
            launch.staged = launch.Staged()
    request = receive(channel, key, descriptors=4, timeout=None)
    channel.close()
    if request is None:  # the daemon exited
        _discard_staged()
        os._exit(0)
    connection = socket.socket(fileno=request.fds.pop())
    run_child(connection, request, module)


def run_child(connection: socket.socket, request: Request, module: Any) -> None:
    """Become this launch's provider process (never returns)."""
    import threading

    from provider.plugin import launch

    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for target, fd in enumerate(request.fds):
        os.dup2(fd, target)
    _close_fds(request.fds)
    os.environb.clear()
    os.environb.update(request.environ)
    os.chdir(request.cwd)
    os.umask(request.umask)
    sys.argv = request.argv

    def report(code: int) -> None:
        _send(connection, bytes([code & 0xFF]))

    def watch_launcher() -> None:
        # The launcher only waits for our code: EOF means it was killed; end this provider in order.
        connection.settimeout(None)
        with contextlib.suppress(OSError):
            connection.recv(1)
        os.kill(os.getpid(), signal.SIGTERM)

    launch.host_pid = None  # the daemon is our parent; the launcher's liveness is watched instead
    launch.on_exit = report
    threading.Thread(target=watch_launcher, name="warm-launcher-watch", daemon=True).start()
    try:
        module.main()
        report(0)
    except SystemExit as exc:
        report(exc.code if isinstance(exc.code, int) else 1)
    except BaseException:
        report(1)
    _discard_staged()  # a launch that ended before taking it (a failed handshake)
    os._exit(0)


def _serves_a_provider(module: Any) -> bool:
    """Whether the launch module serves through provider.plugin.launch (what `_warm_up` also builds)."""
    return hasattr(module, "make_server") or hasattr(module, "make_provider_server")


def _discard_staged() -> None:
    from provider.plugin import launch

    if launch.staged is not None:
        launch.staged.discard()
        launch.staged = None


def _send(connection: socket.socket, data: bytes) -> bool:
    try:
        connection.sendall(data)
        return True
    except OSError:
        return False


def _close_fds(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _reap_children() -> None:
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
