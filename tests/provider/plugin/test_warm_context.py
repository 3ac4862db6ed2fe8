"""A warm launch runs with exactly its launcher's OS context, or cold (provider.plugin.warm_child).

Each case runs the `warm_echo` launcher under a command that changes one attribute of its context
(as `setpriv`, `nice`, `prlimit`, `taskset`, `unshare`... do for Terraform), once through the warm path
and once cold (GPUCLOUD_PROVIDER_WARM=0), and compares what the two launches report. What a child of
the daemon can take on is served warm; what it cannot (ids and groups, namespaces, cgroup...) is
served cold. The daemon itself was started by a plain launch.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from provider._proto import grpc_controller_pb2, grpc_controller_pb2_grpc, health_pb2, health_pb2_grpc
from provider.plugin.install import write_mirror
from tests.provider.plugin.launching import REPO, launched, make_client_certificate, terraform_environment
from tests.provider.plugin.warming import (
    Launch,
    echo_env,
    echo_launcher,
    runtime_dir,
    start_daemon,
    wait_listening,
    warm_base,
)

IS_ROOT = os.geteuid() == 0
TWO_CPUS = len(os.sched_getaffinity(0)) > 1

# name: (command prefix, extra environment, served warm)
CASES: dict[str, tuple[list[str], dict[str, str], bool]] = {
    # taken on by the child
    "nice": (["nice", "-n10"], {}, True),
    "rlimit_nofile": (["prlimit", "--nofile=256"], {}, True),
    "rlimit_nofile_soft": (["prlimit", "--nofile=300:4096"], {}, True),
    "rlimit_core_cpu": (["prlimit", "--core=0:0", "--cpu=600:900"], {}, True),
    "affinity": (["taskset", "-c", "0"], {}, True),
    "time_zone": ([], {"TZ": "Asia/Tokyo"}, True),
    "umask": (["sh", "-c", 'umask 027 && exec "$0" "$@"'], {}, True),
    "oom_score_adj": (["choom", "-n", "300", "--"], {}, True),
    "sched_batch": (["chrt", "--batch", "0"], {}, True),
    "sched_idle": (["chrt", "--idle", "0"], {}, True),
    "all_applicable": (["sh", "-c", 'umask 077 && exec "$0" "$@"', "nice", "-n7", "prlimit", "--nofile=512",
                        "taskset", "-c", "0", "chrt", "--batch", "0"], {"TZ": "Asia/Tokyo"}, True),
    # compared: any difference launches cold
    "gid_and_groups": (["setpriv", "--regid=100", "--groups=100,27"], {}, False),
    "groups_only": (["setpriv", "--groups=27"], {}, False),
    "capability_bounding_set": (["setpriv", "--bounding-set=-net_raw"], {}, False),
    "no_new_privs": (["setpriv", "--no-new-privs"], {}, False),
    "rlimit_stack": (["prlimit", "--stack=4194304"], {}, False),
    "rlimit_address_space": (["prlimit", "--as=17179869184"], {}, False),
    "ns_net": (["unshare", "--net"], {}, False),
    "ns_mnt": (["unshare", "--mount"], {}, False),
    "ns_ipc": (["unshare", "--ipc"], {}, False),
    "ns_uts": (["unshare", "--uts"], {}, False),
    "ns_pid": (["unshare", "--pid", "--fork"], {}, False),
    "ns_pid_for_children": (["unshare", "--pid"], {}, False),
    "ns_user": (["unshare", "--user", "--map-root-user"], {}, False),
    "ns_cgroup": (["unshare", "--cgroup"], {}, False),
    "ns_time_for_children": (["unshare", "--time"], {}, False),
    # the reproduction, all at once: the gid alone sends it cold
    "reproduction": (["setpriv", "--regid=100", "--groups=100,27", "nice", "-n10", "prlimit", "--nofile=256",
                      "taskset", "-c", "0"], {"TZ": "Asia/Tokyo"}, False),
}
NEEDS_ROOT = {"gid_and_groups", "groups_only", "capability_bounding_set", "ns_net", "ns_mnt", "ns_ipc",
              "ns_uts", "ns_pid", "ns_pid_for_children", "ns_cgroup", "ns_time_for_children", "reproduction"}
NEEDS_TWO_CPUS = {"affinity", "all_applicable", "reproduction"}


@pytest.fixture(scope="module")
def daemon() -> Iterator[tuple[Path, Path, int]]:
    """One daemon for the module (started by a plain launch): its TMPDIR, launcher and pid."""
    with warm_base() as base:
        launcher = echo_launcher(base)
        pid = start_daemon(launcher, echo_env(base))
        (base / "work").mkdir()
        yield base, launcher, pid


def _launch(base: Path, launcher: Path, prefix: list[str], env: dict[str, str], cwd: Path | None = None,
            **extra: str) -> Launch:
    launch = Launch(launcher, echo_env(base, **env, **extra), cwd=cwd, prefix=prefix)
    assert launch.finish(0) == 0, launch.stderr
    return launch


def _differences(warm: dict[str, Any], cold: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    warm, cold = _normalized(warm), _normalized(cold)
    return {name: (warm.get(name), cold.get(name)) for name in sorted(set(warm) | set(cold))
            if warm.get(name) != cold.get(name)}


def _normalized(context: dict[str, Any]) -> dict[str, Any]:
    """Namespaces as "ours" (this test's, which the daemon shares) or "new": `unshare` makes a new one
    for each of the two launches."""
    ours = {name: os.readlink(f"/proc/self/ns/{name}") for name in context["namespaces"]
            if os.path.lexists(f"/proc/self/ns/{name}")}
    namespaces = {name: "ours" if value == ours.get(name) else "new"
                  for name, value in context["namespaces"].items()}
    return {**context, "namespaces": namespaces}


@pytest.mark.parametrize("case", list(CASES))
def test_warm_context_attribute_same_as_cold(daemon: tuple[Path, Path, int], case: str) -> None:
    base, launcher, pid = daemon
    if case in NEEDS_ROOT and not IS_ROOT:
        pytest.skip("changing this attribute needs root")
    if case in NEEDS_TWO_CPUS and not TWO_CPUS:
        pytest.skip("needs two CPUs")
    if case == "ns_time_for_children" and not Path("/proc/self/ns/time").exists():
        pytest.skip("no time namespaces in this kernel")
    prefix, env, served_warm = CASES[case]
    warm = _launch(base, launcher, prefix, env, cwd=base / "work")
    cold = _launch(base, launcher, prefix, env, cwd=base / "work", GPUCLOUD_PROVIDER_WARM="0")
    assert _differences(warm.context, cold.context) == {}
    assert (warm.ppid == pid) == served_warm  # a child of the daemon, or the launcher itself
    if not served_warm:
        plain = _plain(base, launcher)
        assert json.dumps(warm.context) != json.dumps(plain.context)  # the case did change something


def _plain(base: Path, launcher: Path) -> Launch:
    return _launch(base, launcher, [], {}, cwd=base / "work")


def test_warm_context_working_directory_and_environment_are_the_launchers(
    daemon: tuple[Path, Path, int]
) -> None:
    base, launcher, pid = daemon
    (base / "work" / "deeper").mkdir(exist_ok=True)
    warm = _launch(base, launcher, [], {"GPUCLOUD_API_KEY": "k1"}, cwd=base / "work" / "deeper")
    cold = _launch(base, launcher, [], {"GPUCLOUD_API_KEY": "k1"}, cwd=base / "work" / "deeper",
                   GPUCLOUD_PROVIDER_WARM="0")
    assert warm.ppid == pid and (warm.cwd, warm.api_key) == (cold.cwd, cold.api_key) == (
        str(base / "work" / "deeper"), "k1")
    assert _differences(warm.context, cold.context) == {}


@contextlib.contextmanager
def _cgroup() -> Iterator[Path]:
    """A fresh cgroup in the v1 `pids` hierarchy (this machine's layout), removed after."""
    hierarchy = Path("/sys/fs/cgroup/pids")
    if not IS_ROOT or not (hierarchy / "cgroup.procs").exists():
        pytest.skip("needs root and the cgroup v1 pids hierarchy")
    group = hierarchy / f"gpucloud-warm-test-{os.getpid()}"
    group.mkdir()
    try:
        yield group
    finally:
        for _ in range(50):  # its last process may take a moment to go
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def test_warm_context_other_cgroup_is_joined(daemon: tuple[Path, Path, int]) -> None:
    """A launcher in another cgroup: the child moves itself there (as root it may), as a child of the
    launcher would be; its CPU and memory are then accounted where the launcher's are."""
    base, launcher, pid = daemon
    with _cgroup() as group:
        prefix = ["sh", "-c", f'echo $$ > {group}/cgroup.procs && exec "$0"']
        warm = _launch(base, launcher, prefix, {}, cwd=base / "work")
        cold = _launch(base, launcher, prefix, {}, cwd=base / "work", GPUCLOUD_PROVIDER_WARM="0")
        assert f"pids:/{group.name}\n" in warm.context["cgroup"]
        assert _differences(warm.context, cold.context) == {} and warm.ppid == pid


def test_warm_context_removed_working_directory_launches_cold(daemon: tuple[Path, Path, int]) -> None:
    """A working directory removed under the launcher (getcwd fails): cold, as before warm launches."""
    base, launcher, pid = daemon
    gone = base / "work" / "gone"
    prefix = ["sh", "-c", f'mkdir {gone} && cd {gone} && rmdir {gone} && exec "$0"']
    warm = _launch(base, launcher, prefix, {}, cwd=base / "work")
    cold = _launch(base, launcher, prefix, {}, cwd=base / "work", GPUCLOUD_PROVIDER_WARM="0")
    assert warm.cwd is None and warm.ppid != pid
    assert _differences(warm.context, cold.context) == {}


@pytest.mark.skipif(not IS_ROOT, reason="mounts a tmpfs in a private mount namespace")
def test_warm_context_working_directory_missing_in_daemon_namespace_falls_back_to_cold(
    tmp_path: Path
) -> None:
    """The issue's reproduction: the launcher's working directory exists only in its own mount
    namespace. The launch is served cold, in the launcher, with a proper handshake, and works."""
    with warm_base() as base:
        launcher = write_mirror(base / "mirror", namespace="gpucloud", type_name="fake", version="1.0.0",
                                launch_module="tests.provider.plugin.fake_provider")
        cert = make_client_certificate()
        env = terraform_environment(cert, TMPDIR=str(base), GPUCLOUD_PROVIDER_WARM_IDLE_S="30")
        with launched([str(launcher)], env) as plugin:  # starts the daemon
            _stop(plugin, cert)
        wait_listening(runtime_dir(base))
        private = tmp_path / "private"
        private.mkdir()
        command = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                   f'mount -t tmpfs none {private} && mkdir {private}/work && cd {private}/work && exec "$0"',
                   str(launcher)]
        with launched(command, env) as plugin:
            assert plugin.handshake.address.startswith(str(base))
            with plugin.channel(cert) as channel:
                status = health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(service="plugin"), timeout=20).status
            assert status == health_pb2.HealthCheckResponse.SERVING
            assert os.readlink(f"/proc/{plugin.process.pid}/cwd") == f"{private}/work"  # it serves itself
            _stop(plugin, cert)


def _stop(plugin: Any, cert: Any) -> None:
    with plugin.channel(cert) as channel, contextlib.suppress(grpc.RpcError):
        grpc_controller_pb2_grpc.GRPCControllerStub(channel).Shutdown(grpc_controller_pb2.Empty(), timeout=20)
    assert plugin.process.wait(10) == 0


# --- warm_context.take_on itself, in a throwaway interpreter (it changes the process it runs in) -----

TAKE_ON = """
import json, os, sys
sys.path.insert(0, {repo!r})
from provider.plugin.warm_client import launch_context
from provider.plugin.warm_child import parse_context, take_on
sent = parse_context(launch_context())
changes = json.loads(sys.argv[1])
for name, value in changes.items():
    sent[name] = value.encode()
environ = dict(os.environb)
environ[b"TZ"] = b"Asia/Tokyo"
reason = take_on(sent, environ)
import resource, time
print(json.dumps({{"reason": reason, "cwd": os.getcwd(), "nice": os.getpriority(os.PRIO_PROCESS, 0),
                  "nofile": resource.getrlimit(resource.RLIMIT_NOFILE), "tz": time.tzname[0],
                  "umask": os.umask(0)}}))
"""


def _take_on(changes: dict[str, str], prefix: list[str] | None = None) -> dict[str, Any]:
    result = subprocess.run([*(prefix or []), sys.executable, "-I", "-c", TAKE_ON.format(repo=str(REPO)),
                             json.dumps(changes)], capture_output=True, text=True, check=True)
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def _limits_with_nofile(soft: int, hard: int) -> str:
    lines = Path("/proc/self/limits").read_text().splitlines()
    for index, line in enumerate(lines):
        if line.startswith("Max open files"):
            lines[index] = f"{'Max open files':<25} {soft:<20} {hard:<20} {'files':<10}"
    return "\n".join(lines) + "\n"


def test_take_on_applies_what_a_child_can(tmp_path: Path) -> None:
    here = os.stat(tmp_path)
    report = _take_on({"cwd": str(tmp_path), "cwd_id": f"{here.st_dev}:{here.st_ino}", "nice": "7",
                       "umask": str(0o027), "limits": _limits_with_nofile(200, 300)})
    assert report == {"reason": None, "cwd": str(tmp_path), "nice": 7, "nofile": [200, 300], "tz": "JST",
                      "umask": 0o027}


def test_take_on_refuses_a_working_directory_missing_or_another_here(tmp_path: Path) -> None:
    missing = _take_on({"cwd": str(tmp_path / "nowhere")})
    assert "working directory not reachable" in missing["reason"]
    other = tmp_path / "other"
    other.mkdir()
    here = os.stat(tmp_path)
    moved = _take_on({"cwd": str(other), "cwd_id": f"{here.st_dev}:{here.st_ino}"})
    assert "another directory" in moved["reason"]


@pytest.mark.skipif(not IS_ROOT, reason="drops privileges with setpriv")
def test_take_on_refuses_what_needs_privilege_it_lacks() -> None:
    """Without CAP_SYS_NICE and CAP_SYS_RESOURCE: no lower niceness, no higher hard limit (cold)."""
    unprivileged = ["setpriv", "--inh-caps=-all", "--bounding-set=-sys_nice,-sys_resource", "nice", "-n5"]
    lower = _take_on({"nice": "0"}, unprivileged)
    assert "scheduling" in lower["reason"] and lower["nice"] == 5
    hard = int(Path("/proc/self/limits").read_text().split("Max open files")[1].split()[1])
    raised = _take_on({"limits": _limits_with_nofile(hard, hard + 1000)}, unprivileged)
    assert "Max open files" in raised["reason"]
    same = _take_on({"nice": "9"}, unprivileged)  # raising niceness needs nothing
    assert same["reason"] is None and same["nice"] == 9


@pytest.mark.skipif(not IS_ROOT, reason="makes a cgroup and drops privileges with setpriv")
def test_take_on_joins_the_launchers_cgroup_or_refuses() -> None:
    with _cgroup() as group:
        own = Path("/proc/self/cgroup").read_text()
        theirs = "".join(f"{line.rsplit(':', 1)[0]}:/{group.name}\n" if ":pids:" in line else line + "\n"
                         for line in own.splitlines())
        joined = _take_on({"cgroup": theirs})
        assert joined["reason"] is None
        (group / "cgroup.procs").chmod(0o444)  # now only a process that may override modes gets in
        refused = _take_on({"cgroup": theirs}, ["setpriv", "--inh-caps=-all", "--bounding-set=-dac_override"])
        assert "may not join" in refused["reason"]
