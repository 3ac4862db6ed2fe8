"""Autoscaling under the local driver, from the real Slurm queue (`squeue` over SSH): more exclusive jobs
than nodes grow the cluster to max_nodes, and it shrinks back to min_nodes once its nodes have been idle
for scale_down_idle_minutes (counted in seconds here: autoscale_idle_unit_seconds = 1). SQLite only:
the store is not what is tested here."""

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
from backend.store.models import AuditEvent
from tests.backend.engine.conftest import FAST, cluster_body, get, sessions
from tests.backend.local.test_local_driver_nodes import _converged, _ssh, _until, driver

__all__ = ["driver", "sessions"]  # fixtures, used here


def _autoscale_until(worker: EngineWorker, admin: TestClient, cluster_id: str, node_count: int,
                     seconds: float = 60) -> None:
    """Autoscaler rounds (and engine passes) until the cluster's node_count is `node_count`."""
    deadline = time.monotonic() + seconds
    while get(admin, cluster_id)["node_count"] != node_count:
        assert time.monotonic() < deadline, get(admin, cluster_id)
        worker.autoscale()
        worker.run_once()
        time.sleep(0.3)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_local_autoscaling_grows_on_queued_jobs_and_shrinks_when_idle(
    admin: TestClient, sessions: sessionmaker[Session], driver: LocalDriver, tmp_path: Path
) -> None:
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "key")])
    key = admin.post("/v1/ssh-keys", json={"name": "k", "public_key": (tmp_path / "key.pub").read_text()})
    settings = EngineSettings.model_validate({**FAST, "autoscale_idle_unit_seconds": 1})
    worker = EngineWorker(sessions, settings, driver=driver)
    body = cluster_body(name="auto", ssh_key_ids=[key.json()["id"]],
                        autoscaling={"min_nodes": 1, "max_nodes": 2, "scale_down_idle_minutes": 2})
    del body["node_count"]
    created = admin.post("/v1/clusters", json=body)
    assert created.status_code == 201, created.text
    cluster_id = created.json()["id"]
    _until(worker, admin, cluster_id, _converged(1))
    login = get(admin, cluster_id)["login"]["public_ip"]

    # Two exclusive jobs for one node: the second waits for a node, so the cluster grows to max_nodes.
    submitted = _ssh(tmp_path / "key", login, "for i in 1 2; do sbatch --exclusive --wrap 'sleep 6'; done")
    assert submitted.count("Submitted") == 2, submitted
    _autoscale_until(worker, admin, cluster_id, 2)
    _until(worker, admin, cluster_id, _converged(2))

    # Once both jobs ended and the nodes have been idle for 2 "minutes" (seconds): back to min_nodes.
    _autoscale_until(worker, admin, cluster_id, 1)
    _until(worker, admin, cluster_id, _converged(1))
    query = select(AuditEvent).where(AuditEvent.resource_id == cluster_id,
                                     AuditEvent.action == "cluster.autoscaled")
    with sessions() as session:
        events = [dict(e.details) for e in session.scalars(query.order_by(AuditEvent.occurred_at))]
    assert [(e["action"], e["to_node_count"]) for e in events] == [("scale_up", 2), ("scale_down", 1)]
    assert "pending for lack of nodes" in str(events[0]["reason"])
    assert "had no job for at least 2 seconds" in str(events[1]["reason"])
