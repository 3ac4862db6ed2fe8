"""A launch module for the warm-path tests: reports who serves the launch and what it sees, then waits.

Prints one JSON line on stdout: `pid`, `ppid`, `cwd`, `api_key` (GPUCLOUD_API_KEY), `argv` and
`context`, the OS context of the process serving the launch (ids and groups, capabilities, limits,
niceness and scheduling of every thread, CPU affinity, time zone, umask, OOM score, namespaces,
cgroup, root directory, encodings, signal dispositions). Then it reads one line from stdin and exits
with the number on it (so a test controls how long a launch runs and what it returns).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

NAMESPACES = ("cgroup", "ipc", "mnt", "net", "pid", "pid_for_children", "time", "time_for_children", "user",
              "uts")
STATUS_FIELDS = ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs",
                 "Seccomp")


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as file:
            return file.read()
    except OSError:
        return None


def _readlink(path: str) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None


def _threads() -> list[tuple[int, int, str]]:
    """(nice, scheduling policy, CPUs) of each thread, from /proc (its thread ids may be another pid
    namespace's than ours)."""
    threads = []
    for tid in os.listdir("/proc/self/task"):
        stat = (_read(f"/proc/self/task/{tid}/stat") or ")").rsplit(")", 1)[1].split()
        status = _read(f"/proc/self/task/{tid}/status") or ""
        cpus = next((line.split(":")[1].strip() for line in status.splitlines()
                     if line.startswith("Cpus_allowed_list:")), "")
        if len(stat) > 38:
            threads.append((int(stat[16]), int(stat[38]), cpus))
    return threads


def context() -> dict[str, Any]:
    """What a launch's process sees of its OS context (the same for a warm and a cold launch)."""
    import locale
    import resource
    import signal
    import time

    status = {}
    for line in (_read("/proc/self/status") or "").splitlines():
        name, _, value = line.partition(":")
        if name in STATUS_FIELDS:
            status[name] = " ".join(value.split())
    limits = {name: resource.getrlimit(getattr(resource, name))
              for name in sorted(dir(resource)) if name.startswith("RLIMIT_")}
    umask = os.umask(0o022)
    os.umask(umask)
    root = os.stat("/")
    try:
        cwd: str | None = os.getcwd()
    except OSError:
        cwd = None  # a working directory that was removed
    return {
        "uid": os.getresuid(),
        "gid": os.getresgid(),
        "groups": sorted(os.getgroups()),
        "status": status,
        "limits": limits,
        "threads": sorted(set(_threads())),  # (nice, policy, CPUs): all threads alike
        "nice": os.getpriority(os.PRIO_PROCESS, 0),
        "affinity": sorted(os.sched_getaffinity(0)),
        "tz": [list(time.tzname), time.timezone, time.strftime("%H %Z", time.localtime(0))],
        "cwd": cwd,
        "umask": umask,
        "oom_score_adj": (_read("/proc/self/oom_score_adj") or "").strip(),
        "namespaces": {name: _readlink(f"/proc/self/ns/{name}") for name in NAMESPACES},
        "cgroup": _read("/proc/self/cgroup"),
        "root": [root.st_dev, root.st_ino],
        "encoding": [sys.getfilesystemencoding(), sys.flags.utf8_mode, locale.setlocale(locale.LC_CTYPE)],
        "sigterm": str(signal.getsignal(signal.SIGTERM)),
    }


def main() -> None:
    report = {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "cwd": context()["cwd"],
        "api_key": os.environ.get("GPUCLOUD_API_KEY", "-"),
        "argv": sys.argv[1:],
        "context": context(),
    }
    os.write(1, (json.dumps(report) + "\n").encode())
    line = sys.stdin.readline()
    raise SystemExit(int(line or "1"))
