"""A Slurm cluster on a pool's servers, made and given back over SSH as the pool's user: two stand-in servers
(tests/backend/local/stand_in_hosts.py) claimed by a cluster, configured with the node configuration the local
driver uses, running `srun -N2` as the cluster's user, who logs in with the cluster's key; then released
leaving no daemon, user, file or firewall table of the cluster, and reused by a second cluster.

Needs root and `ip netns` (.ci/run); every address lives inside namespaces this test makes.
"""

from __future__ import annotations

import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from backend.domain.catalog import default_catalog
from backend.fabric import slurm
from backend.fabric.layout import ClusterLayout, NodeLayout
from backend.provisioning.drivers.ssh_hosts import footprint, host_nodes
from backend.provisioning.drivers.ssh_hosts.driver import SLURM_HOST
from backend.provisioning.drivers.ssh_hosts.host_nodes import HostTaken, PoolAccess, PoolHost, PoolLogin
from backend.provisioning.node_config import configure as node_config
from backend.provisioning.node_config import firewall
from backend.provisioning.node_config.shell import NodeShell
from tests.backend.local.stand_in_hosts import StandIns, openssh, private_key, public, stand_in_hosts

SUBNET = "10.0.9.0/24"
USER = "ubuntu"
UID = 2_999_901


@pytest.fixture(scope="module")
def stand_ins() -> Iterator[StandIns]:
    with stand_in_hosts(SUBNET, ("host-a", "host-b"), gpu_hosts=("host-a", "host-b"), gpus=8) as hosts:
        yield hosts


@pytest.fixture
def access(stand_ins: StandIns, tmp_path: Path) -> Iterator[PoolAccess]:
    hosts = [PoolHost(name, node.address, 22, stand_ins.host_key) for name, node in stand_ins.nodes.items()]
    opened = PoolAccess(tmp_path / "pool", PoolLogin("root", stand_ins.private_key), hosts)
    yield opened
    opened.close()


def _files(cluster_name: str, addresses: list[str], controller_hostname: str) -> tuple[dict[str, str], str]:
    catalog = default_catalog()
    itype, fabric = catalog.instance_type("8xH100"), catalog.fabric("us-east-1", "ib-east-a")
    assert itype is not None and fabric is not None
    nodes = tuple(NodeLayout(f"{cluster_name}-{i}", i, i, 0, address) for i, address in enumerate(addresses))
    layout = ClusterLayout(
        f"clu_{cluster_name}",
        cluster_name,
        "us-east-1",
        "slurm",
        "ethernet",
        itype,
        fabric,
        SUBNET,
        None,
        nodes,
    )
    files = {
        "slurm.conf": slurm.slurm_conf(layout, SLURM_HOST, controller_hostname=controller_hostname),
        "gres.conf": slurm.gres_conf(layout, SLURM_HOST),
        "cgroup.conf": slurm.cgroup_conf(layout, SLURM_HOST),
    }
    return files, slurm.hosts_file(layout)


def _make_cluster(
    stand_ins: StandIns, access: PoolAccess, cluster_name: str, user_key: str
) -> dict[str, NodeShell]:
    """The cluster on both servers: host-a is `<name>-0` and its controller, host-b `<name>-1`."""
    names = {"host-a": f"{cluster_name}-0", "host-b": f"{cluster_name}-1"}
    shells = {
        name: access.shell(PoolHost(name, node.address, 22, stand_ins.host_key))
        for name, node in stand_ins.nodes.items()
    }
    files, hosts = _files(cluster_name, [node.address for node in stand_ins.nodes.values()], "host-a")
    config = node_config.NodeConfig(
        user=USER,
        uid=UID,
        public_keys=(user_key,),
        hosts=hosts,
        home=None,
        volume_root="/mnt/shared",
        munge_key=secrets.token_bytes(1024),
        slurm_files=files,
    )
    rules = firewall.ruleset(
        {
            "ingress": [{"protocol": "tcp", "from_port": 22, "to_port": 22, "cidr_blocks": ["0.0.0.0/0"]}],
            "egress": [{"protocol": "all", "cidr_blocks": ["0.0.0.0/0"]}],
        },
        peers=SUBNET,
        outsider=None,
        management=stand_ins.bridge.management,
    )
    for shell in shells.values():
        host_nodes.join(shell, f"clu_{cluster_name}", config, rules)
    node_config.start_daemons(shells["host-a"], ["munged", "slurmctld"])
    for host, shell in shells.items():
        host_nodes.start_slurmd(shell, names[host])
    _until(
        lambda: all(
            node_config.slurm_node_state(shells["host-a"], name) == "idle" for name in names.values()
        ),
        "both nodes idle in Slurm",
    )
    return shells


def _until(condition, what: str, seconds: float = 60) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.3)
    raise AssertionError(f"not within {seconds:.0f} s: {what}")


def _snapshot(shell: NodeShell) -> str:
    """What a cluster may change on a server: the managed paths' content, users, daemons, firewall."""
    paths = " ".join(footprint.MANAGED_PATHS)
    script = (
        f'for p in {paths}; do [ -e "$p" ] && find "$p" -xdev -printf \'%p %m %u\\n\'; done | sort\n'
        "md5sum /etc/hosts; getent passwd " + USER + " || echo no-user\n"
        "pgrep -l -x 'slurmd|slurmctld|munged|slurmstepd' || echo no-daemons\n"
        "nft list tables 2>/dev/null | grep gpucloud || echo no-table\n"
        "ls /home; ls /etc/ssh/sshd_config.d\n"
    )
    return shell.run_script(script, what="snapshot").stdout


def _login(
    stand_ins: StandIns, key_file: Path, address: str, command: str
) -> subprocess.CompletedProcess[str]:
    known = key_file.with_name("known_hosts")
    known.write_text(f"{address} {stand_ins.host_key}\n")
    argv = [
        "ssh",
        "-F",
        "none",
        "-i",
        str(key_file),
        "-o",
        "BatchMode=yes",
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        f"UserKnownHostsFile={known}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "ConnectTimeout=5",
        f"{USER}@{address}",
        command,
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def test_a_cluster_on_two_servers_runs_jobs_and_leaves_no_trace(
    stand_ins: StandIns, access: PoolAccess, tmp_path: Path
) -> None:
    user_key = private_key()
    key_file = tmp_path / "id_user"
    key_file.write_text(openssh(user_key))
    key_file.chmod(0o600)
    before = {
        host: _snapshot(access.shell(PoolHost(host, node.address, 22, stand_ins.host_key)))
        for host, node in stand_ins.nodes.items()
    }

    shells = _make_cluster(stand_ins, access, "first", public(user_key))
    # The cluster's user logs in to its controller with the cluster's key and runs a job on both servers.
    done = _login(stand_ins, key_file, stand_ins.nodes["host-a"].address, "srun -N2 hostname")
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.split()) == ["host-a", "host-b"]
    # A server is one cluster's at a time.
    with pytest.raises(HostTaken, match="already a node of cluster clu_first"):
        host_nodes.claim(shells["host-b"], "clu_other", USER)

    for shell in shells.values():
        host_nodes.release(shell, "clu_first", USER)
        host_nodes.release(shell, "clu_first", USER)  # again, as after a crash: nothing left to do
    for host, shell in shells.items():
        assert _snapshot(shell) == before[host], host
    refused = _login(stand_ins, key_file, stand_ins.nodes["host-a"].address, "true")
    assert refused.returncode == 255  # the cluster's user and key are gone

    # The same servers serve the next cluster.
    again = _make_cluster(stand_ins, access, "second", public(user_key))
    done = _login(stand_ins, key_file, stand_ins.nodes["host-b"].address, "sinfo -h -o %D")
    assert (done.returncode, done.stdout.strip()) == (0, "2"), done.stderr
    for shell in again.values():
        host_nodes.release(shell, "clu_second", USER)
    for host, shell in again.items():
        assert _snapshot(shell) == before[host], host


def test_mpi_across_servers_and_a_dead_slurmd_found_and_restarted(
    stand_ins: StandIns, access: PoolAccess, tmp_path: Path
) -> None:
    user_key = private_key()
    key_file = tmp_path / "id_user"
    key_file.write_text(openssh(user_key))
    key_file.chmod(0o600)
    program = tmp_path / "mpi_allreduce"
    source = Path(__file__).with_name("data") / "mpi_allreduce.c"
    subprocess.run(["mpicc", "-O2", "-o", str(program), str(source)], check=True, capture_output=True)
    # A claim cut short (the backend killed before the owner file) is made again from the start.
    shell_b = access.shell(PoolHost("host-b", stand_ins.nodes["host-b"].address, 22, stand_ins.host_key))
    shell_b.run_script(
        f"mkdir -p {footprint.STATE_DIR} && echo /etc/hosts > {footprint.STATE_DIR}/present",
        what="leave a partial claim",
    )
    shells = _make_cluster(stand_ins, access, "third", public(user_key))
    try:
        for shell in shells.values():  # each server's own copy in the user's home (no shared storage)
            shell.write_file(f"/home/{USER}/mpi_allreduce", program.read_bytes(), mode=0o755, owner=USER)
        done = _login(
            stand_ins, key_file, stand_ins.nodes["host-a"].address, "srun -N2 --mpi=pmix ./mpi_allreduce"
        )
        assert done.returncode == 0, done.stderr
        assert sorted(done.stdout.splitlines()) == ["rank 0 of 2: sum 3", "rank 1 of 2: sum 3"]

        shells["host-b"].run(["pkill", "-x", "slurmd"])
        _until(
            lambda: (
                not node_config.read_health(shells["host-b"], host_nodes.KERNEL_LOG_COMMAND).slurmd_running
            ),
            "slurmd found stopped",
        )
        host_nodes.start_slurmd(shells["host-b"], "third-1")  # the repair of a server: its daemons again
        assert node_config.read_health(shells["host-b"], host_nodes.KERNEL_LOG_COMMAND).slurmd_running
        _until(
            lambda: node_config.slurm_node_state(shells["host-a"], "third-1") == "idle", "third-1 idle again"
        )
    finally:
        for shell in shells.values():
            host_nodes.release(shell, "clu_third", USER)
