"""A child of the warm daemon: the spare that waits for a launch, takes on its launcher's OS context,
agrees with the launcher on who serves the launch, and then serves it (provider.plugin.warm_daemon
forks it; provider.plugin.warm_client is the other end).

`wait_as_spare`: set up what no launch depends on (`launch.Staged`), wait for the daemon to hand over
a launch (the request and the launcher's connection), `take_on` the launcher's context, answer the
launcher "accepted" (or "refused" + reason, and exit), wait for its "go" with its stdin, stdout and
stderr (or EOF: it gave up and runs cold; exit), tell the daemon, and `run_child`: serve the launch
as a cold launch would. Nothing touches the launcher's stdio before "go".

The context: the launcher sends what `warm_client.launch_context` reads of itself; the child (a fork
of the warm daemon, so with the daemon's context) compares and applies it in `take_on`, before it
answers "accepted". A cold launch *is* the launcher process, so the rule is: the child must end up
with exactly the launcher's context.

Applied (a launch may differ from the daemon here):
- working directory (by path, then checked to be the same directory: a path missing or another
  directory in the daemon's mount namespace refuses), umask, environment (the time zone re-read from
  TZ, the C locale's LC_CTYPE re-set from it);
- scheduling policy, niceness and CPU affinity, on every thread (the spare's set-up runs threads, and
  Linux keeps these per thread): raising niceness always works, lowering it only with privilege;
- OOM score adjustment; resource limits (lowering always works, raising a hard limit only with
  privilege) except those below;
- cgroup membership: the child moves itself into the launcher's cgroups, where it may (root may; an
  unprivileged user may within a delegated subtree, not into another login session's scope).

Compared (any difference refuses):
- uids, gids and supplementary groups, capability sets, no_new_privs, seccomp mode and filter count,
  the LSM label;
- namespaces (cgroup, ipc, mnt, net, pid, pid_for_children, time, time_for_children, user, uts)
  and the root directory;
- the stack, address-space and data limits (the stack is laid out at exec, and a forked child
  already holds the daemon's imports: lowering these would not give what a cold process gets);
- file system and text encodings (fixed when the interpreter starts).
"""

from __future__ import annotations

import codecs
import contextlib
import locale
import os
import resource
import signal
import socket
import sys
import time
from typing import Any

from provider.plugin.warm_client import ACCEPTED, GO, NAMESPACES, PROTOCOL, REFUSED, launch_context

COMPARED = ("root_id", "lsm", *(f"ns.{name}" for name in NAMESPACES))
STATUS_COMPARED = ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs",
                   "Seccomp", "Seccomp_filters")
# /proc/self/limits names the limits; the kernel prints them as "%-25s %-20s %-20s %-10s".
LIMITS = {
    "Max cpu time": resource.RLIMIT_CPU,
    "Max file size": resource.RLIMIT_FSIZE,
    "Max data size": resource.RLIMIT_DATA,
    "Max stack size": resource.RLIMIT_STACK,
    "Max core file size": resource.RLIMIT_CORE,
    "Max resident set": resource.RLIMIT_RSS,
    "Max processes": resource.RLIMIT_NPROC,
    "Max open files": resource.RLIMIT_NOFILE,
    "Max locked memory": resource.RLIMIT_MEMLOCK,
    "Max address space": resource.RLIMIT_AS,
    "Max file locks": 10,  # RLIMIT_LOCKS on Linux; the resource module does not name it
    "Max pending signals": resource.RLIMIT_SIGPENDING,
    "Max msgqueue size": resource.RLIMIT_MSGQUEUE,
    "Max nice priority": resource.RLIMIT_NICE,
    "Max realtime priority": resource.RLIMIT_RTPRIO,
    "Max realtime timeout": resource.RLIMIT_RTTIME,
}
COMPARED_LIMITS = ("Max stack size", "Max address space", "Max data size")
DESCRIPTOR_HEADROOM = 3  # the launcher's stdin/stdout/stderr still have to arrive


class Refused(Exception):
    """This child cannot have the launcher's context; the message says why (one line, ASCII)."""


def parse_context(items: list[bytes]) -> dict[str, bytes]:
    context: dict[str, bytes] = {}
    for item in items:
        name, _, value = item.partition(b"=")
        context[name.decode("ascii", "replace")] = value
    return context


def take_on(sent: dict[str, bytes], environ: dict[bytes, bytes]) -> str | None:
    """Give this process the launcher's context `sent` and environment; None when done, else the reason
    it cannot (this process must then not serve the launch)."""
    try:
        own_items = launch_context()
        if own_items is None:
            raise Refused("the daemon cannot read its own context")
        if os.readlink("/proc/self") != str(os.getpid()):  # thread ids below are this /proc's
            raise Refused("/proc is not the daemon's pid namespace's")
        own = parse_context(own_items)
        _compare(sent, own)
        _join_cgroups(sent, own)  # before the CPUs: a cpuset limits which ones may be set
        _apply_scheduling(sent, own)
        _apply_oom_score(sent, own)
        _apply_limits(sent, own)
        _apply_directory(sent)
        os.umask(int(sent["umask"]))
        os.environb.clear()
        os.environb.update(environ)
        time.tzset()  # TZ as the launcher has it (unset: /etc/localtime, the same file here)
        with contextlib.suppress(locale.Error):
            locale.setlocale(locale.LC_CTYPE, "")  # what the interpreter did at a cold start
        _compare_encodings(sent)
        _check_descriptors()
    except Refused as exc:
        return str(exc)
    except (KeyError, ValueError, OSError) as exc:
        return f"unexpected context: {exc!r}"
    return None


def _compare(sent: dict[str, bytes], own: dict[str, bytes]) -> None:
    for name in COMPARED:
        if sent.get(name) != own.get(name):
            raise Refused(f"{name} differs from the daemon's")
    theirs, ours = _status(sent["status"]), _status(own["status"])
    for field in STATUS_COMPARED:
        if theirs.get(field) != ours.get(field):
            raise Refused(f"{field} differs from the daemon's")
    limits, our_limits = _limits(sent["limits"]), _limits(own["limits"])
    for name in COMPARED_LIMITS:
        if limits.get(name) != our_limits.get(name):
            raise Refused(f"limit '{name}' differs from the daemon's")


def _join_cgroups(sent: dict[str, bytes], own: dict[str, bytes]) -> None:
    """Move this process into the launcher's cgroups where they differ (what a child of the launcher
    would be in); refused where this process may not (an unprivileged user's other session scope)."""
    if sent["cgroup"] == own["cgroup"]:
        return
    mounts = _cgroup_mounts()
    ours = set(own["cgroup"].decode("utf-8", "surrogateescape").splitlines())
    for line in sent["cgroup"].decode("utf-8", "surrogateescape").splitlines():
        if line in ours:
            continue
        _hierarchy, controllers, path = line.split(":", 2)
        mount = _mount_of(mounts, controllers)
        if mount is None or not (path + "/").startswith(mount[0].rstrip("/") + "/"):
            raise Refused(f"cgroup {line} differs from the daemon's and is not mounted here")
        directory = os.path.join(mount[1], path[len(mount[0].rstrip("/")):].lstrip("/"))
        try:
            fd = os.open(os.path.join(directory, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(fd, b"%d" % os.getpid())
            finally:
                os.close(fd)
        except OSError as exc:
            raise Refused(f"cgroup {line} differs from the daemon's, which may not join it: "
                          f"{exc.strerror}") from None
    if (_context_value("cgroup") or b"") != sent["cgroup"]:
        raise Refused("cgroup differs from the daemon's after joining the launcher's")


def _context_value(name: str) -> bytes | None:
    items = launch_context()
    return None if items is None else parse_context(items).get(name)


def _cgroup_mounts() -> list[tuple[str, frozenset[str], str, str]]:
    """Cgroup hierarchies mounted here: (kind, super options, root, mount point)."""
    mounts = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as file:
        for line in file:
            fields, _, tail = line.partition(" - ")
            kind, _source, options = [*tail.split(), "", "", ""][:3]
            parts = fields.split()
            if kind in ("cgroup", "cgroup2") and len(parts) > 4:
                mounts.append((kind, frozenset(options.split(",")), _unescape(parts[3]), _unescape(parts[4])))
    return mounts


def _mount_of(mounts: list[tuple[str, frozenset[str], str, str]], controllers: str) -> tuple[str, str] | None:
    """(root, mount point) of the hierarchy /proc/self/cgroup names by `controllers` ("": v2)."""
    wanted = frozenset(controllers.split(",")) if controllers else None
    for kind, options, root, point in mounts:
        if (kind == "cgroup2" and wanted is None) or (kind == "cgroup" and wanted and wanted <= options):
            return root, point
    return None


def _unescape(path: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal."""
    for code in ("040", "011", "012", "134"):
        path = path.replace("\\" + code, chr(int(code, 8)))
    return path


def _status(text: bytes) -> dict[str, str]:
    fields = {}
    for line in text.decode("ascii", "replace").splitlines():
        name, _, value = line.partition(":")
        fields[name] = " ".join(sorted(value.split())) if name == "Groups" else value.strip()
    return fields


def _limits(text: bytes) -> dict[str, tuple[int, int]]:
    limits = {}
    for line in text.decode("ascii", "replace").splitlines()[1:]:
        name, soft, hard = line[:25].strip(), line[26:46].strip(), line[47:67].strip()
        limits[name] = (_limit(soft), _limit(hard))
    return limits


def _limit(value: str) -> int:
    return resource.RLIM_INFINITY if value == "unlimited" else int(value)


def _threads() -> list[int]:
    return [int(tid) for tid in os.listdir("/proc/self/task")]


def _apply_scheduling(sent: dict[str, bytes], own: dict[str, bytes]) -> None:
    policy, priority = (int(part) for part in sent["sched"].split(b":"))
    nice = int(sent["nice"])
    cpus = {int(cpu) for cpu in sent["affinity"].split(b",") if cpu}
    for _ in range(2):  # twice: a thread started while we went through the list gets its creator's
        for tid in _threads():
            try:
                if os.sched_getscheduler(tid) != policy or os.sched_getparam(tid).sched_priority != priority:
                    os.sched_setscheduler(tid, policy, os.sched_param(priority))
                if os.getpriority(os.PRIO_PROCESS, tid) != nice:
                    os.setpriority(os.PRIO_PROCESS, tid, nice)
                if os.sched_getaffinity(tid) != cpus:
                    os.sched_setaffinity(tid, cpus)
            except ProcessLookupError:
                continue  # a thread that just ended
            except OSError as exc:
                raise Refused(f"scheduling (policy {policy}, nice {nice}, CPUs {sorted(cpus)}) not possible "
                              f"from the daemon's (nice {int(own['nice'])}): {exc.strerror}") from None


def _apply_oom_score(sent: dict[str, bytes], own: dict[str, bytes]) -> None:
    if sent["oom_score_adj"] == own["oom_score_adj"]:
        return
    try:
        fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, sent["oom_score_adj"])
        finally:
            os.close(fd)
    except OSError as exc:
        raise Refused(f"oom_score_adj {sent['oom_score_adj'].decode()} not possible: {exc.strerror}") \
            from None


def _apply_limits(sent: dict[str, bytes], own: dict[str, bytes]) -> None:
    ours = _limits(own["limits"])
    for name, wanted in _limits(sent["limits"]).items():
        kind = LIMITS.get(name)
        if kind is None or wanted == ours.get(name):
            continue
        try:
            resource.setrlimit(kind, wanted)
        except (OSError, ValueError) as exc:
            raise Refused(f"limit '{name}' {wanted} not possible from the daemon's {ours.get(name)}: "
                          f"{exc}") from None


def _apply_directory(sent: dict[str, bytes]) -> None:
    try:
        os.chdir(sent["cwd"])
        here = os.stat(".")
    except OSError as exc:
        raise Refused("working directory not reachable in the daemon's mount namespace: "
                      f"{exc.strerror}") from None
    if b"%d:%d" % (here.st_dev, here.st_ino) != sent["cwd_id"]:
        raise Refused("working directory is another directory in the daemon's mount namespace")


def _compare_encodings(sent: dict[str, bytes]) -> None:
    text = "utf-8" if sys.flags.utf8_mode else locale.nl_langinfo(locale.CODESET)
    ours = [_codec(sys.getfilesystemencoding()), sys.getfilesystemencodeerrors(), _codec(text)]
    fs, errors, theirs = sent["encoding"].decode("ascii", "replace").split(",")
    if [_codec(fs), errors, _codec(theirs)] != ours:
        raise Refused(f"encodings {fs},{errors},{theirs} differ from the daemon's {','.join(ours)}")


def _codec(name: str) -> str:
    try:
        return codecs.lookup(name).name
    except LookupError:
        return name.lower()


def _check_descriptors() -> None:
    """Room below the (maybe just lowered) descriptor limit for the launcher's stdio to arrive."""
    taken: list[int] = []
    try:
        for _ in range(DESCRIPTOR_HEADROOM):
            taken.append(os.dup(2))
    except OSError:
        raise Refused("too few file descriptors under the launcher's limit") from None
    finally:
        for fd in taken:
            os.close(fd)


# --- the hand-over, in the child -----------------------------------------------------------------


class Request:
    """One launch: the launcher's process context, argv and environment."""

    def __init__(self, key: str, context: list[bytes], argv: list[str], environ: dict[bytes, bytes],
                 payload: bytes) -> None:
        self.key, self.context, self.argv, self.environ = key, context, argv, environ
        self.payload = payload  # as the launcher sent it: what the daemon forwards to a spare


def parse_request(payload: bytes) -> Request:
    fields = payload.split(b"\0")
    if len(fields) < 4 or fields[0] != PROTOCOL:
        raise ValueError("not a launch request")
    count = int(fields[2])
    context = fields[3:3 + count]
    argc = int(fields[3 + count])
    argv = [os.fsdecode(arg) for arg in fields[4 + count:4 + count + argc]]
    if len(context) != count or len(argv) != argc:
        raise ValueError("truncated request")
    environ: dict[bytes, bytes] = {}
    for item in fields[4 + count + argc:]:
        name, separator, value = item.partition(b"=")
        if separator:
            environ[name] = value
    return Request(fields[1].decode(), context, argv, environ, payload)


def wait_as_spare(channel: socket.socket, module: Any, key: str) -> None:
    from provider.plugin import launch

    if _serves_a_provider(module):
        # If this fails, the launch sets up everything itself (and reports what fails).
        with contextlib.suppress(Exception):
            launch.staged = launch.Staged()
    try:  # the daemon's SIGTERM handler raises SystemExit here too: clean up as for any end
        taken = _become_launch(channel, key)
    except BaseException:
        taken = None
    if taken is None:
        _discard_staged()
        os._exit(0)
    run_child(*taken, module)


def _become_launch(channel: socket.socket, key: str) -> tuple[socket.socket, list[int], Request] | None:
    """Wait for a launch, take on its launcher's context and agree with the launcher on who serves it:
    the connection, the launcher's stdio and the request when this child does, else None."""
    received = _receive_launch(channel, key)
    if received is None:  # the daemon exited
        return None
    connection, request = received
    refusal = take_on(parse_context(request.context), request.environ)
    if refusal is not None:
        _send(connection, REFUSED + refusal.encode("ascii", "replace")[:1000])
        _send(channel, REFUSED)
        return None
    if not _send(connection, ACCEPTED):
        _send(channel, REFUSED)
        return None
    fds = _receive_go(connection)  # the launcher sends it at once, or has given up and closed
    if fds is None:
        _send(channel, REFUSED)
        return None
    _send(channel, ACCEPTED)
    channel.close()
    return connection, fds, request


def _receive_launch(channel: socket.socket, key: str) -> tuple[socket.socket, Request] | None:
    """The launch the daemon hands over (request and the launcher's connection), or None."""
    fds: list[int] = []
    try:
        data, ancillary, _flags, _address = channel.recvmsg(65536, socket.CMSG_SPACE(4))
        fds = _descriptors(ancillary)
        if len(data) < 4 or len(fds) != 1:
            raise ValueError("no launch")
        size = int.from_bytes(data[:4], "big")
        rest = bytearray(data[4:])
        while len(rest) < size:
            chunk = channel.recv(size - len(rest))
            if not chunk:
                raise ValueError("truncated launch")
            rest += chunk
        request = parse_request(bytes(rest))
        if request.key != key:
            raise ValueError("another key")
    except (OSError, ValueError, UnicodeDecodeError):
        _close_fds(fds)
        return None
    return socket.socket(fileno=fds[0]), request


def _receive_go(connection: socket.socket) -> list[int] | None:
    """The launcher's stdin, stdout and stderr, sent with GO; None if it gave up instead."""
    fds: list[int] = []
    try:
        connection.settimeout(None)
        data, ancillary, flags, _address = connection.recvmsg(len(GO), socket.CMSG_SPACE(3 * 4))
        fds = _descriptors(ancillary)
        if data == GO and len(fds) == 3 and not flags & socket.MSG_CTRUNC:
            return fds
    except OSError:
        pass
    _close_fds(fds)
    return None


def _descriptors(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    fds: list[int] = []
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds += [int.from_bytes(payload[i:i + 4], sys.byteorder) for i in range(0, len(payload) - 3, 4)]
    return fds


def run_child(connection: socket.socket, fds: list[int], request: Request, module: Any) -> None:
    """Become this launch's provider process (never returns). The context is already the launcher's."""
    import threading

    from provider.plugin import launch

    # Signal dispositions as a cold launch has them: the interpreter's defaults, SIGINT ignored (the
    # launcher ignores it before it tries the warm path, and keeps it so on the cold path).
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    _close_fds([fd for fd in fds if fd > 2])
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


