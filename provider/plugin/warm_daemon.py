"""The per-user warm daemon: imports the provider once, then hands each launch to a fresh child.

Started detached by the launcher (`warm_client`) on first use, with a scrubbed environment and
holding the flock of `warm-KEY-p2.lock` (one daemon per key; the file holds the daemon's pid). It
imports the gRPC server and the provider (and builds one throwaway provider server, which loads every
lazily imported module, and the launch module's own `WARM_IMPORTS`, e.g. the HTTP client a cold launch
imports only when configured), binds `warm-KEY-p2.sock` in the user's 0700 runtime directory and serves
until no launch was served for GPUCLOUD_PROVIDER_WARM_IDLE_S (default 300 s). On exit (idle, SIGTERM,
stale) it removes its socket and its lock file.

One thread, one `selectors` loop: connections are accepted and read without blocking, each within
REQUEST_TIMEOUT_S, so a stalled or slow launcher holds up no other launch. Per connection: the peer
must be this uid (SO_PEERCRED); the request carries the launcher's argv, environment and OS context.
If any imported source file changed since start-up (an upgrade in place), the daemon answers "stale",
removes its socket and exits; the launcher goes cold. Otherwise it answers "taken" and hands the
request and the connection to its spare: a child forked after the previous launch, which has set up
meanwhile what no launch depends on (`Spare`; if it died, a fresh one is forked), and forks the next
spare.

The child (`warm_child`) takes on the launcher's context and answers the launcher itself:
"accepted" once set up, or "refused" with the reason. Only then does the launcher send its stdio
(with "go"); the child takes those fds as 0/1/2 and runs the launch module's `main()` as a cold
launch would; it watches the connection (launcher gone: SIGTERM to itself, the provider's orderly
exit) and sends its exit code on it last. The daemon never runs provider code for a launch itself
and never serves RPCs, so a child inherits no per-launch state; killing the daemon leaves running
children serving to the end (and ends the waiting spare). Forks happen in the daemon's only thread.
"""

from __future__ import annotations

import array
import contextlib
import gc
import os
import selectors
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

from provider.plugin.warm_child import Request, parse_request, wait_as_spare
from provider.plugin.warm_client import (
    ACCEPTED,
    IDLE_ENV,
    STALE,
    TAKEN,
    lock_path,
    peer_uid,
    private_directory,
    runtime_directory,
    socket_path,
    take_lock,
)

DEFAULT_IDLE_S = 300.0
REQUEST_TIMEOUT_S = 2.0  # a launcher gives up after STEP_TIMEOUT_S anyway
SPARE_SEND_TIMEOUT_S = 1.0
MAX_REQUEST_BYTES = 4 * 1024 * 1024
MAX_PENDING = 256  # connections being read at once; more are closed (those launches run cold)
LOOP_TICK_S = 1.0
# Loaded by every launch after the handshake line; importing them here is what makes a launch warm.
WARM_IMPORTS = (
    "asyncio", "ssl", "logging", "concurrent.futures", "traceback", "provider.plugin.launch",
    "provider.plugin.http2", "provider.plugin.services", "provider.plugin.log",
    "provider.plugin.tls_terminator", "provider.plugin.selfsigned",
)


def main(launch_module: str, key: str, lock_fd: int | None = None) -> None:
    """Serve launches of `key` (the launcher passes the lock it took as `lock_fd`)."""
    directory = runtime_directory()
    if not private_directory(directory, create=True):
        return
    lock_file = lock_path(directory, key)
    lock = take_lock(lock_file) if lock_fd is None else lock_fd
    if lock is None:
        return  # another daemon for this key runs (or is starting)
    os.set_inheritable(lock, False)
    path = socket_path(directory, key)
    signal.signal(signal.SIGTERM, _exit_on_signal)
    signal.signal(signal.SIGINT, _exit_on_signal)
    daemon: Daemon | None = None
    bound: tuple[int, int] | None = None
    try:
        os.ftruncate(lock, 0)
        os.write(lock, str(os.getpid()).encode())  # for people (and tests) who want to stop it
        module = _warm_up(launch_module)
        fingerprint = source_fingerprint()
        listener = _listen(path)
        info = os.stat(path)
        bound = (info.st_dev, info.st_ino)
        idle_s = float(os.environ.get(IDLE_ENV) or DEFAULT_IDLE_S)
        daemon = Daemon(listener, module, key=key, fingerprint=fingerprint, idle_s=idle_s, lock=lock,
                        path=path, bound=bound)
        daemon.serve()
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the clean-up runs to its end
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if daemon is not None:
            daemon.close()
        if bound is not None:
            _unlink_if(path, bound)
        _unlink_if(lock_file, _identity(lock))  # still locked: whoever locks this file next sees it gone
        os.close(lock)


def _exit_on_signal(_signo: int, _frame: object) -> None:
    raise SystemExit(0)


def _identity(fd: int) -> tuple[int, int]:
    info = os.fstat(fd)
    return info.st_dev, info.st_ino


def _unlink_if(path: str, identity: tuple[int, int]) -> None:
    """Remove `path` if it is still the file we made (a new daemon may own that name by now)."""
    with contextlib.suppress(OSError):
        info = os.stat(path)
        if (info.st_dev, info.st_ino) == identity:
            os.unlink(path)


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
    listener.listen(128)
    listener.setblocking(False)
    return listener


class _Reading:
    """A launcher's connection whose request is still arriving."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.data = bytearray()


_STOP = object()  # a handler's answer: the daemon exits (stale)


class Daemon:
    """The accept loop: reads requests without blocking and hands each, whole, to a spare."""

    def __init__(self, listener: socket.socket, module: Any, *, key: str,
                 fingerprint: dict[str, tuple[int, int]], idle_s: float, lock: int, path: str,
                 bound: tuple[int, int]) -> None:
        self.listener, self.module, self.key = listener, module, key
        self.fingerprint, self.idle_s, self.lock = fingerprint, idle_s, lock
        self.path, self.bound = path, bound  # the socket's name and the file bind() made there
        self.selector = selectors.DefaultSelector()
        self.selector.register(listener, selectors.EVENT_READ, self._accept)
        self.reading: dict[socket.socket, _Reading] = {}
        self.held: set[socket.socket] = set()  # every socket of ours a forked spare must close
        self.spare: Spare | None = None
        self.last_served = time.monotonic()

    def serve(self) -> None:
        while time.monotonic() - self.last_served < self.idle_s:
            _reap_children()
            if self.spare is None:
                self.spare = self._fork_spare()
            for key, _events in self.selector.select(self._timeout()):
                handler: Callable[[Any], object] = key.data
                if handler(key.fileobj) is _STOP:
                    return
            self._expire()

    def _timeout(self) -> float:
        now = time.monotonic()
        until = min([self.last_served + self.idle_s, now + LOOP_TICK_S,
                     *(reading.deadline for reading in self.reading.values())])
        return max(until - now, 0.0)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # e.g. out of descriptors: those launchers time out and run cold
                return
            try:
                if peer_uid(connection) != os.getuid() or len(self.reading) >= MAX_PENDING:
                    connection.close()  # another user's process: never read it
                    continue
            except OSError:
                connection.close()
                continue
            connection.setblocking(False)
            self.reading[connection] = _Reading(time.monotonic() + REQUEST_TIMEOUT_S)
            self.held.add(connection)
            self.selector.register(connection, selectors.EVENT_READ, self._read)

    def _read(self, connection: socket.socket) -> object:
        reading = self.reading[connection]
        try:
            while True:
                chunk = connection.recv(65536)
                if not chunk:
                    self._drop(connection)  # the launcher gave up (or never meant it)
                    return None
                reading.data += chunk
                if len(reading.data) >= 4 and int.from_bytes(reading.data[:4], "big") > MAX_REQUEST_BYTES:
                    self._drop(connection)
                    return None
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self._drop(connection)
            return None
        if len(reading.data) < 4 or len(reading.data) - 4 < int.from_bytes(reading.data[:4], "big"):
            return None
        self.selector.unregister(connection)
        del self.reading[connection]
        try:
            request = parse_request(bytes(reading.data[4:]))
            if request.key != self.key:
                raise ValueError("another key")
        except (ValueError, UnicodeDecodeError):
            self._close(connection)
            return None
        try:
            return self._dispatch(connection, request)
        finally:
            self._close(connection)  # the child has its own copy of the connection

    def _dispatch(self, connection: socket.socket, request: Request) -> object:
        if not _unchanged(self.fingerprint):
            _unlink_if(self.path, self.bound)
            with contextlib.suppress(OSError):
                connection.send(STALE)  # the socket is gone first: the launcher may start a fresh daemon
            return _STOP
        try:
            connection.send(TAKEN)  # before the child's answer: the launcher now waits for that
        except OSError:
            return None  # that launcher gave up already (it runs cold)
        spare, self.spare = self.spare or self._fork_spare(), None
        if spare is None or not spare.take(connection, request):  # died or wedged: a fresh one takes it
            spare = self._fork_spare()
            if spare is None or not spare.take(connection, request):
                return None  # closing the connection sends that launcher down the cold path
        self.held.add(spare.channel)
        self.selector.register(spare.channel, selectors.EVENT_READ, self._verdict)
        return None

    def _verdict(self, channel: socket.socket) -> None:
        """A child says whether it serves its launch: only served launches keep the daemon alive."""
        try:
            answer = channel.recv(1)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            answer = b""
        if answer == ACCEPTED:
            self.last_served = time.monotonic()
        self.selector.unregister(channel)
        self._close(channel)

    def _expire(self) -> None:
        now = time.monotonic()
        for connection, reading in list(self.reading.items()):
            if reading.deadline <= now:
                self._drop(connection)

    def _drop(self, connection: socket.socket) -> None:
        self.selector.unregister(connection)
        del self.reading[connection]
        self._close(connection)

    def _close(self, sock: socket.socket) -> None:
        self.held.discard(sock)
        sock.close()

    def _fork_spare(self) -> Spare | None:
        try:
            return Spare.fork(self)
        except OSError:  # no process or descriptor to spare now (a limit): launches run cold meanwhile
            return None

    def close_in_child(self) -> None:
        """In a forked spare: close every socket and fd of the daemon's, so that no launcher waits
        on a copy of its connection held by an unrelated child, and no spare outlives the daemon."""
        for sock in self.held:
            sock.close()
        if self.spare is not None:
            self.spare.channel.close()
        self.listener.close()
        self.selector.close()
        os.close(self.lock)  # the daemon's flock: a child outliving it must not block the next daemon

    def close(self) -> None:
        for sock in list(self.held):
            self._close(sock)
        if self.spare is not None:
            self.spare.channel.close()  # a waiting spare sees the daemon go and cleans up
            self.spare = None
        self.selector.close()
        self.listener.close()


class Spare:
    """A child forked ahead of the next launch, which sets up what does not depend on it meanwhile.

    A launch's private directory, server certificate, TLS relay and gRPC server (`launch.Staged`,
    ~10 ms) do not depend on the host that launches it, so a spare builds them while nobody waits,
    then blocks until the daemon hands it a launch (the launcher's request and connection, over a
    socket pair). It serves that one launch only: nothing it set up is shared. When the daemon exits,
    the pair closes, and a spare still waiting removes its directory and exits.
    """

    def __init__(self, channel: socket.socket, pid: int) -> None:
        self.channel, self.pid = channel, pid

    @classmethod
    def fork(cls, daemon: Daemon) -> Spare:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError:
            ours.close()
            theirs.close()
            raise
        if pid == 0:
            try:
                daemon.close_in_child()
                ours.close()
                wait_as_spare(theirs, daemon.module, daemon.key)
            finally:
                os._exit(1)
        theirs.close()
        return cls(ours, pid)

    def take(self, connection: socket.socket, request: Request) -> bool:
        """Hand the launch to the spare; False if it is gone or wedged (the caller forks instead)."""
        message = len(request.payload).to_bytes(4, "big") + request.payload
        fds = array.array("i", [connection.fileno()]).tobytes()
        try:
            self.channel.settimeout(SPARE_SEND_TIMEOUT_S)
            sent = self.channel.sendmsg([message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
            if sent < len(message):  # (sendall(b"") still sends: EPIPE once the spare has read and closed)
                self.channel.sendall(message[sent:])
            self.channel.setblocking(False)  # from now on the daemon only reads its verdict
            return True
        except TimeoutError:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)  # not reaped yet (only the loop reaps): still its pid
        except OSError:
            pass
        self.channel.close()
        return False


def _reap_children() -> None:
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
