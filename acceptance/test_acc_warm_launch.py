"""Warm launches (provider.plugin.warm_client / warm_daemon) under real Terraform 1.11: concurrent
runs with different API keys, a daemon killed mid-apply, Terraform killed or interrupted, and never
worse than cold: a stopped daemon, Terraform's own OS context (niceness, limits, CPUs, time zone,
group ids), a working directory that only Terraform's mount namespace has.

Every acceptance test launches through the warm path by default; GPUCLOUD_PROVIDER_WARM=0 in the
environment runs the whole suite cold (docs/testing.md). These cases need the warm path itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import signal
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from acceptance.backend import Backend, _cli
from acceptance.conformance.hcl import header
from acceptance.gpucloud_steps import PROVIDER_BLOCK, new_public_key
from acceptance.harness import Terraform, TerraformFactory, eventually, wait_until
from provider.client import GpuCloudClient
from provider.plugin.warm_client import lock_path, runtime_directory, socket_path

WARM = {"GPUCLOUD_PROVIDER_WARM": "1"}


@pytest.fixture(autouse=True)
def _warm_path_on(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The warm path on, with daemons of this test's own: these tests stop and kill daemons, which must
    not be the ones the other test worker's Terraform runs are using (one runtime directory per user)."""
    monkeypatch.delenv("GPUCLOUD_PROVIDER_WARM", raising=False)  # these tests are about the warm path
    runtime = Path(tempfile.mkdtemp(prefix="gcw-"))  # short: Unix socket paths are limited to 107 bytes
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    try:
        yield
    finally:
        for lock in Path(runtime_directory()).glob("warm-*.lock"):
            with contextlib.suppress(ValueError, OSError):
                pid = int(lock.read_text() or "0")
                if pid > 0:
                    os.kill(pid, signal.SIGCONT)  # a test that failed while it held the daemon stopped
                    os.kill(pid, signal.SIGKILL)
        shutil.rmtree(runtime, ignore_errors=True)


def _processes_in(directory: Path) -> set[int]:
    """Live processes whose working directory is `directory`: Terraform and its providers, warm or cold."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "cwd") == str(directory) and "Z" not in _state(entry):
                    found.add(int(entry.name))
            except OSError:
                continue
    return found


def _state(entry: Path) -> str:
    return (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]


def _wait_until_none_in(directory: Path) -> set[int]:
    """The processes still in `directory` once none are left, or at the ceiling."""
    eventually(lambda: not _processes_in(directory), interval=0.1)
    return _processes_in(directory)


def _daemon_serving(directory: Path) -> int:
    """The warm daemon whose child serves the provider running in `directory` (from its lock file)."""
    parents = {int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
               for pid in _processes_in(directory)}
    for lock in Path(runtime_directory()).glob("warm-*.lock"):
        pid = int(lock.read_text() or "0")
        if pid in parents:
            return pid
    raise AssertionError(f"no warm daemon serves a provider in {directory}")


def _slow(terraform: TerraformFactory, seconds: int) -> Terraform:
    tf = terraform(env=WARM)
    store = tf.workdir / "remote.json"
    tf.write_main(header(store) + f'resource "conformance_slow" "s" {{\n  seconds = {seconds}\n}}\n')
    tf.init()
    return tf


def _conformance_daemon(tf: Terraform) -> int:
    """Start the conformance provider's daemon if none runs (a plan: its first launch runs cold and
    starts it), wait until it listens; its pid."""
    launcher = next((tf.workdir / ".terraform" / "providers").glob("*/gpucloud/conformance/*/*/terraform-*"))
    found = re.search(r'launch\("[^"]*", "([0-9a-f]+)"', launcher.read_text())
    assert found is not None
    directory, key = Path(runtime_directory()), found.group(1)
    tf.plan()
    wait_until(lambda: _listening(socket_path(str(directory), key)), lambda: "the warm daemon did not start",
               interval=0.05)
    return int(Path(lock_path(str(directory), key)).read_text())


def _listening(path: str) -> bool:
    with socket.socket(socket.AF_UNIX) as probe:
        try:
            probe.connect(path)
        except OSError:
            return False
        return True


def _under(tf: Terraform, *prefix: str) -> Terraform:
    """Terraform (and so its providers) run under `prefix`, a command that changes the process context."""
    tf.install = dataclasses.replace(tf.install, command=(*prefix, *tf.install.command))
    return tf


def _provider_in(directory: Path) -> int:
    """The provider process serving Terraform in `directory`: warm, the daemon's child; cold, the
    launcher itself."""
    processes = {pid: _cmdline(pid) for pid in _processes_in(directory)}
    children = [pid for pid, cmdline in processes.items() if "warm_daemon import main" in cmdline]
    launchers = [pid for pid, cmdline in processes.items() if "warm_client import launch" in cmdline]
    assert len(launchers) == 1 and len(children) <= 1, processes
    return children[0] if children else launchers[0]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_acc_warm_concurrent_applies_with_different_api_keys(terraform: TerraformFactory,
                                                            backend_server: Backend) -> None:
    env = {**os.environ, "GPUCLOUD_DATA_DIR": str(backend_server.data_dir)}
    _cli(env, "create-project", "other")
    other_key = _cli(env, "create-api-key", "--project", "other", "--role", "admin")
    runs = {}
    for name, api_key in (("mine", backend_server.api_key), ("theirs", other_key)):
        tf = terraform(env={**WARM, "GPUCLOUD_ENDPOINT": backend_server.url, "GPUCLOUD_API_KEY": api_key})
        tf.write_main(PROVIDER_BLOCK + f'resource "gpucloud_ssh_key" "k" {{\n  name = "{name}"\n'
                      f'  public_key = "{new_public_key()}"\n}}\n')
        tf.init()
        runs[name] = (tf, api_key)
    started = [tf.start("apply", "-auto-approve") for tf, _ in runs.values()]  # both at once
    for running in started:
        running.wait(check=True)
    for name, (_tf, api_key) in runs.items():
        with GpuCloudClient(backend_server.url, api_key) as client:
            assert [key["name"] for key in client.list_ssh_keys()] == [name]  # each run used its own key


def test_acc_warm_daemon_killed_mid_apply(terraform: TerraformFactory) -> None:
    tf = _slow(terraform, 15)  # still creating when the test, however slowed down, looks for its daemon
    _conformance_daemon(tf)
    running = tf.start("apply", "-auto-approve")
    try:
        running.wait_for_output(r"conformance_slow\.s: Creating\.\.\.")
        daemon = _daemon_serving(tf.workdir)
        os.kill(daemon, signal.SIGKILL)
        result = running.wait(check=True)  # the provider serving it was never the daemon
    finally:
        running.kill()
    assert "Apply complete! Resources: 1 added" in result.stdout
    tf.assert_plan_empty()  # the next launches start a new daemon (or run cold): nothing breaks


@pytest.mark.parametrize("stop", ["SIGINT", "SIGKILL"])
def test_acc_warm_stopped_terraform_leaves_no_provider(terraform: TerraformFactory, stop: str) -> None:
    tf = _slow(terraform, 3600)  # only ever stopped
    _conformance_daemon(tf)
    running = tf.start("apply", "-auto-approve")
    try:
        running.wait_for_output(r"conformance_slow\.s: Creating\.\.\.")
        assert len(_processes_in(tf.workdir)) >= 3  # terraform, the launcher, the daemon's child
        if stop == "SIGINT":
            running.interrupt()  # Ctrl-C: StopProvider, Shutdown, exit
            assert running.wait().returncode == 1
        else:
            os.killpg(running.pid, signal.SIGKILL)  # nothing orderly: the launcher dies with Terraform
    finally:
        running.kill()
    assert _wait_until_none_in(tf.workdir) == set()


def test_acc_warm_stopped_daemon_plan_completes_cold(terraform: TerraformFactory) -> None:
    """A SIGSTOPped daemon costs each launch about a second, then the launch runs cold: the plan
    succeeds (before: every launch waited out go-plugin's 60 s start timeout and the plan failed)."""
    tf = _slow(terraform, 1)
    daemon = _conformance_daemon(tf)
    os.kill(daemon, signal.SIGSTOP)
    try:
        # Succeeding is the check: Terraform fails a launch that is not handshaken within go-plugin's 60 s.
        # How long a launch waits for a stopped daemon (~1 s): tests/provider/plugin/test_warm.py.
        result = tf.run("plan")
    finally:
        os.kill(daemon, signal.SIGCONT)
    assert "1 to add" in result.stdout
    tf.run("apply", "-auto-approve")  # the continued daemon serves again
    tf.assert_plan_empty()


@pytest.mark.parametrize("served", ["warm", "cold"])
def test_acc_warm_provider_has_terraforms_os_context(terraform: TerraformFactory, served: str) -> None:
    """The issue's reproduction: Terraform under nice, prlimit and taskset with TZ=Asia/Tokyo gets a
    warm provider with exactly that context; under another gid and groups (setpriv), which a daemon's
    child cannot take on, a cold provider with them."""
    if os.geteuid() != 0 or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs root (setpriv) and two CPUs")
    tf = _slow(terraform, 3600)  # only ever killed
    daemon = _conformance_daemon(tf)
    prefix = ["nice", "-n10", "prlimit", "--nofile=256", "taskset", "-c", "0"]
    if served == "cold":
        prefix = ["setpriv", "--regid=100", "--groups=100,27", *prefix]
    running = _under(tf, *prefix).start("apply", "-auto-approve", env={"TZ": "Asia/Tokyo"})
    try:
        running.wait_for_output(r"conformance_slow\.s: Creating\.\.\.")
        provider = _provider_in(tf.workdir)
        assert (_parent(provider) == daemon) == (served == "warm")
        status_text = Path(f"/proc/{provider}/status").read_text()
        status = dict(line.split(":", 1) for line in status_text.splitlines())
        stat = Path(f"/proc/{provider}/stat").read_text().rsplit(")", 1)[1].split()
        limits = Path(f"/proc/{provider}/limits").read_text()
        assert int(stat[16]) == 10  # nice
        assert re.search(r"Max open files\s+256\s+256", limits)
        assert status["Cpus_allowed_list"].strip() == "0"
        # (TZ: /proc/PID/environ shows a process's environment at exec, the daemon's for a warm child;
        # the child's own environment and time zone: tests/provider/plugin/test_warm_context.py.)
        expected_gid = "100" if served == "cold" else "0"
        assert status["Gid"].split()[0] == expected_gid
        if served == "cold":
            assert sorted(status["Groups"].split()) == ["100", "27"]
    finally:
        running.kill()


def test_acc_warm_working_directory_only_in_terraforms_mount_namespace(terraform: TerraformFactory) -> None:
    """Terraform in a mount namespace of its own, in a directory only that namespace has (a tmpfs):
    the daemon cannot serve it and the launch runs cold, invisibly to Terraform (before: exit 1 after
    "accepted", no handshake)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (unshare --mount)")
    tf = _slow(terraform, 1)
    _conformance_daemon(tf)
    private = tf.workdir.parent / f"{tf.workdir.name}-private"
    private.mkdir()
    script = (f'mount -t tmpfs none {private} && mkdir {private}/w && cp -a {tf.workdir}/. {private}/w/ '
              f'&& cd {private}/w && exec "$0" "$@"')  # {private}/w: no such directory outside
    _under(tf, "unshare", "--mount", "--propagation", "private", "sh", "-c", script)
    result = tf.run("apply", "-auto-approve")
    assert "Apply complete! Resources: 1 added" in result.stdout
    assert list(private.iterdir()) == []  # it all happened in Terraform's namespace only
