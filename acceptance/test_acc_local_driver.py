"""gpucloud_gpu_cluster on the `local` driver: real Terraform, the real provider and backend, and a real
Slurm cluster on namespace nodes of this machine that a user logs into over SSH.

Needs root, Linux and Debian's slurmctld, slurmd, munge and openssh-server (.ci/run installs them): the
backend refuses to start without them, so a missing package fails this test, it never skips.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from acceptance.backend import BACKEND, Backend, running_backend
from acceptance.cluster_backend import kill, restart
from acceptance.gpucloud_steps import GpuCloudTerraform, apply_and_check, gpucloud_tf, values
from backend.provisioning.drivers.local import preflight
from backend.provisioning.drivers.local.namespaces import LocalCluster

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
            # A block no route of this machine covers (a CI runner may itself live in 10.x).
            free = [cidr for cidr in ("10.0.0.0/16", "172.31.0.0/16", "192.168.224.0/19")
                    if preflight.conflicting_route(cidr) is None]
            assert free, "every candidate address block overlaps a route of this machine"
            patch.setenv("GPUCLOUD_LOCAL_ADDRESS_RANGE", free[0])
            with running_backend(root) as server:
                try:
                    yield server
                finally:
                    kill(server)  # the process now running, which a restart may have replaced
    finally:
        remove_by_hand(root / "local")
        subprocess.run(["rm", "-rf", str(root)], check=False)


def remove_by_hand(local: Path) -> None:
    """Remove whatever the driver left under its directory after a failure: every node (its init, so its
    whole PID namespace, its cgroup and network namespace), the bridges and exports, and the SSH connection
    masters to the nodes (docs/local-driver.md, "Cleaning up by hand"; a passing test leaves nothing)."""
    for socket in sorted((local / "ssh" / "ctl").glob("*/*")) if (local / "ssh" / "ctl").exists() else []:
        subprocess.run(["ssh", "-o", f"ControlPath={socket}", "-O", "exit", "node"], check=False,
                       capture_output=True)
    for cluster_dir in sorted((local / "clusters").glob("*")) if (local / "clusters").exists() else []:
        cluster = LocalCluster(local, cluster_dir.name, "10.0.0.0/30")
        instances = {node.name for node in (cluster_dir / "nodes").glob("*")} | set(cluster.node_names())
        for instance in instances:
            cluster.node(instance, "0.0.0.0").destroy()
        subprocess.run(["ip", "link", "del", cluster.bridge], check=False, capture_output=True)
        subprocess.run(["umount", "-R", "-l", str(cluster.exports)], check=False, capture_output=True)


def config(node_count: int, keys: list[tuple[str, str]], logins: tuple[str, ...] = ("alice", "bob"),
           name: str = "train", volumes: tuple[str, ...] = ("data",)) -> str:
    key_blocks = "".join(f"""
    resource "gpucloud_ssh_key" "{key_name}" {{
      name       = "{name}-{key_name}"
      public_key = {public_key!r}
    }}
    """.replace("'", '"') for key_name, public_key in keys)
    key_ids = ", ".join(f"gpucloud_ssh_key.{key_name}.id" for key_name in logins)
    volume_ids = ", ".join(f"gpucloud_shared_volume.{volume}.id" for volume in volumes)
    return key_blocks + "".join(f"""
    resource "gpucloud_shared_volume" "{volume}" {{
      name     = "{name}-{volume}"
      region   = "us-east-1"
      size_tib = 1
    }}
    """ for volume in ("data", "extra")) + f"""
    resource "gpucloud_gpu_cluster" "train" {{
      name             = "{name}"
      region           = "us-east-1"
      instance_type    = "8xH100"
      node_count       = {node_count}
      orchestrator     = "slurm"
      ssh_key_ids      = [{key_ids}]
      shared_volume_ids = [{volume_ids}]
      node_repair      = "manual" # the faults below stay visible (auto repair: test_local_driver_day2)
    }}
    """


def known_hosts_entry(login: dict[str, object]) -> str:
    """The login host's known_hosts line from the key the API publishes (`[host]:port` off port 22)."""
    host = login["host"] if login["port"] == 22 else f"[{login['host']}]:{login['port']}"
    return f"{host} {login['host_key']}\n"


def ssh(key: Path, login: dict[str, object], command: str) -> subprocess.CompletedProcess[str]:
    """`command` on the login host as `ubuntu` with `key`, its host key verified against the published one."""
    known_hosts = key.with_name(f"{key.name}.known_hosts")
    known_hosts.write_text(known_hosts_entry(login))
    return subprocess.run(
        ["ssh", "-i", str(key), "-p", str(login["port"]), "-o", "StrictHostKeyChecking=yes",
         "-o", f"UserKnownHostsFile={known_hosts}", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5",
         "-o", "LogLevel=ERROR", f"ubuntu@{login['host']}", command],
        capture_output=True, text=True, timeout=120, check=False)


def ours(cluster_id: str) -> dict[str, list[str]]:
    """What of the cluster exists on the host: namespaces, processes in them, mounts, links, and the
    backend's SSH connection masters to its nodes (their title names their socket)."""
    namespaces = [ns for ns in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                                              check=True).stdout.split() if cluster_id in ns]
    pids = [pid for ns in namespaces
            for pid in subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True,
                                      check=False).stdout.split()]
    mounts = [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if cluster_id in line]
    bridge = f"gpcb{hashlib.sha256(cluster_id.encode()).hexdigest()[:8]}"  # the driver's naming
    links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True, check=True).stdout
    control = f"/ssh/ctl/{hashlib.sha256(cluster_id.encode()).hexdigest()[:8]}/"  # the driver's naming
    processes = subprocess.run(["ps", "-ewwo", "args"], capture_output=True, text=True, check=True).stdout
    return {"namespaces": namespaces, "pids": pids, "mounts": mounts,
            "links": [line for line in links.splitlines() if bridge in line],
            "ssh_masters": [line for line in processes.splitlines() if control in line and "[mux]" in line]}


def node_status(backend: Backend, cluster_id: str, name: str) -> str:
    nodes = backend.client.get_cluster(cluster_id)["nodes"]
    return str(next(node["status"] for node in nodes if node["name"] == name))


def keypair(directory: Path, name: str) -> tuple[str, str]:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(directory / name)], check=True)
    return name, (directory / f"{name}.pub").read_text().strip()


def test_acc_local_driver_slurm_cluster_runs_jobs_over_ssh(
    gpucloud_tf: GpuCloudTerraform, backend: Backend, tmp_path: Path
) -> None:
    keys = [keypair(tmp_path, "alice"), keypair(tmp_path, "bob")]
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
    job = ssh(tmp_path / "alice", login, "sbatch --parsable -w train-0 --gpus=1 --wrap 'sleep 600'")
    job_id = job.stdout.strip()
    assert job_id.isdigit(), job.stderr
    tf.write_main(config(3, keys))
    tf.apply()  # (the follow-up plans are checked after the first and the last apply: time)
    ran = ssh(tmp_path / "alice", login, "srun -N3 --mem=1G hostname")
    assert sorted(ran.stdout.split()) == ["train-0", "train-1", "train-2"], ran.stderr
    tf.write_main(config(2, keys))
    tf.apply()
    ran = ssh(tmp_path / "alice", login, "srun -N2 --mem=1G hostname")
    assert sorted(ran.stdout.split()) == ["train-0", "train-1"], ran.stderr
    state = ssh(tmp_path / "alice", login, f"squeue -h -j {job_id} -o %T").stdout.strip()
    assert state == "RUNNING", f"the job on a kept node did not survive scaling: {state!r}"

    # In place: a key removed can no longer log in, the remaining one can; a volume detached is
    # unmounted everywhere and keeps its files, one attached is mounted on every node.
    tf.write_main(config(2, keys, logins=("bob",), volumes=("extra",)))
    apply_and_check(tf)
    assert ssh(tmp_path / "alice", login, "true").returncode != 0
    assert ssh(tmp_path / "bob", login, "hostname").stdout.strip() == "train-jumphost"
    extra = f"/mnt/shared/{values(tf, 'gpucloud_shared_volume.extra')['id']}"
    mounts = ssh(tmp_path / "bob", login,
                 "srun -N2 --mem=1G sh -c 'findmnt -rn -o TARGET | grep /mnt/shared/'")
    assert mounts.stdout.split() == [extra, extra], mounts.stderr
    data_dir = backend.data_dir / "local" / "volumes" / mount.rsplit("/", 1)[1]
    assert (data_dir / "from-0").read_text().strip() == "train-0"  # the volume is a host directory

    # A node that crashes for real (its slurmd killed) is seen failed by the engine's health watch.
    cluster_id = cluster["id"]
    env = {**os.environ, "GPUCLOUD_DRIVER": "local", "GPUCLOUD_DATA_DIR": str(backend.data_dir)}
    subprocess.run([str(BACKEND), "fault", "--cluster", cluster_id, "--node", "train-1", "crash"], env=env,
                   check=True, capture_output=True, timeout=60)
    deadline = time.monotonic() + 10
    while node_status(backend, cluster_id, "train-1") != "FAILED":
        assert time.monotonic() < deadline, backend.client.get_cluster(cluster_id)["nodes"]
        time.sleep(0.2)
    # An XID logged on a node fails it with the XID's meaning.
    subprocess.run([str(BACKEND), "fault", "--cluster", cluster_id, "--node", "train-0", "xid"], env=env,
                   check=True, capture_output=True, timeout=60)
    deadline = time.monotonic() + 10
    while node_status(backend, cluster_id, "train-0") != "FAILED":
        assert time.monotonic() < deadline, backend.client.get_cluster(cluster_id)["nodes"]
        time.sleep(0.2)
    train_0 = next(n for n in backend.client.get_cluster(cluster_id)["nodes"] if n["name"] == "train-0")
    assert "XID 79: GPU has fallen off the bus" in train_0["status_reason"]

    assert ours(cluster_id)["ssh_masters"]  # the backend configures and watches the nodes over SSH
    tf.destroy()
    deadline = time.monotonic() + 10  # killed daemons are reaped by init, not by the backend
    while any(ours(cluster_id).values()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ours(cluster_id) == {"namespaces": [], "pids": [], "mounts": [], "links": [], "ssh_masters": []}
    assert not (backend.data_dir / "local" / "clusters" / cluster_id).exists()


def test_acc_local_driver_gpucloud_ssh_to_a_worker_verifies_host_keys_without_an_agent(
    gpucloud_tf: GpuCloudTerraform, backend: Backend, tmp_path: Path
) -> None:
    """`gpucloud ssh NODE -- -i KEY CMD` from a script: a fresh HOME, no ssh-agent, no terminal; the key
    reaches the jump too, the host keys are the API's and checked strictly, the exit status is CMD's."""
    keys = [keypair(tmp_path, "dave")]
    tf = gpucloud_tf(config(2, keys, logins=("dave",), name="keyed", volumes=("data",)))
    apply_and_check(tf)
    cluster = values(tf, ADDRESS)
    assert [node["host_key"] for node in cluster["nodes"]] == [cluster["login"]["host_key"]] * 2  # one key
    assert str(cluster["login"]["host_key"]).startswith("ssh-ed25519 ")  # (the driver's, see node_setup)
    home, key = tmp_path / "home", str(tmp_path / "dave")
    home.mkdir()

    def gpucloud(*args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("GPUCLOUD_") and k not in ("SSH_AUTH_SOCK", "XDG_CONFIG_HOME")}
        env.update(backend.provider_env, HOME=str(home), PYTHONPATH=str(Path(__file__).resolve().parents[1]))
        return subprocess.run([sys.executable, "-m", "provider.cli.main", *args], env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
                              check=False)

    worker = gpucloud("ssh", "keyed-1", "--", "-i", key, "-o", "BatchMode=yes", "hostname")
    assert (worker.returncode, worker.stdout.strip()) == (0, "keyed-1"), worker.stderr
    assert gpucloud("ssh", "keyed-1", "--", "-i", key, "-o", "BatchMode=yes", "exit 3").returncode == 3
    login = gpucloud("ssh", "keyed", "--", "-i", key, "-o", "BatchMode=yes", "hostname")
    assert (login.returncode, login.stdout.strip()) == (0, "keyed-jumphost"), login.stderr
    known_hosts = home / ".config" / "gpucloud" / "known_hosts"
    assert known_hosts.stat().st_mode & 0o777 == 0o600
    assert f" {cluster['login']['host_key']}\n" in known_hosts.read_text()

    # Strict checking really verifies: with another key filed for the worker, the same command is refused.
    dry = gpucloud("ssh", "keyed-1", "--dry-run", "--", "-i", key, "-o", "BatchMode=yes", "hostname")
    assert dry.returncode == 0, dry.stderr
    impostor = keypair(tmp_path, "impostor")[1].split()[:2]
    genuine = known_hosts.read_text()
    forged = "".join(f"{line.split()[0]} {' '.join(impostor)}\n" if ".keyed-1 " in line else f"{line}\n"
                     for line in genuine.splitlines())
    assert forged != genuine
    known_hosts.write_text(forged)
    refused = subprocess.run(shlex.split(dry.stdout), env={**os.environ, "HOME": str(home)},
                             stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
                             check=False)
    assert refused.returncode == 255 and "Host key verification failed" in refused.stderr, refused.stderr

    # --print-config: plain ssh and scp by node name (it writes the genuine keys back).
    printed = gpucloud("ssh", "--print-config", "keyed", "--", "-i", key)
    assert printed.returncode == 0, printed.stderr
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text(printed.stdout)
    (tmp_path / "payload").write_text("over scp\n")
    plain = {**os.environ, "HOME": str(home)}
    plain.pop("SSH_AUTH_SOCK", None)
    copied = subprocess.run(["scp", "-F", str(ssh_config), "-o", "BatchMode=yes", str(tmp_path / "payload"),
                             "keyed-0:payload"], env=plain, capture_output=True, text=True, timeout=120,
                            check=False)
    assert copied.returncode == 0, copied.stderr
    read = subprocess.run(["ssh", "-F", str(ssh_config), "-o", "BatchMode=yes", "keyed-0", "cat payload"],
                          env=plain, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
                          check=False)
    assert read.stdout == "over scp\n", read.stderr
    tf.destroy()


def test_acc_local_driver_backend_killed_mid_create_scale_and_delete_converges(
    gpucloud_tf: GpuCloudTerraform, backend: Backend, tmp_path: Path
) -> None:
    keys = [keypair(tmp_path, "carol")]
    tf = gpucloud_tf(config(2, keys, logins=("carol",), name="sturdy"))
    running = tf.start("apply", "-auto-approve")
    cluster_id = wait_for_cluster(backend, "sturdy")
    deadline = time.monotonic() + 60
    while not ours(cluster_id)["namespaces"]:  # in the middle of the bring-up
        assert time.monotonic() < deadline, backend.client.get_cluster(cluster_id)  # says why, if it failed
        time.sleep(0.05)
    restart(backend, {"GPUCLOUD_DRIVER": "local"})
    assert "Apply complete!" in running.wait(timeout=300, check=True).output
    namespaces = sorted(ns.removeprefix(f"gpc-{cluster_id}-") for ns in ours(cluster_id)["namespaces"])
    assert namespaces == ["sturdy-0.1", "sturdy-1.1", "sturdy-jumphost"]  # no duplicate node
    login = values(tf, ADDRESS)["login"]
    ran = ssh(tmp_path / "carol", login, "srun -N2 hostname")
    assert sorted(ran.stdout.split()) == ["sturdy-0", "sturdy-1"], ran.stderr

    tf.write_main(config(3, keys, logins=("carol",), name="sturdy"))
    scaling = tf.start("apply", "-auto-approve")
    deadline = time.monotonic() + 60
    while len(ours(cluster_id)["namespaces"]) < 4:  # in the middle of the scale-up
        assert time.monotonic() < deadline
        time.sleep(0.05)
    restart(backend, {"GPUCLOUD_DRIVER": "local"})
    assert "Apply complete!" in scaling.wait(timeout=300, check=True).output
    assert len(ours(cluster_id)["namespaces"]) == 4
    ran = ssh(tmp_path / "carol", login, "srun -N3 hostname")
    assert sorted(ran.stdout.split()) == ["sturdy-0", "sturdy-1", "sturdy-2"], ran.stderr

    destroying = tf.start("destroy", "-auto-approve")
    deadline = time.monotonic() + 60
    while len(ours(cluster_id)["namespaces"]) == 4:  # in the middle of the teardown
        assert time.monotonic() < deadline
        time.sleep(0.05)
    restart(backend, {"GPUCLOUD_DRIVER": "local"})
    assert "Destroy complete!" in destroying.wait(timeout=300, check=True).output
    deadline = time.monotonic() + 10
    while any(ours(cluster_id).values()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ours(cluster_id) == {"namespaces": [], "pids": [], "mounts": [], "links": [], "ssh_masters": []}
    assert not (backend.data_dir / "local" / "clusters" / cluster_id).exists()


def wait_for_cluster(backend: Backend, name: str) -> str:
    deadline = time.monotonic() + 60
    while not (found := [c for c in backend.client.list_clusters() if c["name"] == name]):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return str(found[0]["id"])
