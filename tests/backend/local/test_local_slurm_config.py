"""The Slurm configuration a cluster declares, on a real local cluster (root, Debian's daemons, slurmdbd
and MariaDB): a second partition and a QoS are there when it comes up and a job runs under them, with the
prolog and epilog scripts on the cluster's volume run by slurmd for it; a partition and a QoS added by a
PATCH are applied in place (`scontrol reconfigure`, no slurmctld restart; sacctmgr) while that job keeps
running. The store is not what is tested here, so SQLite only."""

from __future__ import annotations

import secrets
import subprocess
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from backend.provisioning.drivers.local.driver import LocalDriver
from backend.provisioning.drivers.local.namespaces import run
from backend.provisioning.settings import EngineSettings, use
from backend.provisioning.worker import EngineWorker
from tests.backend.engine.conftest import FAST, create, get, sessions
from tests.backend.local.test_local_accounting import _as_user, _until_output
from tests.backend.local.test_local_driver_nodes import _converged, _until, driver

__all__ = ["driver", "sessions"]  # fixtures, used here

DEBUG = {"name": "debug", "max_time_minutes": 30, "default_time_minutes": 5}
# Run by slurmd as root on the node when a job starts (PrologFlags=Alloc) and when it ends: the job's id
# appended to a file on the volume. Never failing: a failed prolog would drain the node.
HOOK = "#!/bin/sh\necho \"$SLURM_JOB_ID\" >> \"$(dirname \"$0\")/$(basename \"$0\" .sh).ran\"\nexit 0\n"


def _hooks_volume(admin: TestClient, driver: LocalDriver) -> tuple[str, dict[str, str]]:
    """A volume holding executable prolog and epilog scripts; (its id, the slurm_config fields naming
    them at the volume's mount path)."""
    created = admin.post("/v1/volumes", json={"name": "hooks", "region": "us-east-1", "size_tib": 1})
    assert created.status_code in (200, 201), created.text
    volume: str = created.json()["id"]
    directory = driver.volume_dir(volume)
    directory.mkdir(parents=True)
    for hook in ("prolog", "epilog"):
        (directory / f"{hook}.sh").write_text(HOOK)
        (directory / f"{hook}.sh").chmod(0o755)
    return volume, {hook: f"/mnt/shared/{volume}/{hook}.sh" for hook in ("prolog", "epilog")}


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_local_cluster_has_its_declared_partitions_and_qos_and_takes_changes_in_place(
    admin: TestClient, sessions: sessionmaker[Session], driver: LocalDriver, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A block of its own: other runs of the local driver on this machine may hold 10.0.0.0/22.
    block = secrets.randbelow(16 * 64)
    monkeypatch.setenv("GPUCLOUD_LOCAL_ADDRESS_RANGE", f"172.{16 + block // 64}.{block % 64 * 4}.0/22")
    use(EngineSettings())  # in force now; the process_configuration fixture puts the old ones back
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "key")])
    key = admin.post("/v1/ssh-keys", json={"name": "k", "public_key": (tmp_path / "key.pub").read_text()})
    worker = EngineWorker(sessions, EngineSettings.model_validate(FAST), driver=driver)
    volume, hooks = _hooks_volume(admin, driver)
    cluster = create(admin, name="scfg", node_count=1, orchestrator="slurm", ssh_key_ids=[key.json()["id"]],
                     volume_ids=[volume], slurm_config={
                         "partitions": [DEBUG], "qos": [{"name": "urgent", "priority": 1000}], **hooks})
    _until(worker, admin, cluster["id"], _converged(1), seconds=240)
    login = get(admin, cluster["id"])["login"]["public_ip"]

    def user(command: str) -> subprocess.CompletedProcess[str]:
        return _as_user(tmp_path / "key", login, command)

    assert user("sinfo -h -o %P").stdout.split() == ["gpu*", "debug"]
    shown = user("scontrol show partition debug").stdout
    assert "MaxTime=00:30:00" in shown and "DefaultTime=00:05:00" in shown, shown
    assert user("sacctmgr -n -P show qos format=name,priority").stdout.split() == ["normal|0", "urgent|1000"]
    assoc = user("sacctmgr -n -P show assoc user=ubuntu format=qos").stdout.strip()
    assert sorted(assoc.split(",")) == ["normal", "urgent"], assoc

    job = user("sbatch --parsable -p debug --qos=urgent -J scfg --wrap 'sleep 300'")
    assert job.returncode == 0, job.stderr
    job_id = job.stdout.strip()
    _until_output(lambda: user(f"squeue -h -j {job_id} -o '%T %P %q %l'"),
                  lambda out: out.split() == ["RUNNING", "debug", "urgent", "5:00"])
    # slurmd ran the prolog on the volume for the job, as root (the file is root's, on the shared volume).
    assert user(f"cat /mnt/shared/{volume}/prolog.ran").stdout.split() == [job_id]
    assert user(f"stat -c %U /mnt/shared/{volume}/prolog.ran").stdout.split() == ["root"]

    # A partition and a QoS added in place: slurm.conf rewritten and reconfigured (slurmctld is not
    # restarted: the same BOOT_TIME), the QoS made; the running job keeps running.
    def boot_time() -> list[str]:
        return [line for line in user("scontrol show config").stdout.splitlines() if "BOOT_TIME" in line]

    booted = boot_time()
    assert len(booted) == 1, booted
    changed = admin.patch(f"/v1/clusters/{cluster['id']}", json={"slurm_config": {
        "partitions": [DEBUG, {"name": "long", "max_time_minutes": 2880}],
        "qos": [{"name": "urgent", "priority": 1000},
                {"name": "low", "priority": 10, "max_wall_minutes": 60}], **hooks}})
    assert changed.status_code == 200, changed.text
    deadline = time.monotonic() + 120
    while "long" not in user("sinfo -h -o %P").stdout.split():
        assert time.monotonic() < deadline, get(admin, cluster["id"])["phase"]
        worker.run_once()
        time.sleep(0.2)
    _until(worker, admin, cluster["id"], _converged(1), seconds=120)
    assert user("sinfo -h -o %P").stdout.split() == ["gpu*", "debug", "long"]
    assert user(f"squeue -h -j {job_id} -o %T").stdout.split() == ["RUNNING"]
    assert boot_time() == booted
    # The new QoS is there and allowed to the user, with its limit.
    qos = user("sacctmgr -n -P show qos format=name,priority,maxwall").stdout.split()
    assert qos == ["normal|0|", "urgent|1000|", "low|10|01:00:00"], qos
    assoc = user("sacctmgr -n -P show assoc user=ubuntu format=qos").stdout.strip()
    assert sorted(assoc.split(",")) == ["low", "normal", "urgent"], assoc
    assert user(f"scancel {job_id}").returncode == 0
    # The epilog runs when the job ends (scancel'ed here), the prolog ran once.
    _until_output(lambda: user(f"cat /mnt/shared/{volume}/epilog.ran"), lambda out: out.split() == [job_id])
    assert user(f"cat /mnt/shared/{volume}/prolog.ran").stdout.split() == [job_id]

    assert admin.delete(f"/v1/clusters/{cluster['id']}").status_code in (200, 202, 204)
    deadline = time.monotonic() + 120
    while admin.get(f"/v1/clusters/{cluster['id']}").status_code != 404:
        assert time.monotonic() < deadline, get(admin, cluster["id"])["status"]
        worker.run_once()
        time.sleep(0.05)
