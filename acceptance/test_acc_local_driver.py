"""gpucloud_gpu_cluster on the `local` driver: real Terraform, the real provider and backend, and a real
Slurm cluster on namespace nodes of this machine that a user logs into over SSH.

Needs root, Linux and Debian's slurmctld, slurmd, munge and openssh-server (.ci/run installs them): the
backend refuses to start without them, so a missing package fails this test, it never skips.
"""

from __future__ import annotations

import contextlib
import hashlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from acceptance.backend import Backend, running_backend
from acceptance.gpucloud_steps import GpuCloudTerraform, apply_and_check, gpucloud_tf, values

__all__ = ["gpucloud_tf"]

ADDRESS = "gpucloud_gpu_cluster.train"


@pytest.fixture(scope="module")
def backend() -> Iterator[Backend]:
    # Not under /tmp: a volume attached in place is bind-mounted from inside a node, whose /tmp is its own.
    root = Path("/var/tmp") / f"gpucloud-acc-local-{time.monotonic_ns()}"
    root.mkdir(parents=True)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("GPUCLOUD_DRIVER", "local")
            with running_backend(root) as server:
                yield server
    finally:
        remove_by_hand(root / "local")
        subprocess.run(["rm", "-rf", str(root)], check=False)


def remove_by_hand(local: Path) -> None:
    """What docs/local-driver.md tells an operator to do after a failure: remove every namespace, its
    processes and bridge under the driver's directory (nothing is left after a passing test)."""
    ns_dir = local / "ns"
    for ns_file in sorted(ns_dir.glob("gpc-*.mnt")) if ns_dir.exists() else []:
        netns = ns_file.name.removesuffix(".mnt")
        pids = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True, check=False)
        if pids.stdout.split():
            subprocess.run(["kill", "-9", *pids.stdout.split()], check=False)
        subprocess.run(["ip", "netns", "del", netns], check=False, capture_output=True)
        for suffix in (".mnt", ".uts"):
            subprocess.run(["umount", str(ns_dir / f"{netns}{suffix}")], check=False, capture_output=True)
    for cluster in (local / "clusters").glob("*") if (local / "clusters").exists() else []:
        bridge = f"gpcb{hashlib.sha256(cluster.name.encode()).hexdigest()[:8]}"
        subprocess.run(["ip", "link", "del", bridge], check=False, capture_output=True)
    with contextlib.suppress(FileNotFoundError):
        subprocess.run(["umount", str(ns_dir)], check=False, capture_output=True)


def config(node_count: int, keys: list[tuple[str, str]], logins: tuple[str, ...] = ("alice", "bob")) -> str:
    key_blocks = "".join(f"""
    resource "gpucloud_ssh_key" "{name}" {{
      name       = "{name}"
      public_key = {public_key!r}
    }}
    """.replace("'", '"') for name, public_key in keys)
    key_ids = ", ".join(f"gpucloud_ssh_key.{name}.id" for name in logins)
    return key_blocks + f"""
    resource "gpucloud_shared_volume" "data" {{
      name     = "data"
      region   = "us-east-1"
      size_tib = 1
    }}

    resource "gpucloud_gpu_cluster" "train" {{
      name             = "train"
      region           = "us-east-1"
      instance_type    = "8xH100"
      node_count       = {node_count}
      orchestrator     = "slurm"
      ssh_key_ids      = [{key_ids}]
      shared_volume_ids = [gpucloud_shared_volume.data.id]
    }}
    """


def ssh(key: Path, login: dict[str, object], command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ssh", "-i", str(key), "-p", str(login["port"]), "-o", "StrictHostKeyChecking=no",
         "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5",
         "-o", "LogLevel=ERROR", f"ubuntu@{login['host']}", command],
        capture_output=True, text=True, timeout=120, check=False)


def ours(cluster_id: str) -> dict[str, list[str]]:
    """What of the cluster exists on the host: namespaces, processes in them, mounts, links."""
    namespaces = [ns for ns in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                                              check=True).stdout.split() if cluster_id in ns]
    pids = [pid for ns in namespaces
            for pid in subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True,
                                      check=False).stdout.split()]
    mounts = [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if cluster_id in line]
    bridge = f"gpcb{hashlib.sha256(cluster_id.encode()).hexdigest()[:8]}"  # the driver's naming
    links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True, check=True).stdout
    return {"namespaces": namespaces, "pids": pids, "mounts": mounts,
            "links": [line for line in links.splitlines() if bridge in line]}


def test_acc_local_driver_slurm_cluster_runs_jobs_over_ssh(
    gpucloud_tf: GpuCloudTerraform, backend: Backend, tmp_path: Path
) -> None:
    for name in ("alice", "bob"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / name)], check=True)
    keys = [(name, (tmp_path / f"{name}.pub").read_text().strip()) for name in ("alice", "bob")]
    tf = gpucloud_tf(config(2, keys))
    apply_and_check(tf)
    cluster = values(tf, ADDRESS)
    assert cluster["status"] == "RUNNING"
    login = cluster["login"]
    assert login["host"] == cluster["nodes"][0]["private_ip"].rsplit(".", 1)[0] + ".4"  # the jumphost

    ran = ssh(tmp_path / "alice", login, "srun -N2 hostname")
    assert sorted(ran.stdout.split()) == ["train-0", "train-1"], ran.stderr
    assert ssh(tmp_path / "alice", login, 'sinfo -h -o "%D %T"').stdout.strip() == "2 idle"
    mount = f"/mnt/shared/{values(tf, 'gpucloud_shared_volume.data')['id']}"
    shared = ssh(tmp_path / "alice", login,
                 f"srun -w train-0 sh -c 'hostname > {mount}/from-0' && srun -w train-1 cat {mount}/from-0")
    assert shared.stdout.strip() == "train-0", shared.stderr

    # Scale 2 -> 3 -> 2 in place, with a job running on a kept node the whole time.
    # (a job without --gpus or --mem would take a whole node's memory: the partition defaults are per GPU)
    job = ssh(tmp_path / "alice", login, "sbatch --parsable -w train-0 --gpus=1 --wrap 'sleep 600'")
    job_id = job.stdout.strip()
    assert job_id.isdigit(), job.stderr
    tf.write_main(config(3, keys))
    apply_and_check(tf)
    ran = ssh(tmp_path / "alice", login, "srun -N3 --mem=1G hostname")
    assert sorted(ran.stdout.split()) == ["train-0", "train-1", "train-2"], ran.stderr
    tf.write_main(config(2, keys))
    apply_and_check(tf)
    ran = ssh(tmp_path / "alice", login, "srun -N2 --mem=1G hostname")
    assert sorted(ran.stdout.split()) == ["train-0", "train-1"], ran.stderr
    state = ssh(tmp_path / "alice", login, f"squeue -h -j {job_id} -o %T").stdout.strip()
    assert state == "RUNNING", f"the job on a kept node did not survive scaling: {state!r}"

    # A key removed in place can no longer log in; the remaining one can.
    tf.write_main(config(2, keys, logins=("bob",)))
    apply_and_check(tf)
    assert ssh(tmp_path / "alice", login, "true").returncode != 0
    assert ssh(tmp_path / "bob", login, "hostname").stdout.strip() == "train-jumphost"

    cluster_id = cluster["id"]
    assert any(ours(cluster_id).values())
    tf.destroy()
    deadline = time.monotonic() + 10  # killed daemons are reaped by init, not by the backend
    while any(ours(cluster_id).values()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ours(cluster_id) == {"namespaces": [], "pids": [], "mounts": [], "links": []}
    assert not (backend.data_dir / "local" / "clusters" / cluster_id).exists()
