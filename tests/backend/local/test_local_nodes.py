"""Real nodes on this machine: namespaces booted by the host, then configured over SSH like servers, running
munge, Slurm and sshd with the generated files.

Needs root, `ip netns` and Debian's slurmctld, slurmd, munge and openssh-server (.ci/run installs
them); nothing here is mocked. Every address lives inside namespaces this test makes.
"""

from __future__ import annotations

import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from backend.fabric import slurm
from backend.provisioning.drivers.local.driver import shell_of, tear_down
from backend.provisioning.drivers.local.namespaces import NETNS_PREFIX, LocalCluster, LocalNode, run
from backend.provisioning.drivers.local.node_setup import (
    EXPORTS,
    LOCAL_SLURM_HOST,
    cluster_id_map,
    cluster_uid,
    control_dir,
    munge_key,
    node_binds,
    prepare_cluster,
    start_sshd,
)
from backend.provisioning.node_config import accounting
from backend.provisioning.node_config.configure import Mount, NodeConfig, configure, set_access, start_daemons
from tests.backend.engine.test_fabric import layout


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    root = Path("/var/tmp") / f"gpucloud-local-test-{uuid.uuid4().hex[:8]}"
    local = LocalCluster(root, f"t{uuid.uuid4().hex[:6]}", "10.0.4.0/22")
    try:
        yield local
    finally:
        tear_down(local)
        subprocess.run(["rm", "-rf", str(root)], check=False)


def _ssh(key: Path, host: str, command: str) -> subprocess.CompletedProcess[str]:
    return run(["ssh", "-i", str(key), "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "-o", "LogLevel=ERROR", f"ubuntu@{host}",
                command], check=False, timeout=60)


def _wait_for(check: str, node: LocalNode, expected: str, seconds: float = 60) -> str:
    deadline = time.monotonic() + seconds
    output = ""
    while time.monotonic() < deadline:
        output = shell_of(node).run(["sh", "-c", check], check=False).stdout.strip()
        if output == expected:
            return output
        time.sleep(0.5)
    raise AssertionError(f"{check!r} printed {output!r}, wanted {expected!r}")


def _masters(cluster: LocalCluster) -> list[str]:
    """SSH connection masters of the cluster still running (their title names their socket)."""
    ps = run(["ps", "-ewwo", "args"]).stdout.splitlines()
    return [line for line in ps if str(control_dir(cluster)) in line and "[mux]" in line]


def test_local_nodes_booted_then_configured_over_ssh_run_slurm_jobs_and_leave_nothing(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    placed = layout(2)
    files = {"slurm.conf": slurm.slurm_conf(placed, LOCAL_SLURM_HOST),
             "gres.conf": slurm.gres_conf(placed, LOCAL_SLURM_HOST),
             "cgroup.conf": slurm.cgroup_conf(placed, LOCAL_SLURM_HOST),
             "topology.conf": slurm.topology_conf(placed)}
    for name in ("alice", "bob"):
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / name)])
    keys = {name: (tmp_path / f"{name}.pub").read_text() for name in ("alice", "bob")}
    # Boot (the host's part): bridge, namespaces, the node's disk and its sshd.
    cluster.up()
    id_map = cluster_id_map(cluster)
    prepare_cluster(cluster, id_map)
    assert placed.jumphost_ip is not None
    jumphost = cluster.node(placed.controller, placed.jumphost_ip)
    workers = [cluster.node(n.name, n.private_ip) for n in placed.nodes]
    for node in (jumphost, *workers):
        node.create(node_binds(node), id_map=id_map)
        start_sshd(node)
    # Configuration (over SSH only, as root with the backend's key, the host key pinned).
    config = NodeConfig(user="ubuntu", uid=cluster_uid(cluster), public_keys=tuple(keys.values()),
                        hosts=slurm.hosts_file(placed), home=Mount(f"{EXPORTS}/home", "/home"),
                        volume_root="/mnt/shared", munge_key=munge_key(cluster), slurm_files=files,
                        sudo=True)
    deadline = time.monotonic() + 30
    for node in (jumphost, *workers):
        while run(["ip", "netns", "exec", node.netns, "ss", "-ltn"]).stdout.count(":22 ") == 0:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        configure(shell_of(node), config)
    # slurmdbd answers before slurmctld starts
    accounting.start_if_kept(shell_of(jumphost), files["slurm.conf"], LOCAL_SLURM_HOST, "ubuntu")
    start_daemons(shell_of(jumphost), ["munged", "slurmctld"])
    for worker in workers:
        start_daemons(shell_of(worker), ["munged", "slurmd"])

    _wait_for('sinfo -h -o "%D %T"', jumphost, "2 idle")
    ran = _ssh(tmp_path / "alice", jumphost.address, "srun -N2 hostname")
    assert sorted(ran.stdout.split()) == ["train-0", "train-1"], ran.stderr
    # PMIx across the nodes' own roots and PID namespaces: each task gets its rank from the PMIx server.
    ranks = _ssh(tmp_path / "alice", jumphost.address, "srun --mpi=pmix -N2 sh -c 'echo $PMIX_RANK'")
    assert sorted(ranks.stdout.split()) == ["0", "1"], ranks.stderr
    # The user exists only inside the cluster; the home directory is shared by every node.
    assert "ubuntu" not in Path("/etc/passwd").read_text()
    shared = _ssh(tmp_path / "alice", jumphost.address,
                  "srun -w train-0 sh -c 'hostname > ~/from-0' && srun -w train-1 cat ~/from-0")
    assert shared.stdout.strip() == "train-0", shared.stderr
    # The user is root of its nodes with sudo, and that root is an unprivileged host uid of the cluster's
    # own (its user namespace): what it writes is that uid's on the host, and the node's firewall (in the
    # host's network namespace) is not its to change.
    became = _ssh(tmp_path / "alice", jumphost.address,
                  "sudo -n id -u && sudo -n touch /root/by-sudo && ! sudo -n nft flush ruleset 2>/dev/null")
    assert became.returncode == 0 and became.stdout.split() == ["0"], (became.stdout, became.stderr)
    assert (jumphost.dir / "root" / "by-sudo").stat().st_uid == id_map.base > 0
    # Root logs in with the backend's key only: a user's key is not root's.
    as_root = run(["ssh", "-i", str(tmp_path / "alice"), "-o", "StrictHostKeyChecking=no", "-o",
                   "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", f"root@{jumphost.address}", "true"],
                  check=False)
    assert as_root.returncode == 255 and "Permission denied" in as_root.stderr

    for node in (jumphost, *workers):
        set_access(shell_of(node), NodeConfig(**{**vars(config), "public_keys": (keys["bob"],)}))
    assert _ssh(tmp_path / "alice", jumphost.address, "true").returncode != 0
    assert _ssh(tmp_path / "bob", jumphost.address, "hostname").stdout.strip() == "train-jumphost"

    pids = [pid for node in (jumphost, *workers) for pid in node.pids()]
    assert pids and _masters(cluster)
    tear_down(cluster)
    namespaces = run(["ip", "netns", "list"]).stdout.split()
    assert not [ns for ns in namespaces if ns.startswith(f"{NETNS_PREFIX}{cluster.key}")]
    deadline = time.monotonic() + 10  # killed processes are reaped by init, not by us
    while [pid for pid in pids if Path(f"/proc/{pid}").exists()] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()]
    assert _masters(cluster) == [] and not control_dir(cluster).exists()
    assert cluster.bridge not in run(["ip", "-br", "link"]).stdout
    assert str(cluster.dir) not in Path("/proc/self/mountinfo").read_text()
    assert not cluster.dir.exists()


def test_local_cluster_bridge_keeps_its_mac_as_nodes_come_and_go(cluster: LocalCluster) -> None:
    """A bridge left to choose takes its lowest port's MAC and changes it as nodes' veths come and go:
    the nodes' neighbour entries for the host's addresses then point at a MAC nobody answers on (a user's
    ssh to the login timed out after a scale). Its MAC is pinned instead."""
    cluster.up()

    def bridge_mac() -> str:
        return Path(f"/sys/class/net/{cluster.bridge}/address").read_text().strip()

    assert bridge_mac() == cluster.mac
    first, second = cluster.node("n-0", "10.0.4.10"), cluster.node("n-1", "10.0.4.11")
    for node, mac in ((first, "00:00:5e:00:53:02"), (second, "00:00:5e:00:53:01")):
        node.create([])
        run(["ip", "link", "set", node.veth, "address", mac])  # lower than any the kernel picks
        assert bridge_mac() == cluster.mac
    second.destroy()
    assert bridge_mac() == cluster.mac
    cluster.up()  # idempotent
    assert bridge_mac() == cluster.mac


def test_local_user_reaches_the_login_from_the_gateway_after_a_node_joins(cluster: LocalCluster) -> None:
    """The failure the pinned MAC prevents, end to end: a node joins (its veth's MAC is the lowest), the
    backend's next packet to the login comes from `.2` (the host's ARP then names `.2` only), and the
    login must still answer a user's connection from `.1` at once."""
    cluster.up()
    login, worker = cluster.node("login", "10.0.4.4"), cluster.node("n-0", "10.0.4.10")
    for node, mac in ((login, "00:00:5e:00:53:10"), (worker, "00:00:5e:00:53:05")):
        node.create([])
        run(["ip", "link", "set", node.veth, "address", mac])  # the lowest: an unpinned bridge took it
    listener = subprocess.Popen(["ip", "netns", "exec", login.netns, "python3", "-c",
                                 "import socket, time; s = socket.socket(); s.bind(('0.0.0.0', 22)); "
                                 "s.listen(50); time.sleep(60)"])
    try:
        def connect(source: str) -> None:
            deadline = time.monotonic() + 10
            while True:
                try:
                    with socket.create_connection(("10.0.4.4", 22), timeout=3, source_address=(source, 0)):
                        return
                except ConnectionRefusedError:  # the listener is not up yet
                    assert time.monotonic() < deadline
                    time.sleep(0.1)

        connect(cluster.gateway)
        connect(cluster.management)
        joined = cluster.node("n-1", "10.0.4.11")
        joined.create([])
        run(["ip", "link", "set", joined.veth, "address", "00:00:5e:00:53:01"])
        connect(cluster.management)  # the backend configures the new node and the login
        connect(cluster.gateway)  # the user's ssh: timed out (3 s here) when the bridge's MAC followed
    finally:
        listener.kill()
        listener.wait()
