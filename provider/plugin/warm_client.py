"""The provider launcher's warm path: hand this launch to a pre-imported per-user daemon.

Terraform starts a provider 3-4 times per command, and a cold Python launch spends ~0.1-0.3 s
importing the provider before its first RPC. The launcher instead connects to a daemon
(`provider.plugin.warm_daemon`) that has imported everything once, and sends it this process's
argv, environment and OS context (`launch_context`). The daemon hands the launch to a fresh child,
which takes on that context (working directory, umask, environment and time zone, niceness,
scheduling policy, CPU affinity, OOM score, resource limits) and checks what it cannot take on
(uids, gids and groups, capabilities, seccomp, LSM label, cgroup, namespaces, root directory,
encodings). Only a child that has exactly the launcher's context answers "accepted"; any other
answers "refused" with the reason.

Hand-over, in steps, each with a timeout of STEP_TIMEOUT_S:

1. launcher -> daemon: connect and send the request (no descriptors); daemon -> launcher: "K" once it
   has read the request and is handing it to a child (a stopped or wedged daemon sends nothing);
2. child -> launcher: "A" once it has taken on this launch's context, or "R" + reason;
3. launcher -> child: "G" with this process's stdin/stdout/stderr (SCM_RIGHTS). Sending it commits
   the launch to the child: it then prints the handshake line on Terraform's stdout and serves with
   its own configuration, and sends its exit code over the connection last.

Until step 3 nothing of Terraform's stdio has left this process, so a refusal, a timeout (a stopped
daemon: ~1 s; a wedged child: ~2 s), a closed connection or anything unexpected falls back to the cold
path in this process, invisibly to Terraform; a child that gets no "G" (this launcher gave up) exits
without a trace. After step 3 a lost connection is exit code 1, never a second handshake. The
launcher then only waits for the exit code; the child exits as soon as the connection closes (the
launcher killed), and the launcher exits when its own parent dies, as a cold provider would.

Safety: the socket lives in a 0700 directory that must belong to this user, and both sides check the
peer's uid (SO_PEERCRED). The socket's name carries a key of the provider installation (version,
launch module, interpreter), so another version never reaches a stale daemon. A launch that finds no
daemon starts one in the background and runs cold itself (never waiting for the daemon's imports).

GPUCLOUD_PROVIDER_WARM=0 selects the cold path; so does a platform other than Linux. Only modules the
interpreter already holds, plus `_socket`, `_signal` and `_locale` (built in, ~0.2 ms), are imported
on the warm path.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # `typing` costs ~4 ms to import; mypy treats this name as True
if TYPE_CHECKING:
    import _socket

WARM_ENV = "GPUCLOUD_PROVIDER_WARM"  # "0": cold path only
IDLE_ENV = "GPUCLOUD_PROVIDER_WARM_IDLE_S"  # daemon exits after this many seconds without a served launch
PROTOCOL = b"gpucloud-warm-2"
_PROTOCOL_TAG = "p2"
TAKEN = b"K"  # daemon -> launcher: request read, a child is taking it on
ACCEPTED = b"A"  # child -> launcher: set up with this launch's context, waiting for GO
REFUSED = b"R"  # child -> launcher, followed by the reason: this launch runs cold
STALE = b"S"  # daemon -> launcher: its provider files changed, it is exiting
GO = b"G"  # launcher -> child, with stdin/stdout/stderr: the launch is the child's
STEP_TIMEOUT_S = 1.0  # each step of the hand-over; then the launch runs cold
PARENT_CHECK_INTERVAL_S = 1.0
MAX_SOCKET_PATH = 107  # sun_path is 108 bytes on Linux, NUL included
_SO_PEERCRED = 17  # Linux; the `socket` module that names it costs ~5 ms to import
# What a process sees of its namespaces; `*_for_children` is what its children get (a cold launch is
# the launcher itself, so the child must match both).
NAMESPACES = ("cgroup", "ipc", "mnt", "net", "pid", "pid_for_children", "time", "time_for_children",
              "user", "uts")
_OPTIONAL_PROC = ("ns/time", "ns/time_for_children", "attr/current")  # absent on some kernels


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
    # The protocol is in the name: a launcher never reaches a daemon that would not understand it (and
    # could not even tell it that it is stale).
    return os.path.join(directory, f"warm-{key}-{_PROTOCOL_TAG}.sock")


def lock_path(directory: str, key: str) -> str:
    return os.path.join(directory, f"warm-{key}-{_PROTOCOL_TAG}.lock")


def peer_uid(sock: _socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket (struct ucred: pid, uid, gid)."""
    import _socket

    credentials = sock.getsockopt(_socket.SOL_SOCKET, _SO_PEERCRED, 12)
    return int.from_bytes(credentials[4:8], sys.byteorder)


def take_lock(path: str) -> int | None:
    """An fd holding the flock on `path` (created if missing), or None while another process holds it.

    The daemon removes its lock file on exit while still holding it; whoever locked that unlinked
    file meanwhile sees that it is no longer the one at `path` and tries again.
    """
    import fcntl

    for _ in range(5):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None
        try:
            mine, there = os.fstat(fd), os.stat(path)
            if (mine.st_dev, mine.st_ino) == (there.st_dev, there.st_ino):
                return fd
        except OSError:
            pass
        os.close(fd)
    return None


def _read_proc(name: str) -> bytes:
    """/proc/self/NAME, NULs dropped (the separator of the request); b"" where the kernel has none."""
    try:
        fd = os.open("/proc/self/" + name, os.O_RDONLY | os.O_CLOEXEC)
        try:
            return os.read(fd, 65536).replace(b"\0", b"")
        finally:
            os.close(fd)
    except OSError:
        if name in _OPTIONAL_PROC:
            return b""
        raise


def _namespace(name: str) -> bytes:
    try:
        return os.fsencode(os.readlink("/proc/self/ns/" + name))
    except OSError:
        if "ns/" + name in _OPTIONAL_PROC:
            return b""
        raise


def launch_context() -> list[bytes] | None:
    """This process's OS context as `name=value` items, or None where it cannot be read (no /proc,
    a working directory that is gone): then the launch runs cold. About 0.1 ms, no imports."""
    import _locale  # type: ignore[import-not-found,unused-ignore]  # built in: `locale` imports `re`

    try:
        here, root = os.stat("."), os.stat("/")
        umask = os.umask(0o022)
        os.umask(umask)
        text_encoding = "utf-8" if sys.flags.utf8_mode else _locale.nl_langinfo(_locale.CODESET)
        items = [
            b"cwd=" + os.getcwdb(),
            b"cwd_id=%d:%d" % (here.st_dev, here.st_ino),
            b"root_id=%d:%d" % (root.st_dev, root.st_ino),
            b"umask=%d" % umask,
            b"nice=%d" % os.getpriority(os.PRIO_PROCESS, 0),
            b"sched=%d:%d" % (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority),
            b"affinity=" + b",".join(b"%d" % cpu for cpu in sorted(os.sched_getaffinity(0))),
            f"encoding={sys.getfilesystemencoding()},{sys.getfilesystemencodeerrors()},{text_encoding}"
            .encode(),
            b"oom_score_adj=" + _read_proc("oom_score_adj").strip(),
            b"lsm=" + _read_proc("attr/current").strip(),
            b"cgroup=" + _read_proc("cgroup"),
            b"limits=" + _read_proc("limits"),
            b"status=" + _read_proc("status"),
        ]
        items += [b"ns." + name.encode() + b"=" + _namespace(name) for name in NAMESPACES]
    except (OSError, AttributeError):  # AttributeError: an os without sched_* (not Linux)
        return None
    return items


def encode_request(key: str, context: list[bytes] | None = None) -> bytes | None:
    """PROTOCOL, key, context, argv and environment as NUL-separated fields behind a length; None
    where this process's context cannot be read."""
    if context is None:
        context = launch_context()
        if context is None:
            return None
    fields = [PROTOCOL, key.encode(), b"%d" % len(context), *context, b"%d" % len(sys.argv)]
    fields += [os.fsencode(arg) for arg in sys.argv]
    fields += [name + b"=" + value for name, value in os.environb.items()]
    payload = b"\0".join(fields)
    return len(payload).to_bytes(4, "big") + payload


def launch(launch_module: str, key: str, paths: list[str]) -> None:
    """Serve this launch warm if possible, else cold (`launch_module.main()`) in this process."""
    # Terraform launches with no arguments; a person running `--debug` or `install` gets the cold path.
    if os.environ.get(WARM_ENV, "1") != "0" and len(sys.argv) <= 1 and sys.platform == "linux":
        code = _launch_warm(launch_module, key, paths)
        if code is not None:
            os._exit(code)
    __import__(launch_module, fromlist=["main"]).main()


def _launch_warm(launch_module: str, key: str, paths: list[str]) -> int | None:
    """The child's exit code, or None when nothing was handed over (the caller goes cold)."""
    import _signal  # type: ignore[import-not-found]  # `signal` would import `enum` (~4 ms)
    import time

    # Ctrl-C reaches the whole process group and a provider ignores it (Terraform sends StopProvider
    # instead); ignored from the start, as the child may print its handshake before our reply comes.
    _signal.signal(_signal.SIGINT, _signal.SIG_IGN)
    directory = runtime_directory()
    if not private_directory(directory, create=True):
        return None
    path = socket_path(directory, key)
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        return None
    request = encode_request(key)
    if request is None:
        return None
    deadline = time.monotonic() + STEP_TIMEOUT_S
    connection, no_daemon = _connect(path, deadline)
    if no_daemon:
        _start_daemon(launch_module, key, paths, directory)
        return None  # this launch runs cold meanwhile: never wait for the daemon's imports
    if connection is None:
        return None
    try:
        return _hand_over(connection, request, deadline)
    finally:
        connection.close()


def _connect(path: str, deadline: float) -> tuple[_socket.socket | None, bool]:
    """A connection to this user's daemon, else None and whether no daemon listens there at all (as
    opposed to one that does not answer in time, or not ours)."""
    import _socket
    import time

    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        sock.connect(path)
        if peer_uid(sock) == os.getuid():
            return sock, False
    except (FileNotFoundError, ConnectionRefusedError):
        sock.close()
        return None, True
    except OSError:  # a timeout, a full backlog (EAGAIN: the daemon is stopped or swamped)
        pass
    sock.close()
    return None, False


def _hand_over(connection: _socket.socket, request: bytes, deadline: float) -> int | None:
    import _socket
    import time

    try:
        connection.settimeout(max(deadline - time.monotonic(), 0.001))
        connection.sendall(request)
        connection.settimeout(max(deadline - time.monotonic(), 0.001))
        if connection.recv(1) != TAKEN:
            return None  # stale (that daemon is exiting), or not ours to serve
        connection.settimeout(STEP_TIMEOUT_S)
        reply = connection.recv(4096)
    except OSError:
        return None  # a timeout (the daemon or its child stopped or wedged) or gone: cold this time
    if reply != ACCEPTED:
        if reply.startswith(REFUSED):
            _log_refusal(reply[1:])
        return None  # refused or closed
    fds = b"".join(fd.to_bytes(4, sys.byteorder) for fd in (0, 1, 2))
    try:
        connection.settimeout(STEP_TIMEOUT_S)
        connection.sendmsg([GO], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fds)])
    except OSError:
        return None  # the child is gone: it never had our stdio
    return _wait_for_exit_code(connection)  # committed: the child owns Terraform's stdio now


def _log_refusal(reason: bytes) -> None:
    """One hclog JSON line at debug level on stderr (Terraform shows it with TF_LOG=debug)."""
    import time

    text = reason.decode("ascii", "replace").replace("\\", "\\\\").replace('"', '\\"')
    text = "".join(char if " " <= char < "\x7f" else "?" for char in text)
    now = time.time()
    stamp = f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(now))}.{int(now % 1 * 1e6):06d}Z"
    line = (f'{{"@level":"debug","@message":"warm launch refused, serving cold: {text}",'
            f'"@module":"gpucloud.warm","@timestamp":"{stamp}"}}\n')
    try:
        os.write(2, line.encode())
    except OSError:
        return  # no stderr: nobody to tell


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


def _start_daemon(launch_module: str, key: str, paths: list[str], directory: str) -> None:
    """Start the daemon for `key` detached, unless one holds the lock (starting, or listening)."""
    code = (f"import sys; sys.path += {paths!r}; from provider.plugin.warm_daemon import main; "
            f"main({launch_module!r}, {key!r}, lock_fd=3)")
    # Only what the daemon needs: no credentials or TF_* variables of this run linger in it.
    env = {name: os.environ[name] for name in ("PATH", "HOME", "TMPDIR", "XDG_RUNTIME_DIR", IDLE_ENV)
           if name in os.environ}
    try:
        first = os.fork()
    except OSError:
        return
    if first:
        os.waitpid(first, 0)
        return
    try:  # double fork: the daemon is nobody's child and in its own session (no terminal signals)
        os.setsid()
        if os.fork():
            os._exit(0)
        lock = take_lock(lock_path(directory, key))  # here, not in the daemon: no interpreter starts in vain
        if lock is None:
            os._exit(0)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)  # never hold Terraform's pipes: it waits for their EOF
        os.dup2(lock, 3)
        os.set_inheritable(3, True)  # the flock goes with it across exec (dup2 onto itself keeps CLOEXEC)
        os.closerange(4, 65536)
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
