"""Autoscaling: an autoscaled Slurm cluster grows while jobs wait for nodes (up to max_nodes) and releases
exactly the nodes idle for scale_down_idle_minutes (never below min_nodes, never a busy node), each
decision an audit event with its reason. The queue is modelled by the test (a simulated datacenter whose
scheduler reports it); idle time passes on the engine's manual clock."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from backend.domain.clock import ManualClock
from backend.provisioning import autoscaler
from backend.provisioning.driver import Job, NodeRun
from backend.provisioning.drivers.simulated.datacenter import SimulatedDatacenter
from backend.provisioning.settings import EngineSettings
from backend.provisioning.worker import EngineWorker
from backend.services import quotas
from backend.store.models import AuditEvent, Cluster
from tests.backend.engine.conftest import FAST, cluster_body, drain, get

EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def job(job_id: int, state: str, nodes: str = "", reason: str | None = None,
        ended_at: dt.datetime | None = None) -> Job:
    return Job(job_id=job_id, name="sleep", user="alice", partition="gpu", nodes=nodes, gpus=8, state=state,
               submitted_at=EPOCH, started_at=None if state == "PENDING" else EPOCH, ended_at=ended_at,
               time_limit=dt.timedelta(hours=1), priority=1, reason=reason)


class ModelledQueue(SimulatedDatacenter):
    """The simulated datacenter, with the Slurm queue the test sets."""

    queue: list[Job] = []

    def cluster_jobs(self, session: Session, cluster_name: str, nodes: Sequence[NodeRun], now: dt.datetime,
                     *, cluster_id: str) -> list[Job]:
        return list(self.queue)


def scaled(sessions: sessionmaker[Session], cluster_id: str) -> list[dict[str, object]]:
    with sessions() as session:
        query = select(AuditEvent).where(AuditEvent.resource_id == cluster_id,
                                         AuditEvent.action == "cluster.autoscaled")
        return [dict(e.details) for e in session.scalars(query.order_by(AuditEvent.occurred_at))]


def waiting(admin: TestClient, cluster_id: str) -> list[str]:
    """Why the autoscaler could not add wanted nodes, as the cluster's phase history says."""
    phases = get(admin, cluster_id)["phase_history"]
    return [p["detail"] for p in phases if p["phase"] == autoscaler.WAITING_PHASE]


def test_engine_autoscaling_grows_on_pending_jobs_and_releases_the_idle_nodes(
    admin: TestClient, sessions: sessionmaker[Session], clock: ManualClock
) -> None:
    body = cluster_body(autoscaling={"min_nodes": 1, "max_nodes": 3, "scale_down_idle_minutes": 5})
    del body["node_count"]
    created = admin.post("/v1/clusters", json=body)
    assert created.status_code == 201, created.text
    cluster = created.json()
    assert (cluster["node_count"], cluster["orchestrator"]) == (1, "slurm")
    assert cluster["autoscaling"] == {"min_nodes": 1, "max_nodes": 3, "scale_down_idle_minutes": 5}
    settings = EngineSettings(**FAST)
    driver = ModelledQueue(settings)
    worker = EngineWorker(sessions, settings, driver=driver, clock=clock)
    drain(worker)
    assert get(admin, cluster["id"])["status"] == "RUNNING"

    # train-0 busy, three one-node jobs waiting for nodes: grow by two, to max_nodes.
    driver.queue = [job(1, "RUNNING", "train-0"), job(2, "PENDING", reason="Resources"),
                    job(3, "PENDING", reason="Priority"), job(4, "PENDING", reason="Priority")]
    assert worker.autoscale() == 1
    assert get(admin, cluster["id"])["node_count"] == 3
    assert worker.autoscale() == 0  # the new nodes are still coming up: no second decision
    drain(worker)
    grown = get(admin, cluster["id"])
    assert grown["status"] == "RUNNING" and [n["status"] for n in grown["nodes"]] == ["RUNNING"] * 3
    assert worker.autoscale() == 0  # at max_nodes: the waiting jobs wait, and the history says why, once
    assert worker.autoscale() == 0
    assert waiting(admin, cluster["id"]) == [  # the queue above, not read again: the new nodes are idle
        "3 job(s) pending for lack of nodes ask for 3 node(s), 2 idle; none can be added now "
        "(at max_nodes 3)"]

    # Only train-1 has no job: it alone goes once idle long enough (not the last node, train-2).
    driver.queue = [job(5, "RUNNING", "train-[0,2]"), job(1, "COMPLETED", "train-[0-1]", ended_at=EPOCH)]
    assert worker.autoscale() == 0  # idle, but not for 5 minutes yet
    clock.advance(minutes=5)
    assert worker.autoscale() == 1
    drain(worker)
    shrunk = get(admin, cluster["id"])
    assert shrunk["node_count"] == 2 and sorted(n["name"] for n in shrunk["nodes"]) == ["train-0", "train-2"]

    # Nothing runs: down to min_nodes and no further.
    driver.queue = []
    assert worker.autoscale() == 1
    drain(worker)
    assert worker.autoscale() == 0
    assert get(admin, cluster["id"])["node_count"] == 1

    events = scaled(sessions, cluster["id"])
    assert [(e["action"], e["from_node_count"], e["to_node_count"]) for e in events] == [
        ("scale_up", 1, 3), ("scale_down", 3, 2), ("scale_down", 2, 1)]
    assert events[0]["reason"] == ("3 job(s) pending for lack of nodes ask for 3 node(s), 0 idle: adding 2; "
                                   "capped at max_nodes 3")
    assert events[1]["removed_nodes"] == ["train-1"]
    assert str(events[1]["reason"]).startswith("train-1 had no job for at least 5 minutes (idle since ")
    assert str(events[2]["reason"]).endswith("no job pending; min_nodes 1")

    # A decision made on a membership that changed meanwhile, or after autoscaling was turned off, is dropped.
    def stale(members: list[str]) -> bool:
        with worker.session_factory() as session:
            row = session.get(Cluster, cluster["id"])
            assert row is not None
            return autoscaler.apply(session, worker.catalog, row, autoscaler.Decision(3, (), "stale"),
                                    members=members, now=clock.now())
    assert not stale(["train-0", "train-2"])
    assert admin.patch(f"/v1/clusters/{cluster['id']}", json={"autoscaling": None}).status_code == 200
    assert not stale([n["name"] for n in get(admin, cluster["id"])["nodes"]])
    assert get(admin, cluster["id"])["node_count"] == 1 and len(scaled(sessions, cluster["id"])) == 3


def test_engine_autoscaling_scale_up_stops_at_the_projects_quota(
    admin: TestClient, sessions: sessionmaker[Session], clock: ManualClock
) -> None:
    body = cluster_body(autoscaling={"min_nodes": 1, "max_nodes": 3, "scale_down_idle_minutes": 5})
    del body["node_count"]
    cluster = admin.post("/v1/clusters", json=body).json()
    with sessions() as session, session.begin():
        row = session.get(Cluster, cluster["id"])
        assert row is not None
        quotas.set_quota(session=session, project_id=row.project_id, changes={"max_gpus": 16})
    driver = ModelledQueue(EngineSettings(**FAST))
    worker = EngineWorker(sessions, EngineSettings(**FAST), driver=driver, clock=clock)
    drain(worker)
    driver.queue = [job(1, "RUNNING", "train-0"), job(2, "PENDING", reason="Resources"),
                    job(3, "PENDING", reason="Resources")]
    assert worker.autoscale() == 1
    assert get(admin, cluster["id"])["node_count"] == 2  # 16 GPUs: room for one more 8-GPU node, not two
    [event] = scaled(sessions, cluster["id"])
    assert str(event["reason"]).endswith("adding 2; capped by quota max_gpus")
    drain(worker)
    assert worker.autoscale() == 0  # at the quota: the waiting job waits, no decision; the history says why
    assert waiting(admin, cluster["id"]) == [
        "2 job(s) pending for lack of nodes ask for 2 node(s), 1 idle: adding 1, but the project's quota "
        "max_gpus leaves no room"]


def test_api_autoscaling_rules_name_the_fields(admin: TestClient) -> None:
    def refused(response_body: dict[str, object], method: str = "post", path: str = "/v1/clusters") -> str:
        response = admin.request(method, path, json=response_body)
        assert response.status_code == 422, response.text
        errors = response.json()["errors"]
        return f"{errors[0]['field']}: {errors[0]['message']}"

    scaling = {"min_nodes": 1, "max_nodes": 4}
    assert refused(cluster_body(autoscaling=scaling)).startswith(
        "node_count: node_count and autoscaling cannot both be set")
    no_count = {k: v for k, v in cluster_body().items() if k != "node_count"}
    assert refused({**no_count, "autoscaling": {"min_nodes": 3, "max_nodes": 2}}).startswith(
        "autoscaling.max_nodes: autoscaling.max_nodes (2) must be at least autoscaling.min_nodes (3)")
    assert "lower it to" in refused({**no_count, "autoscaling": {"min_nodes": 1, "max_nodes": 4096}})
    assert "needs orchestrator = slurm" in refused({**no_count, "orchestrator": "kubernetes",
                                                    "autoscaling": scaling})
    cluster = admin.post("/v1/clusters", json={**no_count, "autoscaling": scaling}).json()
    assert refused({"node_count": 2}, "patch", f"/v1/clusters/{cluster['id']}").startswith(
        "node_count: node_count and autoscaling cannot both be set")
    # Off again: node_count is the user's.
    off = admin.patch(f"/v1/clusters/{cluster['id']}", json={"autoscaling": None})
    assert off.status_code == 200 and off.json()["autoscaling"] is None


def test_autoscaler_reads_slurm_node_lists_and_multi_node_demand() -> None:
    expected = {"train-0", "train-1", "train-2", "train-5", "login-1"}
    assert autoscaler.node_names("train-[0-2,5],login-1") == expected
    assert autoscaler.node_names("") == set()
    wide = Job(**{**vars(job(9, "PENDING", reason="Resources")), "node_count": 2})
    placed = job(10, "PENDING", nodes="train-0", reason="Resources")  # bound to a node: no demand
    held = job(11, "PENDING", reason="Dependency")
    assert autoscaler.waiting_nodes([wide, placed, held, job(12, "PENDING", reason="Priority")]) == (2, 3)
