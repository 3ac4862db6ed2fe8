"""Helpers of the warm-path tests: launchers of `warm_echo`, one launch as Terraform starts it, daemons."""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from provider.plugin.install import write_mirror
from provider.plugin.warm_client import lock_path, socket_path

LAUNCH_MODULE = "tests.provider.plugin.warm_echo"


@contextlib.contextmanager
def warm_base() -> Iterator[Path]:
    """A short private TMPDIR (Unix socket paths are limited to 107 bytes); daemons killed after."""
    directory = Path(tempfile.mkdtemp(prefix="warm-"))
    try:
        yield directory
    finally:
        for lock in [*directory.glob("*/warm-*.lock"), *directory.glob("*/*/warm-*.lock")]:
            with contextlib.suppress(ValueError, ProcessLookupError, OSError):
                os.kill(int(lock.read_text() or "0") or -1, signal.SIGKILL)
        shutil.rmtree(directory, ignore_errors=True)


def echo_launcher(base: Path, version: str = "1.0.0", module: str = LAUNCH_MODULE) -> Path:
    return write_mirror(base / "mirror", namespace="gpucloud", type_name="echo", version=version,
                        launch_module=module)


def echo_env(base: Path, **extra: str) -> dict[str, str]:
    env = {"PATH": os.environ["PATH"], "TMPDIR": str(base), "GPUCLOUD_PROVIDER_WARM_IDLE_S": "60"}
    env.update(extra)
    return env


def _readline(fd: int, timeout: float) -> bytes:
    deadline = time.monotonic() + timeout
    data = b""
    while b"\n" not in data:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
    return data


class Launch:
    """One launcher process, as Terraform starts it (own pipes), and what its provider reported.

    `prefix` runs the launcher under a command that changes its context and then execs it (`nice`,
    `setpriv`, `unshare`...). The first line must come within `timeout` seconds.
    """

    def __init__(self, launcher: Path, env: dict[str, str], cwd: Path | None = None,
                 prefix: Sequence[str] = (), timeout: float = 30.0) -> None:
        started = time.monotonic()
        self.process = subprocess.Popen([*prefix, str(launcher)], env=env, cwd=cwd, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert self.process.stdout is not None
        line = _readline(self.process.stdout.fileno(), timeout)
        self.seconds = time.monotonic() - started
        if not line:
            self.process.kill()
            _, stderr = self.process.communicate(timeout=10)
            raise AssertionError(f"no report within {timeout} s (exit {self.process.returncode}): {stderr!r}")
        report: dict[str, Any] = json.loads(line)
        self.pid: int = report["pid"]
        self.ppid: int = report["ppid"]
        self.cwd: str | None = report["cwd"]
        self.api_key: str = report["api_key"]
        self.context: dict[str, Any] = report["context"]
        self.stderr = b""

    @property
    def warm(self) -> bool:
        """Served by a daemon's child rather than by the launcher process itself (launched directly)."""
        return self.pid != self.process.pid

    def finish(self, code: int) -> int:
        stdout, self.stderr = self.process.communicate(f"{code}\n".encode(), timeout=30)
        assert stdout == b""
        return self.process.returncode


def runtime_dir(base: Path) -> Path:
    return base / f"gpucloud-provider-{os.getuid()}"


def daemon_pid(base: Path, key: str = "*") -> int:
    if key == "*":
        (lock,) = runtime_dir(base).glob("warm-*.lock")
    else:
        lock = Path(lock_path(str(runtime_dir(base)), key))
    return int(lock.read_text())


def launcher_key(launcher: Path) -> str:
    """The daemon key written into a mirror launcher (`launch(MODULE, KEY, PATHS)`)."""
    found = re.search(r'launch\("[^"]*", "([0-9a-f]+)"', launcher.read_text())
    assert found is not None
    return found.group(1)


def start_daemon(launcher: Path, env: dict[str, str], timeout: float = 30.0) -> int:
    """Launch once (that launch runs cold and starts the daemon), wait until it listens; its pid."""
    first = Launch(launcher, env)
    assert not first.warm and first.finish(0) == 0
    base, key = Path(env["TMPDIR"]), launcher_key(launcher)
    wait_listening(runtime_dir(base), timeout, key)
    return daemon_pid(base, key)


def spare_of(daemon: int, timeout: float = 10.0) -> int:
    """The daemon's waiting spare (forked right after it starts listening, and after each launch)."""
    deadline = time.monotonic() + timeout
    while not (waiting := [pid for pid in children(daemon) if alive(pid)]):
        assert time.monotonic() < deadline, "no spare"
        time.sleep(0.02)
    (spare,) = waiting
    return spare


def wait_listening(directory: Path, timeout: float = 30.0, key: str = "*") -> None:
    """Until a daemon listens on a `warm-KEY.sock` in `directory` (not a dead one's socket file)."""
    deadline = time.monotonic() + timeout
    while True:
        pattern = "warm-*.sock" if key == "*" else Path(socket_path(str(directory), key)).name
        for path in directory.glob(pattern):
            with socket.socket(socket.AF_UNIX) as probe, contextlib.suppress(OSError):
                probe.connect(str(path))  # closed at once: the daemon drops an empty connection
                return
        assert time.monotonic() < deadline, "the daemon did not start"
        time.sleep(0.02)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(ChildProcessError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    try:
        return "Z" not in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False


def wait_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


def children(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
