"""The provider launcher's warm path: hand this launch to a pre-imported per-user daemon.

Terraform starts a provider 3-4 times per command, and a cold Python launch spends ~0.1-0.3 s
importing grpcio and the provider before its first RPC. The launcher instead connects to a daemon
(`provider.plugin.warm_daemon`) that has imported everything once, and hands it this process's
stdin/stdout/stderr (SCM_RIGHTS), argv, environment, working directory and umask. The daemon forks a
fresh child that *is* the provider for this launch: it prints the handshake line on Terraform's
stdout and serves with its own configuration, so concurrent runs never share provider state.

The launcher then only waits: the child sends its exit code over the connection before exiting, and
the child exits as soon as the connection closes, so killing the launcher (Terraform's SIGKILL after
a failed Shutdown) brings the child down. If the launcher's own parent dies it exits too, as a cold
provider would.

Safety: the socket lives in a 0700 directory that must belong to this user, and both sides check the
peer's uid (SO_PEERCRED). The socket's name carries a key of the provider version, launch module,
interpreter and import paths, so another version never reaches a stale daemon. Anything unexpected
before the daemon accepts (no directory, no daemon, refused, stale) falls back to the cold path in
this process; a daemon is started in the background for the next launches. After the daemon has
accepted, the launch is the child's: a lost connection is exit code 1, never a second handshake.

GPUCLOUD_PROVIDER_WARM=0 selects the cold path. Only modules the interpreter already holds, plus
`_socket` and `_signal` (built in, ~0.2 ms), are imported on the warm path.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # `typing` costs ~4 ms to import; mypy treats this name as True
if TYPE_CHECKING:
    import _socket

WARM_ENV = "GPUCLOUD_PROVIDER_WARM"  # "0": cold path only
IDLE_ENV = "GPUCLOUD_PROVIDER_WARM_IDLE_S"  # daemon exits after this many idle seconds
PROTOCOL = b"gpucloud-warm-1"
ACCEPTED = b"A"
STALE = b"S"
DAEMON_START_WAIT_S = 5.0  # a launch that started the daemon waits this long for it, then goes cold
DAEMON_LOCK_GRACE_S = 1.0  # after this, a free lock means the daemon we started died: stop waiting
PARENT_CHECK_INTERVAL_S = 1.0
MAX_SOCKET_PATH = 107  # sun_path is 108 bytes on Linux, NUL included
_SO_PEERCRED = 17  # Linux; the `socket` module that names it costs ~5 ms to import


def runtime_directory(environ: dict[str, str] | os._Environ[str] | None = None) -> str:
    """The per-user directory of daemon sockets: under XDG_RUNTIME_DIR, else TMPDIR (or /tmp)."""
    env = os.environ if environ is None else environ
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime:
        return os.path.join(runtime, "gpucloud-provider")
    return os.path.join(env.get("TMPDIR") or "/tmp", f"gpucloud-provider-{os.getuid()}")


def private_directory(path: str, *, create: bool) -> bool:
    """Whether `path` is a real directory owned by this user with no access for anyone else."""
    if create:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError:
            return False
    try:
        info = os.lstat(path)
    except OSError:
        return False
    is_dir = (info.st_mode & 0o170000) == 0o040000
    return is_dir and info.st_uid == os.getuid() and info.st_mode & 0o077 == 0


def socket_path(directory: str, key: str) -> str:
    return os.path.join(directory, f"warm-{key}.sock")


def lock_path(directory: str, key: str) -> str:
    return os.path.join(directory, f"warm-{key}.lock")


def peer_uid(sock: _socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket (struct ucred: pid, uid, gid)."""
    import _socket

    credentials = sock.getsockopt(_socket.SOL_SOCKET, _SO_PEERCRED, 12)
    return int.from_bytes(credentials[4:8], sys.byteorder)


def encode_request(key: str) -> bytes:
    """PROTOCOL, key, cwd, umask, argv and environment as NUL-separated fields behind a length."""
    umask = os.umask(0o022)
    os.umask(umask)
    fields = [PROTOCOL, key.encode(), os.getcwd().encode("utf-8", "surrogateescape"), b"%d" % umask,
              b"%d" % len(sys.argv)]
    fields += [os.fsencode(arg) for arg in sys.argv]
    fields += [name + b"=" + value for name, value in os.environb.items()]
    payload = b"\0".join(fields)
    return len(payload).to_bytes(4, "big") + payload


def launch(launch_module: str, key: str, paths: list[str]) -> None:
    """Serve this launch warm if possible, else cold (`launch_module.main()`) in this process."""
    # Terraform launches with no arguments; a person running `--debug` or `install` gets the cold path.
    if os.environ.get(WARM_ENV, "1") != "0" and len(sys.argv) <= 1:
        code = _launch_warm(launch_module, key, paths)
        if code is not None:
            os._exit(code)
    __import__(launch_module, fromlist=["main"]).main()


def _launch_warm(launch_module: str, key: str, paths: list[str]) -> int | None:
    """The child's exit code, or None when nothing was handed over (the caller goes cold)."""
    import _signal  # type: ignore[import-not-found]  # `signal` would import `enum` (~4 ms)

    # Ctrl-C reaches the whole process group and a provider ignores it (Terraform sends StopProvider
    # instead); ignored from the start, as the child may print its handshake before our reply comes.
    _signal.signal(_signal.SIGINT, _signal.SIG_IGN)
    directory = runtime_directory()
    if not private_directory(directory, create=True):
        return None
    path = socket_path(directory, key)
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        return None
    connection = _connect(path)
    if connection is None:
        if not _start_daemon(launch_module, key, paths, directory):
            return None
        connection = _wait_for_daemon(path, lock_path(directory, key))
        if connection is None:
            return None
    try:
        return _hand_over(connection, key)
    finally:
        connection.close()


def _connect(path: str) -> _socket.socket | None:
    import _socket

    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.connect(path)
        if peer_uid(sock) == os.getuid():
            return sock
    except OSError:
        pass
    sock.close()
    return None


def _wait_for_daemon(path: str, lock: str) -> _socket.socket | None:
    import time

    started = time.monotonic()
    while time.monotonic() - started < DAEMON_START_WAIT_S:
        time.sleep(0.01)
        connection = _connect(path)
        if connection is not None:
            return connection
        if time.monotonic() - started > DAEMON_LOCK_GRACE_S and not _locked(lock):
            return None  # the daemon failed to start (it takes the lock first thing): go cold now
    return None


def _locked(path: str) -> bool:
    """Whether some process holds the flock on `path` (a daemon starting or serving)."""
    import fcntl

    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing drops our lock, if we got it
    return False


def _hand_over(connection: _socket.socket, key: str) -> int | None:
    import _socket

    request = encode_request(key)
    fds = b"".join(fd.to_bytes(4, sys.byteorder) for fd in (0, 1, 2))
    try:
        sent = connection.sendmsg([request], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fds)])
        connection.sendall(request[sent:])
        reply = connection.recv(1)
    except OSError:
        return None
    if reply != ACCEPTED:
        return None  # refused, stale (that daemon is exiting) or gone: cold this time
    return _wait_for_exit_code(connection)  # committed: the child owns Terraform's stdio now


def _wait_for_exit_code(connection: _socket.socket) -> int:
    host = os.getppid()
    connection.settimeout(PARENT_CHECK_INTERVAL_S)
    while True:
        try:
            data = connection.recv(1)
        except TimeoutError:
            if os.getppid() != host:
                return 1  # Terraform is gone; closing the connection ends the child
            continue
        except OSError:
            return 1
        return data[0] if data else 1  # no code: the child died without reporting


def _start_daemon(launch_module: str, key: str, paths: list[str], directory: str) -> bool:
    """Start the daemon for `key` detached (unless one is starting: it holds the lock); True if any."""
    lock = lock_path(directory, key)
    try:
        os.close(os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
    except OSError:
        return False
    if _locked(lock):
        return True  # a daemon holds the lock: it is starting, or listening on a fresh socket
    code = (f"import sys; sys.path += {paths!r}; from provider.plugin.warm_daemon import main; "
            f"main({launch_module!r}, {key!r})")
    # Only what the daemon needs: no credentials or TF_* variables of this run linger in it.
    env = {name: os.environ[name] for name in ("PATH", "HOME", "TMPDIR", "XDG_RUNTIME_DIR", IDLE_ENV)
           if name in os.environ}
    first = os.fork()
    if first:
        os.waitpid(first, 0)
        return True
    try:  # double fork: the daemon is nobody's child and in its own session (no terminal signals)
        os.setsid()
        if os.fork():
            os._exit(0)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)  # never hold Terraform's pipes: it waits for their EOF
        os.closerange(3, 65536)
        os.chdir("/")  # never pin the directory of the Terraform run that happened to start it
        flags = ["-I", "-S"]
        # The launcher's bytecode settings (a registry package writes none into its own directory:
        # lock files hold that directory's hash).
        if sys.dont_write_bytecode:
            flags.append("-B")
        if sys.pycache_prefix:
            flags += ["-X", f"pycache_prefix={sys.pycache_prefix}"]
        os.execve(sys.executable, [sys.executable, *flags, "-c", code], env)
    finally:
        os._exit(127)
