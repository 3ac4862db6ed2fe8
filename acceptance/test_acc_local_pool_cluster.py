"""gpucloud_gpu_cluster on a host pool with real Terraform, the real provider and the real backend: two
stand-in servers with 8 H200s each (tests/backend/local/stand_in_hosts.py: network namespaces with sshd)
registered as a `gpucloud_host_pool`, a 2-node Slurm cluster on it that the user logs into with the
published host key and runs `srun -N2` on, no drift after apply, a scale to one server, and a destroy that
gives both servers back as they were.

Needs root and `ip netns` (.ci/run); every address lives inside namespaces this test makes.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from acceptance.backend import Backend
from acceptance.gpucloud_steps import GpuCloudTerraform, apply_and_check, backend, gpucloud_tf, values
from acceptance.harness.waiting import wait_until
from acceptance.test_acc_host_pool import api_pool
from tests.backend.local.stand_in_hosts import StandIns, stand_in_hosts

__all__ = ["backend", "gpucloud_tf"]  # fixtures used by the tests below

ADDRESS = "gpucloud_gpu_cluster.own"


@pytest.fixture(scope="module")
def stand_ins() -> Iterator[StandIns]:
    servers = ("host-a", "host-b")
    with stand_in_hosts("10.0.11.0/24", servers, gpu_hosts=servers, gpus=8) as hosts:
        yield hosts


def config(stand_ins: StandIns, node_count: int | None) -> str:
    hosts = ", ".join(f'{{ address = "{node.address}" }}' for node in stand_ins.nodes.values())
    pool = f"""
    resource "gpucloud_host_pool" "lab" {{
      name                       = "lab"
      region                     = "on-prem"
      hosts                      = [{hosts}]
      ssh_private_key_wo         = file("${{path.module}}/pool_key")
      ssh_private_key_wo_version = 1
    }}

    resource "gpucloud_ssh_key" "me" {{
      name       = "me"
      public_key = file("${{path.module}}/user_key.pub")
    }}
    """
    if node_count is None:
        return pool
    return pool + f"""
    resource "gpucloud_gpu_cluster" "own" {{
      name         = "own"
      node_count   = {node_count}
      host_pool_id = gpucloud_host_pool.lab.id
      ssh_key_ids  = [gpucloud_ssh_key.me.id]
    }}
    """


def login(tf: GpuCloudTerraform, command: str) -> subprocess.CompletedProcess[str]:
    """`command` on the login node as the cluster's user, checking the host key the state publishes."""
    entry = values(tf, ADDRESS)["login"]
    known_hosts = tf.workdir / "known_hosts"
    known_hosts.write_text(f"{entry['host']} {entry['host_key']}\n")
    argv = ["ssh", "-F", "none", "-i", str(tf.workdir / "user_key"), "-o", "BatchMode=yes",
            "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={known_hosts}",
            "-o", "ConnectTimeout=5", f"{entry['user']}@{entry['host']}", command]
    return subprocess.run(argv, capture_output=True, text=True, timeout=90, check=False)


def lent(stand_ins: StandIns, host: str) -> str:
    """What shows a server is a cluster's node: its claim record, Slurm daemons, the cluster's user."""
    script = ("ls /var/lib/gpucloud-host 2>/dev/null | head -1; pgrep -x slurmd >/dev/null && echo slurmd; "
              "getent passwd ubuntu >/dev/null && echo user; true")
    argv = stand_ins.nodes[host].enter_argv(["sh", "-c", script])
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout.strip()


def test_acc_a_slurm_cluster_on_a_host_pool(
    gpucloud_tf: GpuCloudTerraform, backend: Backend, stand_ins: StandIns
) -> None:
    tf = gpucloud_tf("")
    key = tf.workdir / "pool_key"
    key.write_text(stand_ins.private_key)
    key.chmod(0o600)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tf.workdir / "user_key")],
                   check=True)
    # The pool first: a cluster takes only servers its checks found ready.
    tf.write_main(config(stand_ins, None))
    apply_and_check(tf)
    pool_id = values(tf, "gpucloud_host_pool.lab")["id"]
    wait_until(lambda: api_pool(backend, pool_id)["free_hosts"] == 2,
               lambda: str(api_pool(backend, pool_id)["hosts"]), seconds=60)

    tf.write_main(config(stand_ins, 2))
    apply_and_check(tf)
    cluster = values(tf, ADDRESS)
    assert cluster["host_pool_id"] == pool_id and cluster["estimated_hourly_cost_usd"] == 0
    # region and instance_type left out: the pool's region, the type of its servers (8 H200s each)
    chosen = (cluster["region"], cluster["instance_type"], cluster["orchestrator"])
    assert chosen == ("on-prem", "8xH200", "slurm"), chosen
    assert cluster["login"]["host"] == stand_ins.nodes["host-a"].address
    done = login(tf, "srun -N2 hostname")
    assert sorted(done.stdout.split()) == ["host-a", "host-b"], done.stderr
    assert [host["node"] for host in api_pool(backend, pool_id)["hosts"]] == ["own-0", "own-1"]

    tf.write_main(config(stand_ins, 1))
    apply_and_check(tf)
    assert lent(stand_ins, "host-b") == ""
    assert login(tf, "sinfo -h -o %D").stdout.split() == ["1"]

    tf.write_main(config(stand_ins, None))
    apply_and_check(tf)
    assert lent(stand_ins, "host-a") == "" and api_pool(backend, pool_id)["free_hosts"] == 2
    tf.destroy()
