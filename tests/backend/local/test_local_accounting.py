"""Slurm accounting on a real local cluster (root, Debian's daemons, slurmdbd and MariaDB): the cluster's
user finds its jobs in `sacct`, has the `normal` QoS, sees `sprio`'s factors, may reorder and reprioritise
jobs as the cluster's Slurm administrator, and jobs without GPUs share a node. Deleting the cluster leaves
no MariaDB or slurmdbd behind. The store is not what is tested here, so SQLite only."""

from __future__ import annotations

import secrets
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from backend.api import cluster_nodes, cluster_workload
from backend.provisioning.drivers.local.driver import LocalDriver
from backend.provisioning.drivers.local.namespaces import run
from backend.provisioning.settings import EngineSettings, use
from backend.provisioning.worker import EngineWorker
from tests.backend.engine.conftest import FAST, create, get, sessions
from tests.backend.local.test_local_driver_nodes import _converged, _until, driver

__all__ = ["driver", "sessions"]  # fixtures, used here


def _as_user(key: Path, host: str, command: str) -> subprocess.CompletedProcess[str]:
    """`command` run by the cluster's user on its login node (the controller here), over ssh."""
    return run(["ssh", "-i", str(key), "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "-o", "LogLevel=ERROR", f"ubuntu@{host}",
                command], check=False, timeout=60)


def _until_output(read: Callable[[], subprocess.CompletedProcess[str]], wanted: Callable[[str], bool],
                  seconds: float = 30) -> str:
    deadline = time.monotonic() + seconds
    while True:
        done = read()
        if done.returncode == 0 and wanted(done.stdout):
            return done.stdout
        assert time.monotonic() < deadline, (done.returncode, done.stdout, done.stderr)
        time.sleep(0.5)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_local_cluster_keeps_accounting_qos_and_priorities_for_its_user(
    admin: TestClient, sessions: sessionmaker[Session], driver: LocalDriver, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for module in (cluster_nodes, cluster_workload):
        monkeypatch.setattr(module, "driver", lambda _request: driver)
    # A block of its own: other runs of the local driver on this machine may hold 10.0.0.0/22.
    block = secrets.randbelow(16 * 64)
    monkeypatch.setenv("GPUCLOUD_LOCAL_ADDRESS_RANGE", f"172.{16 + block // 64}.{block % 64 * 4}.0/22")
    use(EngineSettings())  # in force now; the process_configuration fixture puts the old ones back
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "key")])
    key = admin.post("/v1/ssh-keys", json={"name": "k", "public_key": (tmp_path / "key.pub").read_text()})
    worker = EngineWorker(sessions, EngineSettings.model_validate(FAST), driver=driver)
    # One node: it is the controller too (slurmctld, slurmdbd and MariaDB beside its slurmd).
    cluster = create(admin, name="acct", node_count=1, orchestrator="slurm", ssh_key_ids=[key.json()["id"]])
    _until(worker, admin, cluster["id"], _converged(1), seconds=180)
    body = get(admin, cluster["id"])
    login = body["login"]["public_ip"]

    def user(command: str) -> subprocess.CompletedProcess[str]:
        return _as_user(tmp_path / "key", login, command)

    # The user, its account and QoS, registered before slurmctld started; the user is the cluster's admin.
    assert user("sacctmgr -n -P show qos format=name").stdout.split() == ["normal"]
    assoc = user("sacctmgr -n -P show assoc user=ubuntu format=cluster,account,user,qos,defaultqos")
    assert assoc.stdout.split() == ["acct|ubuntu|ubuntu|normal|normal"], assoc
    assert user("sacctmgr -n -P show user ubuntu format=user,adminlevel").stdout.split() == [
        "ubuntu|Administrator"]

    # A finished job is in the accounting database.
    ran = user("srun -J acct-probe hostname")
    assert ran.stdout.split() == ["acct-0"], ran.stderr
    listed = _until_output(lambda: user("sacct -X -n -P -o JobName,State,User,Account"),
                           lambda out: "acct-probe|COMPLETED|ubuntu|ubuntu" in out.split())
    assert listed.split() == ["acct-probe|COMPLETED|ubuntu|ubuntu"]

    # Jobs without GPUs get memory per CPU, not the whole node's: two of them run side by side.
    first = user("sbatch --parsable -c1 -J cpu-a --wrap 'sleep 120'").stdout.strip()
    second = user("sbatch --parsable -c1 -J cpu-b --wrap 'sleep 120'").stdout.strip()
    _until_output(lambda: user(f"squeue -h -j {first},{second} -o %T"),
                  lambda out: out.split() == ["RUNNING", "RUNNING"])
    shown = user(f"scontrol show job {first}").stdout
    assert "MinMemoryCPU=" in shown and "MinMemoryNode=0" not in shown, shown

    # Pending jobs behind them: multifactor priorities (sprio), and the user reorders and sets them.
    pending = [user("sbatch --parsable --exclusive -J wait --wrap true").stdout.strip() for _ in range(2)]
    _until_output(lambda: user(f"squeue -h -j {','.join(pending)} -o %T"),
                  lambda out: out.split() == ["PENDING", "PENDING"])
    factors = user(f"sprio -h -j {pending[1]} -o '%i %Y %F %Q'")
    assert factors.returncode == 0 and factors.stdout.split()[0] == pending[1], factors
    top = user(f"scontrol top {pending[1]}")
    assert top.returncode == 0, top.stderr
    assert user(f"scontrol update JobId={pending[0]} Priority=4242").returncode == 0
    assert user(f"squeue -h -j {pending[0]} -o %Q").stdout.strip() == "4242"
    assert user(f"scancel {' '.join([first, second, *pending])}").returncode == 0
    # sacctmgr changes are the administrator's too; usage reports come from the same database.
    assert user("sacctmgr -i add qos urgent Priority=1000").returncode == 0
    assert user("sacctmgr -n -P show qos format=name").stdout.split() == ["normal", "urgent"]
    assert user("sreport -n -P cluster utilization").returncode == 0

    # The database is on the controller's disk, in the cluster's state; deleting the cluster ends its
    # MariaDB and slurmdbd and removes the files.
    local = driver.cluster(cluster["id"], body["fabric"]["subnet"])
    [instance] = local.node_names()
    controller = local.node(instance, "0.0.0.0")
    daemons = controller.running("mariadbd") + controller.running("slurmdbd")
    assert len(daemons) == 2 and (controller.dir / "lib" / "mariadb" / "slurm_acct_db").is_dir()
    assert admin.delete(f"/v1/clusters/{cluster['id']}").status_code in (200, 202, 204)
    deadline = time.monotonic() + 120
    while admin.get(f"/v1/clusters/{cluster['id']}").status_code != 404:
        assert time.monotonic() < deadline, get(admin, cluster["id"])["status"]
        worker.run_once()
        time.sleep(0.05)
    assert driver.wait_idle()
    assert [pid for pid in daemons if Path(f"/proc/{pid}").exists()] == []
    assert not local.dir.exists()
