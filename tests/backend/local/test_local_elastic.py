"""Elastic the Slurm way, on real daemons: an autoscaled cluster's slurm.conf declares every node up to
max_nodes (those with no machine as State=CLOUD), so `sbatch -N<max_nodes>` is accepted on a smaller
cluster; slurmctld's ResumeProgram asks for the missing node (the request file on the controller), the
autoscaler adds it and the job runs once it joins. SQLite only: the store is not what is tested here."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from backend.provisioning.drivers.local.driver import LocalDriver
from backend.provisioning.drivers.local.namespaces import run
from backend.provisioning.settings import EngineSettings
from backend.provisioning.worker import EngineWorker
from backend.services import quotas
from backend.store.models import AuditEvent, Cluster
from tests.backend.engine.conftest import FAST, cluster_body, get, sessions
from tests.backend.engine.test_engine_autoscaling import waiting
from tests.backend.local.test_local_autoscaling import _autoscale_until
from tests.backend.local.test_local_driver_nodes import _converged, _ssh, _until, driver

__all__ = ["driver", "sessions"]  # fixtures, used here


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_local_elastic_cluster_accepts_a_job_for_max_nodes_and_runs_it_once_the_node_joins(
    admin: TestClient, sessions: sessionmaker[Session], driver: LocalDriver, tmp_path: Path
) -> None:
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "key")])
    key = admin.post("/v1/ssh-keys", json={"name": "k", "public_key": (tmp_path / "key.pub").read_text()})
    worker = EngineWorker(sessions, EngineSettings.model_validate(FAST), driver=driver)
    # Two nodes (a jumphost runs slurmctld) that may grow to three; idle for 30 minutes before Slurm
    # gives a node back, so nothing shrinks while the test runs.
    body = cluster_body(name="el", ssh_key_ids=[key.json()["id"]],
                        autoscaling={"min_nodes": 2, "max_nodes": 3, "scale_down_idle_minutes": 30})
    del body["node_count"]
    created = admin.post("/v1/clusters", json=body)
    assert created.status_code == 201, created.text
    cluster_id = created.json()["id"]
    _until(worker, admin, cluster_id, _converged(2))
    login = get(admin, cluster_id)["login"]["public_ip"]
    key_file = tmp_path / "key"

    # el-2 has no machine: Slurm knows it as a powered-down cloud node, and accepts a 3-node job.
    assert "CLOUD" in " ".join(_ssh(key_file, login, "scontrol show node el-2"))
    _quota(sessions, cluster_id, max_gpus=16)  # two 8-GPU nodes: none more for now
    submitted = _ssh(key_file, login, "sbatch -N3 -o elastic.out --wrap 'srun hostname'")
    assert submitted[:3] == ["Submitted", "batch", "job"], submitted

    # ResumeProgram asked for el-2, which the quota leaves no room for: the history says so, once, and the
    # request waits in Slurm's file; once the quota is raised the autoscaler adds el-2 and the job runs.
    deadline = time.monotonic() + 60
    while not (said := waiting(admin, cluster_id)):
        assert time.monotonic() < deadline, get(admin, cluster_id)["phase_history"]
        worker.autoscale()
        worker.run_once()
        time.sleep(0.3)
    assert "Slurm resumed el-2" in said[0] and "quota max_gpus leaves no room" in said[0], said
    for _ in range(3):
        assert worker.autoscale() == 0
    assert waiting(admin, cluster_id) == said and get(admin, cluster_id)["node_count"] == 2
    _quota(sessions, cluster_id, max_gpus=None)
    _autoscale_until(worker, admin, cluster_id, 3, seconds=120)
    _until(worker, admin, cluster_id, _converged(3))
    deadline = time.monotonic() + 120
    while sorted(out := _ssh(key_file, login, "cat elastic.out 2>/dev/null")) != ["el-0", "el-1", "el-2"]:
        assert time.monotonic() < deadline, (out, _ssh(key_file, login, "squeue; sinfo -N"))
        worker.run_once()
        time.sleep(1)

    query = select(AuditEvent).where(AuditEvent.resource_id == cluster_id,
                                     AuditEvent.action == "cluster.autoscaled")
    with sessions() as session:
        events = [dict(e.details) for e in session.scalars(query)]
    assert [(e["action"], e["to_node_count"]) for e in events] == [("scale_up", 3)]
    assert "Slurm resumed el-2" in str(events[0]["reason"]), events


def _quota(sessions: sessionmaker[Session], cluster_id: str, *, max_gpus: int | None) -> None:
    with sessions() as session, session.begin():
        row = session.get(Cluster, cluster_id)
        assert row is not None
        quotas.set_quota(session=session, project_id=row.project_id, changes={"max_gpus": max_gpus})
