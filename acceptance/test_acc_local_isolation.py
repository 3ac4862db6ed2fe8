"""A tenant attacking another under the `local` driver (issue 25): the real backend, two projects, each
with a one-node Slurm cluster and a volume, and an attacker logged in as `ubuntu` on project A's node.

Every test is one attack, written as the attacker runs it as root of its node (`sudo`: the cluster's
user has it), and asserts that it fails and that the victim (project B) is untouched. What must hold: each
cluster's `ubuntu` has a host uid of its own and each node a user namespace whose root is an unprivileged
host uid; each node has its own PID namespace and its own root (nothing of the data directory reachable
from it, no host `/var/tmp`, `/dev/shm` or `/mnt`); the node firewall, in a network namespace the host
owns, lets only the backend's ssh in from the management address `.2` (every other address of the host is
subject to the security group's egress); deleting a cluster kills everything its nodes started, even with
the backend SIGKILLed mid-delete; deleting a volume deletes its data; `serve` refuses a data directory
another user owns.

Needs root, Linux and the Debian daemons, like test_acc_local_driver.py: it never skips.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import os
import pwd
import secrets
import shlex
import signal
import socketserver
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from acceptance.backend import BACKEND, Backend, _cli, _free_port, running_backend
from acceptance.cluster_backend import kill, restart
from acceptance.test_acc_local_driver import remove_by_hand
from backend.provisioning.drivers.local import preflight
from provider.client import GpuCloudClient
from provider.client.errors import Conflict, NotFound

# Unique per run: the sleeps a tenant starts are found on the host by their exact command line.
BASE = 1_000_000 + secrets.randbelow(8_000_000)
VICTIM_SLEEP, UNSHARED_SLEEP, FORKED_SLEEP, KILLED_UNSHARED_SLEEP, KILLED_FORKED_SLEEP, ROOT_SLEEP = range(
    BASE, BASE + 6)
TOKEN = secrets.token_hex(8)
MARK = "__attack_rc="
PTRACE = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
pid = int(sys.argv[1])
if libc.ptrace(16, pid, None, None) == 0:  # PTRACE_ATTACH
    os.waitpid(pid, 0)
    libc.ptrace(17, pid, None, None)  # PTRACE_DETACH
    print("attached")
else:
    print("refused", os.strerror(ctypes.get_errno()))
"""


@dataclass
class Tenant:
    name: str
    client: GpuCloudClient
    key: Path
    key_id: str
    cluster_id: str
    login: str
    volume_id: str

    @property
    def subnet(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Interface(f"{self.login}/22").network


@dataclass
class World:
    backend: Backend
    data: Path  # GPUCLOUD_DATA_DIR
    attacker: Tenant  # project A
    victim: Tenant  # project B
    keys: Path

    @property
    def clusters(self) -> Path:
        return self.data / "local" / "clusters"

    @property
    def volumes(self) -> Path:
        return self.data / "local" / "volumes"


@dataclass
class Attempt:
    rc: int
    out: str


# ---- helpers --------------------------------------------------------------------------------------------

def ssh(
    tenant: Tenant, command: str, *, key: Path | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`command` as the tenant's `ubuntu` on its login node."""
    return subprocess.run(
        ["ssh", "-i", str(key or tenant.key), "-o", "StrictHostKeyChecking=no",
         "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5",
         "-o", "LogLevel=ERROR", f"ubuntu@{tenant.login}", command],
        input=stdin, capture_output=True, text=True, timeout=90, check=False)


def run_as(tenant: Tenant, command: str) -> str:
    """What the tenant does legitimately on its own node: it must work."""
    done = ssh(tenant, command)
    assert done.returncode == 0, f"{tenant.name}: {command!r} exited {done.returncode}: {done.stderr}"
    return done.stdout


def attack(tenant: Tenant, command: str, *, stdin: str | None = None) -> Attempt:
    """The attacker's `command` on its node, as the node's root (`sudo`, which the cluster's user has):
    its exit status and output. The shell must have run (an unreachable node is a broken test, never a
    failed attack)."""
    as_root = f"sudo -n sh -c {shlex.quote(command)}"
    done = ssh(tenant, f"({as_root}) 2>&1; rc=$?; echo; echo {MARK}$rc", stdin=stdin)
    out, _, rc = done.stdout.rpartition(MARK)
    assert rc.strip().isdigit(), f"the attacker's shell did not run (ssh {done.returncode}): {done.stderr}"
    return Attempt(int(rc), out.strip())


def until(check: Callable[[], Any], seconds: float, what: str) -> Any:
    deadline = time.monotonic() + seconds
    while not (value := check()):
        assert time.monotonic() < deadline, f"{what} (after {seconds:.0f} s)"
        time.sleep(0.3)
    return value


def wait_running(client: GpuCloudClient, cluster_id: str, seconds: float = 180) -> dict[str, Any]:
    def running() -> dict[str, Any] | None:
        cluster = client.get_cluster(cluster_id)
        assert cluster["status"] != "FAILED", cluster["status_reason"]
        return cluster if cluster["status"] == "RUNNING" and cluster["phase"] == "Ready" else None

    return until(running, seconds, f"{cluster_id} is not RUNNING")  # type: ignore[no-any-return]


def delete_and_wait(client: GpuCloudClient, cluster_id: str, seconds: float = 180) -> None:
    with contextlib.suppress(NotFound):
        client.delete_cluster(cluster_id)
    wait_gone(client, cluster_id, seconds)


def wait_gone(client: GpuCloudClient, cluster_id: str, seconds: float) -> None:
    def gone() -> bool:
        try:
            client.get_cluster(cluster_id)
        except NotFound:
            return True
        return False

    until(gone, seconds, f"{cluster_id} was not deleted")


def host_pids(command_line: str) -> list[int]:
    """Live host processes (zombies excluded) whose command line is exactly `command_line`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().rstrip(b"\0").split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            if b" ".join(argv).decode(errors="replace") == command_line and state != "Z":
                found.append(int(entry.name))
    return found


def namespaces_of(cluster_id: str) -> list[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return [line.split()[0] for line in listed.splitlines() if line.startswith(f"gpc-{cluster_id}")]


def survivors_start(tenant: Tenant, unshared: int, forked: int) -> None:
    """As the tenant: a process in namespaces of its own and a double-forked orphan, both detached."""
    run_as(tenant, f"nohup setsid unshare -Urn sleep {unshared} >/dev/null 2>&1 </dev/null & "
                   f"( (sleep {forked} >/dev/null 2>&1 </dev/null &) & )")
    for command in (f"sleep {unshared}", f"sleep {forked}"):
        until(partial(host_pids, command), 10, f"the tenant's {command!r} never started")


def survivors(*numbers: int) -> dict[int, list[int]]:
    """Which of the tenant's `sleep <number>` still run on the host (killed ones get 10 s to go)."""
    def left() -> dict[int, list[int]]:
        return {number: pids for number in numbers if (pids := host_pids(f"sleep {number}"))}

    with contextlib.suppress(AssertionError):
        until(lambda: not left(), 10, "")
    return left()


def reaches(tenant: Tenant, address: str, port: int) -> bool:
    """Whether the tenant's node opens a TCP connection to address:port and reads the listener's line."""
    probe = attack(tenant, f"timeout 3 bash -c 'exec 3<>/dev/tcp/{address}/{port}; head -1 <&3'")
    return f"hello {TOKEN}" in probe.out


def project(backend: Backend, name: str) -> GpuCloudClient:
    """A second project and its admin key, made with the backend's CLI as acceptance/backend.py does."""
    env = {**os.environ, "GPUCLOUD_DATA_DIR": str(backend.data_dir)}
    _cli(env, "create-project", name)
    return GpuCloudClient(backend.url, _cli(env, "create-api-key", "--project", name, "--role", "admin"),
                          max_retries=2)


def keypair(directory: Path, name: str) -> tuple[Path, str]:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(directory / name)], check=True)
    return directory / name, (directory / f"{name}.pub").read_text().strip()


def tenant(client: GpuCloudClient, name: str, keys: Path) -> Tenant:
    """A key, a volume and a one-node Slurm cluster (the smallest type) with the volume, being created."""
    key, public = keypair(keys, name)
    key_id = client.create_ssh_key(name=name, public_key=public, idempotency_key=f"{name}-k-{TOKEN}")["id"]
    volume = client.create_volume(name=name, region="us-east-1", size_tib=1,
                                  idempotency_key=f"{name}-v-{TOKEN}")
    cluster = client.create_cluster(
        {"name": name, "region": "us-east-1", "instance_type": "1xH100", "node_count": 1,
         "orchestrator": "slurm", "ssh_key_ids": [key_id], "volume_ids": [volume["id"]]},
        idempotency_key=f"{name}-c-{TOKEN}")
    return Tenant(name, client, key, key_id, cluster["id"], "", volume["id"])


def remove_leftovers(root: Path, data: Path) -> None:
    """What remove_by_hand left behind (a test run against a broken driver can leave anything): every
    process started for this data dir (its path on the command line: node inits, daemons, SSH masters),
    the namespaces and bridges of its clusters, and the mounts under `root`."""
    clusters = data / "local" / "clusters"
    ids = [cluster.name for cluster in clusters.iterdir()] if clusters.exists() else []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError):
            if entry.name.isdigit() and str(data).encode() in (entry / "cmdline").read_bytes():
                os.kill(int(entry.name), signal.SIGKILL)
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    for netns in [line.split()[0] for line in listed.splitlines()
                  if any(line.startswith(f"gpc-{cluster_id}-") for cluster_id in ids)]:
        pids = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True, check=False)
        for pid in pids.stdout.split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        subprocess.run(["ip", "netns", "del", netns], capture_output=True, check=False)
    for cluster_id in ids:
        bridge = f"gpcb{hashlib.sha256(cluster_id.encode()).hexdigest()[:8]}"  # the driver's naming
        subprocess.run(["ip", "link", "del", bridge], capture_output=True, check=False)
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    for mount in sorted((m for m in mounts if m.startswith(f"{root}/")), key=len, reverse=True):
        subprocess.run(["umount", "-l", mount], capture_output=True, check=False)


# ---- the two tenants ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    # Under /var/tmp as test_acc_local_driver.py; the backend makes the data dir itself (its own modes).
    root = Path("/var/tmp") / f"gpucloud-acc-isolation-{time.monotonic_ns()}"
    root.mkdir(parents=True)
    data = root / "data"
    volume_ids: list[str] = []
    clients: list[GpuCloudClient] = []
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("GPUCLOUD_DRIVER", "local")
            free = [cidr for cidr in ("172.30.0.0/16", "10.0.0.0/16", "172.31.0.0/16", "192.168.224.0/19")
                    if preflight.conflicting_route(cidr) is None]
            assert free, "every candidate address block overlaps a route of this machine"
            patch.setenv("GPUCLOUD_LOCAL_ADDRESS_RANGE", free[0])
            with running_backend(data) as backend:
                try:
                    keys = tmp_path_factory.mktemp("keys")
                    attacker = tenant(backend.client, "alpha", keys)
                    clients.append(project(backend, "victim"))
                    victim = tenant(clients[0], "bravo", keys)
                    volume_ids += [attacker.volume_id, victim.volume_id]
                    for one in (attacker, victim):
                        one.login = wait_running(one.client, one.cluster_id)["login"]["public_ip"]
                    # B keeps a secret on its volume (readable by itself only) and a marked ~/.bashrc.
                    run_as(victim, f"umask 077 && echo {TOKEN} > /mnt/shared/{victim.volume_id}/secret && "
                                   f"echo 'export B_MARK={TOKEN}' >> ~/.bashrc")
                    yield World(backend, data, attacker, victim, keys)
                finally:
                    kill(backend)  # the process now running, which a restart may have replaced
                    for client in clients:
                        client.close()
    finally:
        failure: Exception | None = None
        try:
            remove_by_hand(data / "local")
        except Exception as error:  # the rest still goes; the error is raised at the end
            failure = error
        remove_leftovers(root, data)
        for number in range(BASE, BASE + 6):  # what escaped the nodes (started through the tenants)
            for pid in host_pids(f"sleep {number}"):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for leftover in (*Path("/var/tmp").glob(f"*{TOKEN}*"), *Path("/dev/shm").glob(f"*{TOKEN}*")):
            leftover.unlink(missing_ok=True)
        for volume_id in volume_ids:  # mount points a driver without its own node roots left on /mnt
            with contextlib.suppress(OSError):
                Path("/mnt/shared", volume_id).rmdir()
        subprocess.run(["rm", "-rf", str(root)], check=False)
        if failure is not None:
            raise failure


# ---- attacks from A's node ------------------------------------------------------------------------------

def test_acc_local_isolation_each_cluster_has_its_own_host_uid(world: World) -> None:
    """Attack: same uid everywhere. Every cluster's `ubuntu` was uid 1001 on one kernel, so A's user was
    B's user for every permission check. The host uids of A's and B's ubuntu (the owners, seen from the
    host, of a file each wrote in its home) differ, and neither is a host account's."""
    uids = {}
    for one in (world.attacker, world.victim):
        run_as(one, f"touch ~/uid-probe-{TOKEN}")
        probe = world.clusters / one.cluster_id / "home" / "ubuntu" / f"uid-probe-{TOKEN}"
        uids[one.name] = probe.stat().st_uid
    host_accounts = {entry.pw_uid: entry.pw_name for entry in pwd.getpwall()}
    assert uids["alpha"] != uids["bravo"], f"A's and B's ubuntu are the same host uid: {uids}"
    assert not set(uids.values()) & set(host_accounts), (uids, "host accounts:", host_accounts)


def test_acc_local_isolation_root_of_a_node_is_not_root_of_the_host(world: World) -> None:
    """Attack: root of A's node against the host. `sudo` makes A root of its node, whose processes are an
    unprivileged host uid of A's cluster's own (its user namespace), not 0; that root cannot flush the
    node's firewall (the host's network namespace), write the host's programs, make a device node or set
    a host sysctl."""
    became = run_as(world.attacker, f"sudo -n id -u && (sudo -n setsid sleep {ROOT_SLEEP} >/dev/null 2>&1 &)")
    assert became.split()[0] == "0", became
    pid = until(lambda: host_pids(f"sleep {ROOT_SLEEP}"), 10, "A's root sleep never started")[0]
    host_uid = next(line.split()[1] for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                    if line.startswith("Uid:"))
    namespace_base = (world.clusters / world.attacker.cluster_id / "namespace").read_text().strip()
    assert host_uid == namespace_base and int(host_uid) > 0, (host_uid, namespace_base)
    netns = next(line.split()[0] for line in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                                              text=True, check=True).stdout.splitlines()
                 if world.attacker.cluster_id in line)

    def firewall() -> str:
        return subprocess.run(["ip", "netns", "exec", netns, "nft", "list", "table", "inet", "gpucloud"],
                              capture_output=True, text=True, check=True).stdout

    before = firewall()
    attempts = {what: attack(world.attacker, command) for what, command in {
        "flushed the firewall": "nft flush ruleset",
        "remounted /usr read-write": "mount -o remount,rw /usr",
        "wrote to /usr": f"touch /usr/planted-{TOKEN}",
        "made a block device": f"mknod /dev/disk-{TOKEN} b 8 0",
        "set a sysctl": "sysctl -w net.ipv4.ip_forward=1",
    }.items()}
    assert not [got for got in attempts.values() if got.rc in (126, 127)], attempts  # every tool ran
    breaches = [f"A's root {what}: {got.out!r}" for what, got in attempts.items() if got.rc == 0]
    assert not breaches, "\n".join(breaches)
    assert firewall() == before and not Path(f"/usr/planted-{TOKEN}").exists()


def test_acc_local_isolation_victims_home_unreachable_through_the_host_path(world: World) -> None:
    """Attack: B's home through its host path. From A, read and write B's ~/.bashrc at
    `$DATA/local/clusters/<B>/home/ubuntu/.bashrc`: no such path from A's node, B's file unchanged."""
    bashrc = world.clusters / world.victim.cluster_id / "home" / "ubuntu" / ".bashrc"
    before = bashrc.read_text()
    assert f"B_MARK={TOKEN}" in before  # the host path is right: B's own line is there
    read = attack(world.attacker, f"cat {bashrc}")
    assert TOKEN not in read.out, f"A read B's ~/.bashrc: {read.out!r}"
    assert read.rc != 0, read.out
    write = attack(world.attacker, f"echo '# planted by A' >> {bashrc}")
    assert bashrc.read_text() == before, "A wrote into B's ~/.bashrc"
    assert write.rc != 0, write.out


def test_acc_local_isolation_victims_volume_and_the_data_dir_unreachable(world: World) -> None:
    """Attack: B's volume through the host path. From A, read `$DATA/local/volumes/<B vol>/secret`, plant
    a file beside it, and list `$DATA`: all fail, and B's volume holds what B put there, nothing else."""
    volume = world.volumes / world.victim.volume_id
    assert (volume / "secret").read_text().strip() == TOKEN  # the host path is right
    stolen = attack(world.attacker, f"cat {volume}/secret")
    planted = attack(world.attacker, f"echo planted > {volume}/planted-by-a")
    listed = attack(world.attacker, f"ls -la {world.data}")
    breaches = [f"A read B's secret: {stolen.out!r}"] if TOKEN in stolen.out or stolen.rc == 0 else []
    if planted.rc == 0 or (volume / "planted-by-a").exists():
        breaches.append("A planted a file in B's volume")
    if listed.rc == 0:
        breaches.append(f"A listed the data dir: {listed.out!r}")
    assert not breaches, "\n".join(breaches)
    assert sorted(p.name for p in volume.iterdir()) == ["secret"]
    assert (volume / "secret").read_text().strip() == TOKEN


def test_acc_local_isolation_database_unreadable(world: World) -> None:
    """Attack: the backend's database. `$DATA/gpucloud.db` (every project's keys, clusters, secrets) was
    0644 and readable from every node. From A it cannot be read; on the host the data dir is 0700 and the
    database files 0600."""
    database = world.data / "gpucloud.db"
    assert database.read_bytes().startswith(b"SQLite format 3")
    read = attack(world.attacker, f"head -c 15 {database}")
    assert "SQLite format 3" not in read.out and read.rc != 0, f"A read the database: {read.out!r}"
    modes = {path.name: oct(stat.S_IMODE(path.stat().st_mode))
             for path in (world.data, *world.data.glob("gpucloud.db*"))}
    assert modes == {"data": "0o700", **{p.name: "0o600" for p in world.data.glob("gpucloud.db*")}}, modes


def test_acc_local_isolation_victims_process_out_of_reach(world: World) -> None:
    """Attack: B's processes. B runs `sleep` with a secret in its environment; from A, with its host pid:
    `/proc/<pid>/environ`, `ps` (B's process or the backend's command line), ptrace attach, `kill -9`.
    All fail and B's process still runs."""
    run_as(world.victim,
           f"env SECRET_B={TOKEN} setsid nohup sleep {VICTIM_SLEEP} >/dev/null 2>&1 </dev/null &")
    pid = until(lambda: host_pids(f"sleep {VICTIM_SLEEP}"), 10, "B's sleep never started")[0]
    assert f"SECRET_B={TOKEN}".encode() in Path(f"/proc/{pid}/environ").read_bytes()  # the right process
    breaches = []
    environ = attack(world.attacker, f"tr '\\0' '\\n' < /proc/{pid}/environ")
    if TOKEN in environ.out:
        breaches.append(f"A read B's environment: /proc/{pid}/environ gave SECRET_B")
    listed = attack(world.attacker, "ps -eo pid,args")
    assert "ps -eo pid,args" in listed.out, listed.out  # ps ran and shows at least itself
    for seen in (f"sleep {VICTIM_SLEEP}", "gpucloud-backend"):
        if seen in listed.out:
            line = next(line for line in listed.out.splitlines() if seen in line)
            breaches.append(f"A's ps shows {seen!r}: {line.strip()}")
    traced = attack(world.attacker, f"python3 - {pid}", stdin=PTRACE)
    assert "attached" in traced.out or "refused" in traced.out, traced.out  # the probe ran
    if "attached" in traced.out:
        breaches.append(f"A ptrace-attached B's process {pid}")
    killed = attack(world.attacker, f"kill -9 {pid}")
    if killed.rc == 0:
        breaches.append(f"A's kill -9 {pid} succeeded")
    time.sleep(0.5)
    if pid not in host_pids(f"sleep {VICTIM_SLEEP}"):
        breaches.append("B's process is dead")
    assert not breaches, "\n".join(breaches)


def test_acc_local_isolation_victims_munge_socket_unusable(world: World) -> None:
    """Attack: B's munge. From A, `munge -n -S <B's munge socket>` (its host path under
    `$DATA/local/clusters/<B>/nodes/*/munge-run/`) mints no credential for B's cluster."""
    sockets = sorted((world.clusters / world.victim.cluster_id / "nodes").glob("*/munge-run/munge.socket.2"))
    assert sockets, "B's munge socket is not where the driver puts it"
    # From the socket's directory: its full path is longer than a socket address may be (108 bytes).
    minted = attack(world.attacker, f"cd {sockets[0].parent} && munge -n -S ./{sockets[0].name}")
    assert "MUNGE:" not in minted.out and minted.rc != 0, f"A minted a credential on B's munged: {minted.out}"


def test_acc_local_isolation_var_tmp_and_dev_shm_are_the_nodes_own(world: World) -> None:
    """Attack: shared scratch space. Files B writes to /var/tmp and /dev/shm, and files the host has there,
    are not visible from A's node (each node has its own)."""
    content = secrets.token_hex(8)  # not in the names: an error message naming the file is no breach
    names = [f"/var/tmp/victim-{TOKEN}", f"/dev/shm/victim-{TOKEN}"]
    mine = run_as(world.victim, " && ".join(f"echo {content} > {name} && cat {name}" for name in names))
    assert mine.split() == [content, content]  # B reads back what it wrote
    host = [Path(f"/var/tmp/host-{TOKEN}"), Path(f"/dev/shm/host-{TOKEN}")]
    for path in host:
        path.write_text(content)
    seen = {name: attack(world.attacker, f"cat {name}") for name in (*names, *map(str, host))}
    assert not {name for name, got in seen.items() if content in got.out or got.rc == 0}, seen


def test_acc_local_isolation_host_addresses_obey_the_security_group(world: World) -> None:
    """Attack: egress through the management address. A host service on 0.0.0.0 was reachable from every
    node at the bridge's `.2` whatever the security group said. With a group whose egress covers no host
    address, A's node reaches neither `.2` nor `.1`; the backend still manages the node (a key added in
    place works)."""

    class Hello(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            self.request.sendall(f"hello {TOKEN}\n".encode())

    server = socketserver.ThreadingTCPServer(("0.0.0.0", 0), Hello)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        a = world.attacker
        gateway, management = str(a.subnet.network_address + 1), str(a.subnet.network_address + 2)
        # The project's default group lets everything out: the listener answers on both (the test's premise).
        assert reaches(a, gateway, port) and reaches(a, management, port)
        group = a.client.request("POST", "/v1/security-groups", idempotency_key=f"sg-{TOKEN}", json={
            "name": "no-host",
            "ingress": [{"protocol": "tcp", "from_port": 22, "cidr_blocks": ["0.0.0.0/0"]}],
            "egress": [{"protocol": "all", "cidr_blocks": ["198.51.100.0/24"]}]}).body
        a.client.update_cluster(a.cluster_id, {"security_group_ids": [group["id"]]})
        wait_running(a.client, a.cluster_id)
        until(lambda: not reaches(a, gateway, port), 60, f"the group's egress was never applied ({gateway})")
        assert not reaches(a, management, port), f"A's node reached the host's service at {management}:{port}"

        # The backend still manages the node: an SSH key added in place lets its holder in.
        key, public = keypair(world.keys, "alpha-second")
        second = a.client.create_ssh_key(name="alpha-second", public_key=public,
                                          idempotency_key=f"alpha-k2-{TOKEN}")
        a.client.update_cluster(a.cluster_id, {"ssh_key_ids": [a.key_id, second["id"]]})
        wait_running(a.client, a.cluster_id)
        until(lambda: ssh(a, "true", key=key).returncode == 0, 60,
              "the key added in place never let its holder in")
    finally:
        server.shutdown()
        server.server_close()


def test_acc_local_isolation_no_volume_mount_points_on_the_hosts_mnt(world: World) -> None:
    """Attack surface: host directories outside the data dir. With clusters and their volumes running, the
    host's own /mnt/shared holds none of the volume ids (nodes mount inside their own root)."""
    ids = (world.attacker.volume_id, world.victim.volume_id)
    left = [volume_id for volume_id in ids if Path("/mnt/shared", volume_id).exists()]
    assert not left, f"the host's /mnt/shared has {left}"


def test_acc_local_isolation_serve_refuses_a_data_dir_owned_by_another_user() -> None:
    """Attack: a squatted data dir. Another user (nobody) made the data dir before the backend started:
    `serve` exits non-zero within seconds, naming the path, rather than putting secrets in it."""
    squatted = Path("/var/tmp") / f"gpucloud-acc-squatted-{time.monotonic_ns()}"
    squatted.mkdir()
    os.chown(squatted, 65534, 65534)
    env = {**{name: value for name, value in os.environ.items() if name != "GPUCLOUD_DRIVER"},
           "GPUCLOUD_DATA_DIR": str(squatted), "GPUCLOUD_HOST": "127.0.0.1",
           "GPUCLOUD_PORT": str(_free_port())}
    process = subprocess.Popen([str(BACKEND), "serve"], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
    finally:
        subprocess.run(["rm", "-rf", str(squatted)], check=False)
    assert process.returncode not in (0, None, -9), f"serve ran in a data dir nobody owns:\n{output[-2000:]}"
    assert str(squatted) in output, output[-2000:]


# ---- destructive: deleting clusters and volumes ---------------------------------------------------------

def test_acc_local_isolation_nothing_outlives_a_deleted_cluster(world: World) -> None:
    """Attack: a process that outlives its cluster. A starts `nohup setsid unshare -Urn sleep` and a
    double-forked sleep, then deletes its cluster through the API: neither remains on the host, nor any of
    the cluster's namespaces."""
    a = world.attacker
    survivors_start(a, UNSHARED_SLEEP, FORKED_SLEEP)
    delete_and_wait(a.client, a.cluster_id)
    left = survivors(UNSHARED_SLEEP, FORKED_SLEEP)
    assert not left, f"processes of the deleted cluster still run on the host: {left}"
    assert not namespaces_of(a.cluster_id)


def test_acc_local_isolation_nothing_outlives_a_delete_the_backend_died_in(world: World) -> None:
    """Attack: a survivor when the delete is interrupted. A third cluster (project A) with the same two
    processes; DELETE, SIGKILL the backend right after, restart it: once the cluster is gone nothing of it
    remains on the host."""
    client = world.attacker.client
    cluster = client.create_cluster(
        {"name": "charlie", "region": "us-east-1", "instance_type": "1xH100", "node_count": 1,
         "orchestrator": "slurm", "ssh_key_ids": [world.attacker.key_id]}, idempotency_key=f"charlie-{TOKEN}")
    login = wait_running(client, cluster["id"])["login"]["public_ip"]
    third = Tenant("charlie", client, world.attacker.key, world.attacker.key_id, cluster["id"], login, "")
    survivors_start(third, KILLED_UNSHARED_SLEEP, KILLED_FORKED_SLEEP)
    client.delete_cluster(cluster["id"])
    kill(world.backend)
    restart(world.backend, {"GPUCLOUD_DRIVER": "local"})
    wait_gone(client, cluster["id"], 180)
    left = survivors(KILLED_UNSHARED_SLEEP, KILLED_FORKED_SLEEP)
    assert not left, f"processes of the deleted cluster still run on the host: {left}"
    assert not namespaces_of(cluster["id"])


def test_acc_local_isolation_deleted_volume_leaves_no_data(world: World) -> None:
    """Attack: data of a deleted volume. Once A's cluster is gone and A deletes its volume through the
    API, the volume's host directory `$DATA/local/volumes/<id>` is gone with it."""
    a = world.attacker
    delete_and_wait(a.client, a.cluster_id)  # done already by the test above; not relied upon
    directory = world.volumes / a.volume_id
    run_as(world.victim, "true")  # the host keeps going: B is untouched
    assert directory.is_dir()

    def deleted() -> bool:
        try:
            a.client.delete_volume(a.volume_id)
        except Conflict:  # still detaching from the deleted cluster
            return False
        return True

    until(deleted, 60, "A's volume could not be deleted")
    with contextlib.suppress(AssertionError):
        until(lambda: not directory.exists(), 15, "")
    assert not directory.exists(), f"the deleted volume's data stays on the host: {list(directory.iterdir())}"
