"""The warm launch path's safety: every launch its own process and environment, no other user, no
stale daemon, nothing left behind (launcher: provider.plugin.warm_client; daemon: warm_daemon)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from provider._proto import grpc_controller_pb2, grpc_controller_pb2_grpc, health_pb2, health_pb2_grpc
from provider.plugin.install import write_mirror
from provider.plugin.warm_client import (
    ACCEPTED,
    DAEMON_START_WAIT_S,
    encode_request,
    lock_path,
    runtime_directory,
    socket_path,
)
from tests.provider.plugin.launching import (
    ClientCertificate,
    LaunchedPlugin,
    launched,
    make_client_certificate,
    terraform_environment,
)

LAUNCH_MODULE = "tests.provider.plugin.warm_echo"
NOBODY = 65534


@pytest.fixture
def base() -> Iterator[Path]:
    """A short private TMPDIR (Unix socket paths are limited to 107 bytes); daemons killed after."""
    directory = Path(tempfile.mkdtemp(prefix="warm-"))
    try:
        yield directory
    finally:
        for lock in directory.rglob("warm-*.lock"):
            with contextlib.suppress(ValueError, ProcessLookupError):
                os.kill(int(lock.read_text() or "0") or -1, signal.SIGKILL)
        shutil.rmtree(directory, ignore_errors=True)


def _launcher(base: Path, version: str) -> Path:
    return write_mirror(base / "mirror", namespace="gpucloud", type_name="echo", version=version,
                        launch_module=LAUNCH_MODULE)


def _env(base: Path, **extra: str) -> dict[str, str]:
    env = {"PATH": os.environ["PATH"], "TMPDIR": str(base), "GPUCLOUD_PROVIDER_WARM_IDLE_S": "30"}
    env.update(extra)
    return env


class Launch:
    """One launcher process, as Terraform starts it (own pipes), and the line its provider printed."""

    def __init__(self, launcher: Path, env: dict[str, str], cwd: Path | None = None) -> None:
        self.process = subprocess.Popen([str(launcher)], env=env, cwd=cwd, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert self.process.stdout is not None
        pid, ppid, self.cwd, self.api_key = self.process.stdout.readline().decode().split()[:4]
        self.pid, self.ppid = int(pid), int(ppid)

    @property
    def warm(self) -> bool:
        """Served by a daemon's child rather than by the launcher process itself."""
        return self.pid != self.process.pid

    def finish(self, code: int) -> int:
        stdout, _ = self.process.communicate(f"{code}\n".encode(), timeout=30)
        assert stdout == b""
        return self.process.returncode


def _daemon_pid(base: Path) -> int:
    (lock,) = base.glob("gpucloud-provider-*/warm-*.lock")
    return int(lock.read_text())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(ChildProcessError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    return Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]


def _wait_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_warm_concurrent_launches_see_only_their_own_environment(base: Path) -> None:
    launcher = _launcher(base, "1.0.0")
    first = Launch(launcher, _env(base, GPUCLOUD_API_KEY="key-first"))  # starts the daemon, served by it
    assert first.warm and first.finish(0) == 0
    daemon = _daemon_pid(base)
    (base / "a").mkdir()
    (base / "b").mkdir()
    alice = Launch(launcher, _env(base, GPUCLOUD_API_KEY="key-alice"), cwd=base / "a")
    bob = Launch(launcher, _env(base, GPUCLOUD_API_KEY="key-bob"), cwd=base / "b")
    assert (alice.api_key, alice.cwd) == ("key-alice", str(base / "a"))
    assert (bob.api_key, bob.cwd) == ("key-bob", str(base / "b"))
    assert alice.warm and bob.warm and alice.pid != bob.pid
    assert alice.ppid == bob.ppid == daemon  # fresh children of one daemon, both running at once
    assert (alice.finish(7), bob.finish(9)) == (7, 9)  # each exit code reaches its own launcher
    daemon_environ = Path(f"/proc/{daemon}/environ").read_bytes()
    assert b"key-" not in daemon_environ  # credentials never reach the daemon's own environment


def test_warm_killed_daemon_running_launch_completes_next_launch_recovers(base: Path) -> None:
    launcher = _launcher(base, "1.0.0")
    running = Launch(launcher, _env(base))
    assert running.warm
    daemon = _daemon_pid(base)
    os.kill(daemon, signal.SIGKILL)
    assert _wait_gone(daemon)
    after = Launch(launcher, _env(base))  # a dead daemon's socket: a new daemon starts and serves
    assert after.warm and after.ppid != daemon == running.ppid
    assert _daemon_pid(base) == after.ppid
    assert running.finish(5) == 5  # the launch in progress is not the daemon's: it ends normally
    assert after.finish(0) == 0


def test_warm_other_version_or_changed_source_never_uses_old_daemon(base: Path) -> None:
    old = Launch(_launcher(base, "1.0.0"), _env(base))
    assert old.warm and old.finish(0) == 0
    new = Launch(_launcher(base, "1.1.0"), _env(base))
    assert new.ppid != old.ppid  # another version: another key, another daemon
    assert new.finish(0) == 0
    assert len(list(base.glob("gpucloud-provider-*/warm-*.sock"))) == 2

    module = Path(__file__).with_name("warm_echo.py")
    stat = module.stat()
    os.utime(module, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # upgraded in place
    try:
        upgraded = Launch(_launcher(base, "1.0.0"), _env(base))
        assert not upgraded.warm  # the stale daemon refused and exited; this launch ran cold
        assert upgraded.finish(3) == 3
        assert _wait_gone(old.ppid)
    finally:
        os.utime(module, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_warm_cold_path_when_disabled_or_directory_not_private(base: Path) -> None:
    launcher = _launcher(base, "1.0.0")
    disabled = Launch(launcher, _env(base, GPUCLOUD_PROVIDER_WARM="0"))
    assert not disabled.warm and disabled.finish(0) == 0
    directory = Path(runtime_directory({"TMPDIR": str(base)}))
    directory.mkdir(mode=0o700)
    os.chown(directory, NOBODY, NOBODY)  # planted by another user: never trusted
    shared = Launch(launcher, _env(base))
    assert not shared.warm and shared.finish(0) == 0
    assert list(directory.iterdir()) == []


def test_warm_daemon_refuses_another_users_connection(base: Path) -> None:
    launcher = _launcher(base, "1.0.0")
    first = Launch(launcher, _env(base))
    assert first.warm and first.finish(0) == 0
    (sock,) = base.glob("gpucloud-provider-*/warm-*.sock")
    key = sock.name.removeprefix("warm-").removesuffix(".sock")
    assert sock == Path(socket_path(str(sock.parent), key))
    assert Path(lock_path(str(sock.parent), key)).exists()
    base.chmod(0o711)  # let another uid reach the socket file: the daemon's own check must refuse
    sock.parent.chmod(0o711)
    sock.chmod(0o666)
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the forked child
        code = 1
        try:
            os.close(reader)
            os.chdir("/")
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            with socket.socket(socket.AF_UNIX) as client:
                client.connect(str(sock))
                request = encode_request(key)
                client.settimeout(10)
                try:
                    client.sendmsg([request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, bytes(12))])
                    answer = client.recv(1)
                except (BrokenPipeError, ConnectionResetError):
                    answer = b""  # closed on us before or while we spoke
                os.write(writer, answer or b"-")
            code = 0
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(writer)
    _, status = os.waitpid(child, 0)
    answer = os.read(reader, 1)
    os.close(reader)
    assert os.waitstatus_to_exitcode(status) == 0
    assert answer == b"-" and answer != ACCEPTED  # closed without serving


def test_warm_dead_spare_means_a_fresh_one_takes_the_launch(base: Path) -> None:
    launcher = _launcher(base, "1.0.0")
    first = Launch(launcher, _env(base))
    assert first.warm and first.finish(0) == 0
    daemon = _daemon_pid(base)
    children = [int(pid) for pid in Path(f"/proc/{daemon}/task/{daemon}/children").read_text().split()]
    (spare,) = [pid for pid in children if pid != first.pid and _alive(pid)]  # the next launch's, waiting
    os.kill(spare, signal.SIGKILL)
    assert _wait_gone(spare)
    second = Launch(launcher, _env(base, GPUCLOUD_API_KEY="key-second"))
    assert second.warm and second.pid != spare and second.ppid == daemon
    assert second.api_key == "key-second" and second.finish(5) == 5


def test_warm_killed_launcher_ends_its_provider(base: Path) -> None:
    launcher = _launcher(base, "1.0.0")
    launch = Launch(launcher, _env(base))
    assert launch.warm
    launch.process.send_signal(signal.SIGINT)  # Ctrl-C reaches the launcher: ignored, as by a provider
    time.sleep(0.3)
    assert launch.process.poll() is None and _alive(launch.pid)
    launch.process.kill()  # what Terraform does to a plugin that did not exit
    launch.process.communicate(timeout=10)  # EOF on its pipes: the provider holding them is gone too
    assert _wait_gone(launch.pid)


def test_warm_daemon_that_cannot_start_means_a_cold_launch(base: Path) -> None:
    launcher = write_mirror(base / "mirror", namespace="gpucloud", type_name="broken", version="1.0.0",
                            launch_module="tests.provider.plugin.warm_broken")
    started = time.monotonic()
    launch = Launch(launcher, _env(base))
    assert not launch.warm and launch.finish(4) == 4  # served cold, in the launcher itself
    assert time.monotonic() - started < DAEMON_START_WAIT_S  # gave up once the daemon's lock was free


def _health(plugin: LaunchedPlugin, cert: ClientCertificate | None) -> int:
    with plugin.channel(cert) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return int(stub.Check(health_pb2.HealthCheckRequest(service="plugin"), timeout=20).status)


def _shutdown(plugin: LaunchedPlugin, cert: ClientCertificate | None) -> None:
    with plugin.channel(cert) as channel, contextlib.suppress(grpc.RpcError):
        grpc_controller_pb2_grpc.GRPCControllerStub(channel).Shutdown(grpc_controller_pb2.Empty(), timeout=20)
    assert plugin.process.wait(10) == 0


def test_warm_spare_set_up_ahead_serves_exactly_as_a_cold_launch(base: Path) -> None:
    """Launches after the first are served by spares that set up their TLS relay and gRPC server before
    the launch came (launch.Staged): the client certificate is still checked, TF_DISABLE_PLUGIN_TLS and
    another TMPDIR are still honoured, and no socket directory outlives its launch or the daemon."""
    launcher = [str(write_mirror(base / "mirror", namespace="gpucloud", type_name="fake", version="1.0.0",
                                 launch_module="tests.provider.plugin.fake_provider"))]
    runtime, elsewhere = base / "run", base / "elsewhere"
    runtime.mkdir(mode=0o700)
    elsewhere.mkdir(mode=0o700)
    client = make_client_certificate()

    def env(cert: ClientCertificate | None, tmpdir: Path = base, **extra: str) -> dict[str, str]:
        return terraform_environment(cert, TMPDIR=str(tmpdir), XDG_RUNTIME_DIR=str(runtime),
                                     GPUCLOUD_PROVIDER_WARM_IDLE_S="30", **extra)

    serving = int(health_pb2.HealthCheckResponse.SERVING)
    for _ in range(3):  # the first launch starts the daemon; the later ones get a spare each
        with launched(launcher, env(client)) as plugin:
            assert Path(plugin.handshake.address).parent.parent == base
            for wrong in (make_client_certificate(), None):
                with pytest.raises(grpc.RpcError):
                    _health(plugin, wrong)
            assert _health(plugin, client) == serving
            _shutdown(plugin, client)
    with launched(launcher, env(None)) as plugin:  # a host without mutual TLS: server-authenticated
        assert plugin.handshake.server_cert_der is not None and _health(plugin, None) == serving
        _shutdown(plugin, None)
    with launched(launcher, env(None, TF_DISABLE_PLUGIN_TLS="1")) as plugin:
        assert plugin.handshake.server_cert_der is None and _health(plugin, None) == serving
        _shutdown(plugin, None)
    with launched(launcher, env(client, elsewhere)) as plugin:  # not where the spare set up: done afresh
        assert Path(plugin.handshake.address).parent.parent == elsewhere
        assert _health(plugin, client) == serving
        _shutdown(plugin, client)
    assert list(elsewhere.glob("tfplugin-*")) == []
    (lock,) = runtime.glob("gpucloud-provider/warm-*.lock")
    waiting = list(base.glob("tfplugin-*"))
    assert len(waiting) == 1  # only the next launch's spare has one
    os.kill(int(lock.read_text()), signal.SIGTERM)
    deadline = time.monotonic() + 10
    while any(path.exists() for path in waiting) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(base.glob("tfplugin-*")) == []  # the spare saw the daemon go and cleaned up
