"""Warm launches (provider.plugin.warm_client / warm_daemon) under real Terraform 1.11: concurrent
runs with different API keys, a daemon killed mid-apply, and Terraform killed or interrupted.

Every acceptance test launches through the warm path by default; GPUCLOUD_PROVIDER_WARM=0 in the
environment runs the whole suite cold (docs/testing.md). These cases need the warm path itself.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from acceptance.backend import Backend, _cli
from acceptance.conformance.hcl import header
from acceptance.gpucloud_steps import PROVIDER_BLOCK, new_public_key
from acceptance.harness import Terraform, TerraformFactory
from provider.client import GpuCloudClient
from provider.plugin.warm_client import runtime_directory

WARM = {"GPUCLOUD_PROVIDER_WARM": "1"}


@pytest.fixture(autouse=True)
def _warm_path_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUCLOUD_PROVIDER_WARM", raising=False)  # these tests are about the warm path


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


def _wait_until_none_in(directory: Path, timeout: float = 15.0) -> set[int]:
    deadline = time.monotonic() + timeout
    while (left := _processes_in(directory)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


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
        running.wait(timeout=180, check=True)
    for name, (_tf, api_key) in runs.items():
        with GpuCloudClient(backend_server.url, api_key) as client:
            assert [key["name"] for key in client.list_ssh_keys()] == [name]  # each run used its own key


def test_acc_warm_daemon_killed_mid_apply(terraform: TerraformFactory) -> None:
    tf = _slow(terraform, 4)
    running = tf.start("apply", "-auto-approve")
    try:
        running.wait_for_output(r"conformance_slow\.s: Creating\.\.\.", timeout=120)
        daemon = _daemon_serving(tf.workdir)
        os.kill(daemon, signal.SIGKILL)
        result = running.wait(timeout=120, check=True)  # the provider serving it was never the daemon
    finally:
        running.kill()
    assert "Apply complete! Resources: 1 added" in result.stdout
    tf.assert_plan_empty()  # the next launches start a new daemon (or run cold): nothing breaks


@pytest.mark.parametrize("stop", ["SIGINT", "SIGKILL"])
def test_acc_warm_stopped_terraform_leaves_no_provider(terraform: TerraformFactory, stop: str) -> None:
    tf = _slow(terraform, 120)
    running = tf.start("apply", "-auto-approve")
    try:
        running.wait_for_output(r"conformance_slow\.s: Creating\.\.\.", timeout=120)
        assert len(_processes_in(tf.workdir)) >= 3  # terraform, the launcher, the daemon's child
        if stop == "SIGINT":
            running.interrupt()  # Ctrl-C: StopProvider, Shutdown, exit
            assert running.wait(timeout=60).returncode == 1
        else:
            os.killpg(running.pid, signal.SIGKILL)  # nothing orderly: the launcher dies with Terraform
    finally:
        running.kill()
    assert _wait_until_none_in(tf.workdir) == set()
