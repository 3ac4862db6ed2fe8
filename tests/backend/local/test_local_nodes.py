"""Real nodes on this machine: namespaces running munge, Slurm and sshd with the generated files.

Needs root, `ip netns` and Debian's slurmctld, slurmd, munge and openssh-server (.ci/run installs
them); nothing here is mocked. Every address lives inside namespaces this test makes.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from backend.fabric import slurm
from backend.provisioning.local.namespaces import NETNS_PREFIX, LocalCluster, LocalNode, run
from backend.provisioning.local.node_setup import (
    LOCAL_SLURM_HOST,
    node_binds,
    set_authorized_keys,
    start_services,
    write_cluster_files,
)
from tests.backend.engine.test_fabric import layout


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    root = Path("/var/tmp") / f"gpucloud-local-test-{uuid.uuid4().hex[:8]}"
    local = LocalCluster(root, f"t{uuid.uuid4().hex[:6]}", "10.0.4.0/22")
    try:
        yield local
    finally:
        local.down()
        subprocess.run(["umount", str(local.ns_dir)], check=False, capture_output=True)
        subprocess.run(["rm", "-rf", str(root)], check=False)


def _ssh(key: Path, host: str, command: str) -> subprocess.CompletedProcess[str]:
    return run(["ssh", "-i", str(key), "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "-o", "LogLevel=ERROR", f"ubuntu@{host}",
                command], check=False, timeout=60)


def _wait_for(check: str, node: LocalNode, expected: str, seconds: float = 60) -> str:
    deadline = time.monotonic() + seconds
    output = ""
    while time.monotonic() < deadline:
        output = node.exec(["sh", "-c", check], check=False).stdout.strip()
        if output == expected:
            return output
        time.sleep(0.5)
    raise AssertionError(f"{check!r} printed {output!r}, wanted {expected!r}")


def test_local_nodes_run_slurm_jobs_over_ssh_and_leave_nothing(cluster: LocalCluster, tmp_path: Path) -> None:
    placed = layout(2)
    files = {"slurm.conf": slurm.slurm_conf(placed, LOCAL_SLURM_HOST),
             "gres.conf": slurm.gres_conf(placed, LOCAL_SLURM_HOST),
             "cgroup.conf": slurm.cgroup_conf(placed, LOCAL_SLURM_HOST),
             "topology.conf": slurm.topology_conf(placed)}
    for name in ("alice", "bob"):
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / name)])
    keys = {name: (tmp_path / f"{name}.pub").read_text() for name in ("alice", "bob")}
    cluster.up()
    hosts = slurm.hosts_file(placed)
    write_cluster_files(cluster, slurm_files=files, hosts=hosts, authorized_keys=keys.values())
    assert placed.jumphost_ip is not None
    jumphost = cluster.node(placed.controller, placed.jumphost_ip)
    workers = [cluster.node(n.name, n.private_ip) for n in placed.nodes]
    for node in (jumphost, *workers):
        node.create(node_binds(node))
    start_services(jumphost, controller=True, worker=False, login=True)
    for worker in workers:
        start_services(worker, controller=False, worker=True, login=False)

    _wait_for('sinfo -h -o "%D %T"', jumphost, "2 idle")
    ran = _ssh(tmp_path / "alice", jumphost.address, "srun -N2 hostname")
    assert sorted(ran.stdout.split()) == ["train-0", "train-1"], ran.stderr
    # The user exists only inside the cluster; the home directory is shared by every node.
    assert "ubuntu" not in Path("/etc/passwd").read_text()
    shared = _ssh(tmp_path / "alice", jumphost.address,
                  "srun -w train-0 sh -c 'hostname > ~/from-0' && srun -w train-1 cat ~/from-0")
    assert shared.stdout.strip() == "train-0", shared.stderr

    set_authorized_keys(cluster, [keys["bob"]])
    assert _ssh(tmp_path / "alice", jumphost.address, "true").returncode != 0
    assert _ssh(tmp_path / "bob", jumphost.address, "hostname").stdout.strip() == "train-jumphost"

    pids = [pid for node in (jumphost, *workers) for pid in node.pids()]
    assert pids
    cluster.down()
    namespaces = run(["ip", "netns", "list"]).stdout.split()
    assert not [ns for ns in namespaces if ns.startswith(f"{NETNS_PREFIX}{cluster.key}")]
    deadline = time.monotonic() + 10  # killed processes are reaped by init, not by us
    while [pid for pid in pids if Path(f"/proc/{pid}").exists()] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()]
    assert cluster.bridge not in run(["ip", "-br", "link"]).stdout
    assert str(cluster.dir) not in Path("/proc/self/mountinfo").read_text()
    assert not cluster.dir.exists()
