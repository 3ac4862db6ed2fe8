"""A Slurm cluster on a host pool, through the API and the engine, on two stand-in servers with 8 H200s each
(tests/backend/local/stand_in_hosts.py): admitted on the pool's free ready hosts, configured over SSH as the
pool's user, logged into as the cluster's user, scaled 2 -> 1 -> 2 (a server given back and taken again), a
killed slurmd restarted in place, destroyed leaving the servers as they were, and the pool reused.

Needs root and `ip netns` (.ci/run); every address lives inside namespaces this test makes. SQLite only: the
store is not what is tested here.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from backend.domain.clock import SYSTEM_CLOCK
from backend.domain.host_pools import accounting_ready
from backend.provisioning import host_checks
from backend.provisioning.drivers import entry
from backend.provisioning.drivers.routing import PoolRouting
from backend.provisioning.drivers.ssh_hosts import footprint
from backend.provisioning.drivers.ssh_hosts.driver import SshHostsDriver
from backend.provisioning.drivers.ssh_hosts.host_nodes import PoolAccess, PoolHost, PoolLogin
from backend.provisioning.settings import EngineSettings
from backend.provisioning.worker import EngineWorker
from backend.settings import Settings
from backend.store.host_pool_models import HostPoolHost
from tests.backend.conftest import make_tenant
from tests.backend.engine.conftest import FAST, create, get, sessions
from tests.backend.local.stand_in_hosts import (
    SHARED_MOUNT,
    StandIns,
    openssh,
    private_key,
    public,
    stand_in_hosts,
)
from tests.backend.local.test_local_driver_nodes import _converged, _until

__all__ = ["sessions"]  # fixture of the engine tests, used here

SUBNET = "10.0.10.0/24"
BACKEND = Path(sys.executable).with_name("gpucloud-backend")


@pytest.fixture(scope="module")
def stand_ins() -> Iterator[StandIns]:
    # host-a boots systemd, as most servers do (the cluster's daemons are its units there); host-b does not.
    with stand_in_hosts(SUBNET, ("host-a", "host-b"), gpu_hosts=("host-a", "host-b"), gpus=8,
                        systemd_hosts=("host-a",)) as hosts:
        yield hosts


@pytest.fixture
def worker(sessions: sessionmaker[Session], tmp_path: Path) -> Iterator[EngineWorker]:
    settings = EngineSettings.model_validate(FAST)
    own_hosts = SshHostsDriver(tmp_path / "ssh_hosts")
    routing = PoolRouting(entry("simulated").build(settings, None, SYSTEM_CLOCK), own_hosts)
    yield EngineWorker(sessions, settings, driver=routing)
    assert own_hosts.wait_idle(), "operations still running"


def _gone(worker: EngineWorker, admin: TestClient, cluster_id: str, seconds: float = 120) -> None:
    """Until the cluster is destroyed (a GET answers 404 once it is)."""
    deadline = time.monotonic() + seconds
    while admin.get(f"/v1/clusters/{cluster_id}").status_code != 404:
        assert time.monotonic() < deadline, get(admin, cluster_id)["status_reason"]
        worker.run_once()
        time.sleep(0.05)


def _ssh(key: Path, host: str, command: str, jump: str | None = None) -> subprocess.CompletedProcess[str]:
    """`command` as the cluster's user on `host`; `jump`: through a bastion (its ProxyCommand, whole)."""
    argv = [
        "ssh",
        *(["-o", f"ProxyCommand={jump}"] if jump else []),
        "-i",
        str(key),
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
        "-o",
        "BatchMode=yes",
        "-o",
        "ConnectTimeout=5",
        "-o",
        "LogLevel=ERROR",
        f"ubuntu@{host}",
        command,
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=90, check=False)


def _root(stand_ins: StandIns, tmp_path: Path, host: str, command: str) -> str:
    access = PoolAccess(
        tmp_path / "root-access",
        PoolLogin("root", stand_ins.private_key),
        [PoolHost(host, stand_ins.nodes[host].address, 22, stand_ins.host_key)],
    )
    try:
        shell = access.shell(PoolHost(host, stand_ins.nodes[host].address, 22, stand_ins.host_key))
        return shell.run_script(command, what="look at the server").stdout
    finally:
        access.close()


def _lent(stand_ins: StandIns, tmp_path: Path, host: str) -> str:
    """What shows a server is (still) a cluster's node: its claim record, daemons and user."""
    return _root(
        stand_ins,
        tmp_path,
        host,
        "ls /var/lib/gpucloud-host 2>/dev/null | head -1; "
        "pgrep -x slurmd >/dev/null && echo slurmd; pgrep -x slurmctld >/dev/null && echo slurmctld; "
        "pgrep -x slurmdbd >/dev/null && echo slurmdbd; "
        "pgrep -f gpucloud-slurmdbd.cnf >/dev/null && echo mariadb; "
        "[ -d /var/lib/slurm/mariadb ] && echo mariadb-data; "
        "getent passwd ubuntu >/dev/null && echo user; "
        "systemctl list-units --all --plain --no-legend 'gpucloud-*.service' 2>/dev/null || true",
    ).strip()


def _units(stand_ins: StandIns, tmp_path: Path, host: str) -> dict[str, str]:
    """The systemd units of the cluster's daemons on a server that runs systemd, and their state."""
    listed = _root(stand_ins, tmp_path, host,
                   "systemctl list-units --all --plain --no-legend 'gpucloud-*.service'")
    return {line.split()[0]: line.split()[2] for line in listed.splitlines() if line.strip()}


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_slurm_cluster_on_a_host_pool_from_create_to_destroy(
    stand_ins: StandIns,
    admin: TestClient,
    sessions: sessionmaker[Session],
    worker: EngineWorker,
    tmp_path: Path,
) -> None:
    user_key = private_key()
    key_file = tmp_path / "id_user"
    key_file.write_text(openssh(user_key))
    key_file.chmod(0o600)
    key = admin.post("/v1/ssh-keys", json={"name": "me", "public_key": public(user_key)}).json()
    pool = admin.post(
        "/v1/host-pools",
        json={
            "name": "lab",
            "region": "on-prem",
            "ssh_private_key": stand_ins.private_key,
            "hosts": [{"address": node.address} for node in stand_ins.nodes.values()],
        },
    ).json()
    assert host_checks.run_due_checks(sessions, SYSTEM_CLOCK, "test", dt.timedelta(minutes=5)) == 2
    assert admin.get(f"/v1/host-pools/{pool['id']}").json()["free_hosts"] == 2

    too_many = admin.post(
        "/v1/clusters",
        json={
            "name": "big",
            "region": "on-prem",
            "instance_type": "8xH200",
            "node_count": 3,
            "orchestrator": "slurm",
            "host_pool_id": pool["id"],
        },
    )
    assert too_many.status_code == 409, too_many.text
    assert "2 free" in too_many.json()["detail"]

    cluster = create(
        admin,
        name="own",
        region="on-prem",
        instance_type="8xH200",
        node_count=2,
        orchestrator="slurm",
        host_pool_id=pool["id"],
        ssh_key_ids=[key["id"]],
        slurm_config={"qos": [{"name": "urgent", "priority": 100}]},
    )
    _until(worker, admin, cluster["id"], _converged(2))
    body = get(admin, cluster["id"])
    login = body["login"]["public_ip"]
    assert login == stand_ins.nodes["host-a"].address and body["host_pool_id"] == pool["id"]
    assert body["login"]["host_key"] == stand_ins.host_key
    done = _ssh(key_file, login, "srun -N2 --qos=urgent hostname")
    assert sorted(done.stdout.split()) == ["host-a", "host-b"], done.stderr
    # On the server that runs systemd every daemon is a unit of it; the other runs them detached.
    daemons = ("munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd")
    assert _units(stand_ins, tmp_path, "host-a") == {f"gpucloud-{name}.service": "active" for name in daemons}
    assert "slurmd" in _root(stand_ins, tmp_path, "host-b", "pgrep -a -x slurmd")
    # The servers have slurmdbd and MariaDB (their check says so): accounting on the controller, the
    # cluster's user a Slurm administrator, the declared QoS allowed to it, the job in sacct.
    inits = {}
    for host in admin.get(f"/v1/host-pools/{pool['id']}").json()["hosts"]:
        assert host["inventory"]["packages"]["slurmdbd"] and host["inventory"]["packages"]["mariadbd"], host
        inits[host["address"]] = host["inventory"]["init"]
    assert inits == {stand_ins.nodes["host-a"].address: "systemd", stand_ins.nodes["host-b"].address: "none"}
    asked = "sacctmgr -n -P show user ubuntu format=adminlevel; sacct -n -P -X -o jobname,qos,state,nnodes"
    deadline = time.monotonic() + 30  # slurmctld sends the job's end to slurmdbd on its own time
    while (accounted := _ssh(key_file, login, asked)).stdout.splitlines() != [
        "Administrator", "hostname|urgent|COMPLETED|2"
    ]:
        assert time.monotonic() < deadline, accounted
        time.sleep(1)
    # Checked again while lent: the cluster's own MariaDB is not taken for one of the server's (which would
    # turn accounting off at the next change of the cluster).
    assert admin.post(f"/v1/host-pools/{pool['id']}/probe").status_code == 202
    assert host_checks.run_due_checks(sessions, SYSTEM_CLOCK, "test", dt.timedelta(minutes=5)) == 2
    with sessions() as session:
        for row in session.scalars(select(HostPoolHost).where(HostPoolHost.pool_id == pool["id"])):
            assert row.status == "ready" and accounting_ready(row.inventory), row.inventory
    # Slurm is told what the servers have (their check's inventory), not the 8xH200 shape sold.
    shown = _ssh(key_file, login, "scontrol -o show node own-1").stdout
    memory_mib = int(Path("/proc/meminfo").read_text().split()[1]) // 1024  # the stand-ins' machine
    assert f" CPUTot={os.cpu_count()} " in shown and f" RealMemory={int(memory_mib * 0.95)} " in shown, shown
    # The machine has one NUMA node, so its CPU layout is said and every GPU is bound to all its cores:
    # Slurm places the GPUs on socket 0.
    assert " Gres=gpu:h200:8(S:0) " in shown, shown
    in_use = admin.delete(f"/v1/host-pools/{pool['id']}")
    assert (in_use.status_code, in_use.json()["code"]) == (409, "host_pool_in_use"), in_use.text

    # 2 -> 1: the newest node's server is given back (never the controller's); 1 -> 2: taken again.
    named = admin.patch(f"/v1/clusters/{cluster['id']}",
                        json={"node_count": 1, "remove_node_names": ["own-0"]})
    assert (named.status_code, named.json()["errors"][0]["code"]) == (422, "controller_node"), named.text
    assert admin.patch(f"/v1/clusters/{cluster['id']}", json={"node_count": 1}).status_code == 200
    _until(worker, admin, cluster["id"], _converged(1))
    assert _lent(stand_ins, tmp_path, "host-b") == ""
    assert _ssh(key_file, login, "sinfo -h -N -o %N").stdout.split() == ["own-0"]  # Slurm knows one node
    assert admin.get(f"/v1/host-pools/{pool['id']}").json()["free_hosts"] == 1
    assert admin.patch(f"/v1/clusters/{cluster['id']}", json={"node_count": 2}).status_code == 200
    _until(worker, admin, cluster["id"], _converged(2))
    done = _ssh(key_file, login, "srun -N2 hostname")
    assert sorted(done.stdout.split()) == ["host-a", "host-b"], done.stderr

    # A killed slurmd, on each server: the health watch finds it, the node is restarted in place and runs
    # again (on host-a, as a unit again: the killed one was collected).
    for host in ("host-b", "host-a"):
        _root(stand_ins, tmp_path, host, "pkill -x slurmd")
        _until(worker, admin, cluster["id"], lambda b: any(n["status"] != "RUNNING" for n in b["nodes"]), 60)
        _until(worker, admin, cluster["id"], _converged(2))
        done = _ssh(key_file, login, "srun -N2 hostname")
        assert sorted(done.stdout.split()) == ["host-a", "host-b"], done.stderr
    assert _units(stand_ins, tmp_path, "host-a")["gpucloud-slurmd.service"] == "active"

    assert admin.delete(f"/v1/clusters/{cluster['id']}").status_code in (200, 202)
    _gone(worker, admin, cluster["id"])
    for host in ("host-a", "host-b"):
        assert _lent(stand_ins, tmp_path, host) == "", host
    assert admin.get(f"/v1/host-pools/{pool['id']}").json()["free_hosts"] == 2

    # The pool serves the next cluster; with the pool's shared storage, a volume is a directory there that
    # every server of the cluster mounts.
    volume = admin.post("/v1/volumes", json={"name": "data", "region": "on-prem", "size_tib": 1}).json()
    body = {"name": "next", "region": "on-prem", "instance_type": "8xH200", "node_count": 2,
            "orchestrator": "slurm", "host_pool_id": pool["id"], "volume_ids": [volume["id"]]}
    refused = admin.post("/v1/clusters", json=body)
    assert refused.status_code == 422, refused.text
    assert "no_shared_storage" in [error["code"] for error in refused.json()["errors"]], refused.text
    pool_etag = admin.get(f"/v1/host-pools/{pool['id']}").headers["ETag"]
    patched = admin.patch(f"/v1/host-pools/{pool['id']}", json={"shared_storage_path": SHARED_MOUNT},
                          headers={"If-Match": pool_etag})
    assert patched.status_code == 200, patched.text
    # A server its cluster could not give back (it did not answer then) is given back by the next claim.
    _root(stand_ins, tmp_path, "host-b", footprint.claim_script(cluster["id"], "ubuntu"))
    again = create(admin, **{**body, "ssh_key_ids": [key["id"]]})
    _until(worker, admin, again["id"], _converged(2))
    mount = f"/mnt/shared/{volume['id']}"
    written = _ssh(key_file, stand_ins.nodes["host-a"].address,
                   f"srun -N1 -w next-1 sh -c 'hostname > {mount}/hello' && cat {mount}/hello")
    assert written.stdout.split() == ["host-b"], written.stderr
    # An MPI allreduce across both servers (Debian's OpenMPI, wired up by Slurm's PMIx), its program on the
    # shared volume; then the jobs API reads the job from the cluster's Slurm.
    program = tmp_path / "mpi_allreduce"
    source = Path(__file__).with_name("data") / "mpi_allreduce.c"
    subprocess.run(["mpicc", "-O2", "-o", str(program), str(source)], check=True, capture_output=True)
    shutil.copy(program, stand_ins.shared / "gpucloud-volumes" / volume["id"] / "mpi_allreduce")
    summed = _ssh(key_file, stand_ins.nodes["host-a"].address, f"srun -N2 --mpi=pmix {mount}/mpi_allreduce")
    assert sorted(summed.stdout.splitlines()) == ["rank 0 of 2: sum 3", "rank 1 of 2: sum 3"], summed.stderr
    jobs = admin.get(f"/v1/clusters/{again['id']}/jobs").json()
    assert any(job["state"] == "completed" and job["nodes"] == "next-[0-1]" for job in jobs["items"]), jobs
    # Day-2 reads come from the servers: Slurm's logs, each server's nvidia-smi and /proc, the metrics.
    url = f"/v1/clusters/{again['id']}"
    controller = admin.get(f"{url}/logs", params={"source": "controller", "tail": 500}).json()["lines"]
    assert any("_slurm_rpc_allocate_resources" in line for line in controller), controller
    node_log = admin.get(f"{url}/logs", params={"source": "next-1", "tail": 500}).json()["lines"]
    assert any("launch task StepId=" in line for line in node_log), node_log
    nodes = admin.get(f"{url}/nodes").json()["items"]
    assert [n["name"] for n in nodes] == ["next-0", "next-1"]
    for reading in nodes:  # both stand-ins answer nvidia-smi with the recorded H200s
        assert reading["host"]["cpu_count"] == os.cpu_count() and reading["health"] == "healthy", reading
        assert reading["gpus"] is not None and len(reading["gpus"]) == 8, reading
    assert worker.collect_metrics() == 2
    metrics = admin.get(f"{url}/metrics", params={"window": "5m"}).json()
    assert {series["node"] for series in metrics["series"]} == {"next-0", "next-1"}
    for series in metrics["series"]:  # one sample of the recorded GPUs, in some bucket
        assert any(value is not None for value in series["gpu_memory_used_mib"]), series
    assert admin.delete(f"/v1/clusters/{again['id']}").status_code in (200, 202)
    _gone(worker, admin, again["id"])
    for host in ("host-a", "host-b"):
        assert _lent(stand_ins, tmp_path, host) == "", host
    # The volume's data stays on the shared storage after the cluster: it is the user's.
    kept = _root(stand_ins, tmp_path, "host-a", f"cat {SHARED_MOUNT}/gpucloud-volumes/{volume['id']}/hello")
    assert kept.split() == ["host-b"]


def _serve(database_url: str, data_dir: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    """`gpucloud-backend serve` with its embedded engine worker and host checks, as a deployment runs it."""
    env = {**os.environ, "GPUCLOUD_DATABASE_URL": database_url, "GPUCLOUD_DATA_DIR": str(data_dir),
           "GPUCLOUD_ENGINE_LEASE_SECONDS": "1.5", "GPUCLOUD_ENGINE_POLL_SECONDS": "0.05",
           "PYTHONPATH": str(Path(__file__).parents[3])}
    with log.open("ab") as out:
        process = subprocess.Popen([str(BACKEND), "serve", "--port", str(port)], env=env, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return process
        time.sleep(0.1)
    raise AssertionError(f"serve did not start: {log.read_text()[-2000:]}")


def _kill(process: subprocess.Popen[bytes]) -> None:
    os.killpg(process.pid, signal.SIGKILL)  # the backend and the ssh it runs, as a crash would
    process.wait(timeout=10)


def _status_until(api: httpx.Client, cluster_id: str, wanted: set[str], seconds: float = 120) -> str:
    deadline = time.monotonic() + seconds
    status = ""
    while time.monotonic() < deadline:
        response = api.get(f"/v1/clusters/{cluster_id}")
        status = "GONE" if response.status_code == 404 else response.json()["status"]
        if status in wanted:
            return status
        time.sleep(0.02)
    raise AssertionError(f"cluster {cluster_id} is {status}, not {wanted}")


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_backend_killed_while_it_configures_the_servers_converges(
    stand_ins: StandIns, database_url: str, tmp_path: Path
) -> None:
    tenant = make_tenant(Settings(database_url=database_url, data_dir=tmp_path / "data"), "pool-crash")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    log = tmp_path / "serve.log"
    server = _serve(database_url, tmp_path / "data", port, log)
    user_key = private_key()
    key_file = tmp_path / "id_user"
    key_file.write_text(openssh(user_key))
    key_file.chmod(0o600)
    headers = {"Authorization": f"Bearer {tenant.admin_key}"}
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=30) as api:
            key = api.post("/v1/ssh-keys", json={"name": "me", "public_key": public(user_key)}).json()
            pool = api.post("/v1/host-pools", json={
                "name": "lab", "region": "on-prem", "ssh_private_key": stand_ins.private_key,
                "hosts": [{"address": node.address} for node in stand_ins.nodes.values()]}).json()
            deadline = time.monotonic() + 60
            while api.get(f"/v1/host-pools/{pool['id']}").json()["free_hosts"] < 2:  # the worker's checks
                assert time.monotonic() < deadline, api.get(f"/v1/host-pools/{pool['id']}").text
                time.sleep(0.2)
            created = api.post("/v1/clusters", json={
                "name": "crash", "region": "on-prem", "instance_type": "8xH200", "node_count": 2,
                "orchestrator": "slurm", "host_pool_id": pool["id"], "ssh_key_ids": [key["id"]]})
            assert created.status_code == 201, created.text
            cluster_id = created.json()["id"]
            # Killed while it configures the servers over SSH, then while it gives them back.
            _status_until(api, cluster_id, {"CONFIGURING"})
            _kill(server)
            server = _serve(database_url, tmp_path / "data", port, log)
            assert _status_until(api, cluster_id, {"RUNNING", "FAILED"}) == "RUNNING"
            login = api.get(f"/v1/clusters/{cluster_id}").json()["login"]["public_ip"]
            done = _ssh(key_file, login, "srun -N2 hostname")
            assert sorted(done.stdout.split()) == ["host-a", "host-b"], done.stderr
            assert api.delete(f"/v1/clusters/{cluster_id}").status_code in (200, 202)
            _status_until(api, cluster_id, {"DESTROYING"})
            _kill(server)
            server = _serve(database_url, tmp_path / "data", port, log)
            _status_until(api, cluster_id, {"GONE"})
            for host in ("host-a", "host-b"):
                assert _lent(stand_ins, tmp_path, host) == "", host
            assert api.get(f"/v1/host-pools/{pool['id']}").json()["free_hosts"] == 2
    finally:
        with contextlib.suppress(ProcessLookupError):
            _kill(server)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_cluster_on_a_server_behind_a_bastion(
    stand_ins: StandIns, admin: TestClient, sessions: sessionmaker[Session], worker: EngineWorker,
    tmp_path: Path,
) -> None:
    """host-a is the bastion of a pool whose one server is host-b: the checks record the bastion's key once
    and require it after; the cluster is configured through the bastion; its firewall (a group that lets
    nobody in) still lets the backend's connections in, as the server sees them (from the bastion), and
    nothing straight from this machine; the user logs in through the bastion."""
    bastion, server = stand_ins.nodes["host-a"].address, stand_ins.nodes["host-b"].address
    user_key, key_file, pool_key = private_key(), tmp_path / "id_user", tmp_path / "id_pool"
    for path, text in ((key_file, openssh(user_key)), (pool_key, stand_ins.private_key)):
        path.write_text(text)
        path.chmod(0o600)
    key = admin.post("/v1/ssh-keys", json={"name": "far", "public_key": public(user_key)}).json()
    closed = admin.post("/v1/security-groups", json={"name": "closed", "ingress": []})
    assert closed.status_code == 201, closed.text
    pool = admin.post("/v1/host-pools", json={
        "name": "behind", "region": "on-prem", "ssh_private_key": stand_ins.private_key,
        "proxy_jump": f"root@{bastion}", "hosts": [{"address": server}]}).json()
    assert host_checks.run_due_checks(sessions, SYSTEM_CLOCK, "test", dt.timedelta(minutes=5)) == 1
    assert admin.post(f"/v1/host-pools/{pool['id']}/probe").status_code == 202  # again: the key recorded
    assert host_checks.run_due_checks(sessions, SYSTEM_CLOCK, "test", dt.timedelta(minutes=5)) == 1
    [host] = admin.get(f"/v1/host-pools/{pool['id']}").json()["hosts"]
    assert host["status"] == "ready", host
    with sessions() as session:
        row = session.scalars(select(HostPoolHost).where(HostPoolHost.pool_id == pool["id"])).one()
        assert (row.jump_known_hosts or "").startswith(f"jump-{bastion}-22 ssh-ed25519 ")
        assert (row.inventory or {})["ssh_client_ip"] == bastion

    cluster = create(admin, name="far", region="on-prem", instance_type="8xH200", node_count=1,
                     orchestrator="slurm", host_pool_id=pool["id"], ssh_key_ids=[key["id"]],
                     security_group_ids=[closed.json()["id"]])
    _until(worker, admin, cluster["id"], _converged(1))
    assert get(admin, cluster["id"])["login"]["ssh_command"] == f"ssh -J {bastion} ubuntu@{server}"
    through = (f"ssh -i {pool_key} -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
               f"-o BatchMode=yes -o LogLevel=ERROR root@{bastion} -W %h:%p")
    done = _ssh(key_file, server, "srun -N1 hostname", jump=through)
    assert done.stdout.split() == ["host-b"], done.stderr
    direct = _ssh(key_file, server, "true")
    assert direct.returncode == 255 and "timed out" in direct.stderr, direct
    assert admin.delete(f"/v1/clusters/{cluster['id']}").status_code in (200, 202)
    _gone(worker, admin, cluster["id"])
    assert _lent(stand_ins, tmp_path, "host-b") == ""  # straight from here again: the firewall went too


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_dead_server_is_reported_and_not_replaced(
    stand_ins: StandIns, admin: TestClient, sessions: sessionmaker[Session], worker: EngineWorker,
    tmp_path: Path,
) -> None:
    """Last in this file: it kills a stand-in server for good."""
    pool = admin.post("/v1/host-pools", json={
        "name": "lab", "region": "on-prem", "ssh_private_key": stand_ins.private_key,
        "hosts": [{"address": node.address} for node in stand_ins.nodes.values()]}).json()
    assert host_checks.run_due_checks(sessions, SYSTEM_CLOCK, "test", dt.timedelta(minutes=5)) == 2
    cluster = create(admin, name="dies", region="on-prem", instance_type="8xH200", node_count=2,
                     orchestrator="slurm", host_pool_id=pool["id"])
    _until(worker, admin, cluster["id"], _converged(2))
    stand_ins.nodes["host-b"].stop_processes()  # the server is gone: power cut, crash, network
    _until(worker, admin, cluster["id"],
           lambda b: any(n["status"] == "FAILED" for n in b["nodes"]), 120)
    failed = next(n for n in get(admin, cluster["id"])["nodes"] if n["status"] == "FAILED")
    reason = failed["status_reason"] or ""
    # Its restarts in place could not reach it; after the day's budget the node stays failed, saying why.
    assert failed["name"] == "dies-1" and f"ssh root@{stand_ins.nodes['host-b'].address}" in reason, reason
    assert "automatic repair stopped: 3 restarts of dies-1" in reason, reason
    # Still the same node on the same server: a server of the pool is never swapped for another one.
    assert failed["private_ip"] == stand_ins.nodes["host-b"].address
    assert admin.delete(f"/v1/clusters/{cluster['id']}").status_code in (200, 202)
    _gone(worker, admin, cluster["id"])
    assert _lent(stand_ins, tmp_path, "host-a") == ""
