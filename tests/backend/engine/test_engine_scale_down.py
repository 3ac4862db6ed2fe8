"""Scale-down never surprises a running job (issue 28): the nodes that go are chosen idle first, then
newest; a busy one is drained and keeps its jobs for scale_down_grace_minutes, after which they are
requeued (never killed) and the node released; the pending removal is in the database, so a crashed pass
or a new worker carries on without requeueing twice. The queue is the test's (a simulated datacenter
whose scheduler reports it), time the engine's manual clock."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from backend.domain.clock import ManualClock
from backend.provisioning import scale_down
from backend.provisioning.driver import Job, NodeRun, Operation, OperationRequest, OpKind, node_names
from backend.provisioning.drivers.simulated.datacenter import SimulatedDatacenter
from backend.provisioning.settings import EngineSettings
from backend.provisioning.worker import EngineWorker
from backend.store.engine_models import EngineNode, NodeTransition, PhaseRecord, Step
from backend.store.models import Cluster
from tests.backend.engine.conftest import FAST, STEP, catch_up, cluster_body, drain, get

EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def job(job_id: int, state: str, nodes: str, name: str = "train") -> Job:
    return Job(job_id=job_id, name=name, user="alice", partition="gpu", nodes=nodes, gpus=8, state=state,
               submitted_at=EPOCH, started_at=EPOCH, ended_at=None if state == "RUNNING" else EPOCH,
               time_limit=dt.timedelta(hours=4), priority=1, reason=None)


class ModelledQueue(SimulatedDatacenter):
    """The simulated datacenter with the test's Slurm queue; `node_requeue` acts like the real scheduler
    (state outside the engine's transaction): each new token requeues the node's running jobs once."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.queue: list[Job] = []
        self.requeues: dict[str, list[int]] = {}  # token -> job ids requeued
        self.submitted: list[str] = []  # every node_requeue submission, repeats included
        self.crash_after_requeue = False

    def cluster_jobs(self, session: Session, cluster_name: str, nodes: Sequence[NodeRun], now: dt.datetime,
                     *, cluster_id: str) -> list[Job]:
        return list(self.queue)

    def submit(self, session: Session, request: OperationRequest, now: dt.datetime) -> Operation:
        if request.kind == OpKind.NODE_REQUEUE:
            self.submitted.append(request.client_token)
            node = request.node_name or ""
            hit = [j for j in self.queue if j.state == "RUNNING" and node in node_names(j.nodes)]
            if request.client_token not in self.requeues:
                self.requeues[request.client_token] = [j.job_id for j in hit]
            if self.crash_after_requeue:
                # The scheduler took it, squeue does not show it yet, and the pass dies before committing.
                self.crash_after_requeue = False
                raise RuntimeError("worker killed after the scheduler took the requeue")
            self.queue = [j for j in self.queue if j not in hit] + [job(j.job_id, "PENDING", "") for j in hit]
        return super().submit(session, request, now)


def run_for(worker: EngineWorker, clock: ManualClock, seconds: float) -> None:
    """Run passes for `seconds` of engine time (no further), moving the clock to each due time."""
    catch_up(clock)
    end = clock.now() + dt.timedelta(seconds=seconds)
    for _ in range(10_000):
        if worker.run_once().claimed:
            continue
        due = worker.next_due_at()
        if due is None or due > end:
            clock.set(end)
            return
        clock.set(max(due, clock.now()) + STEP)
    raise AssertionError("engine did not settle")


def members(admin: TestClient, cluster_id: str) -> list[str]:
    return sorted(n["name"] for n in get(admin, cluster_id)["nodes"]
                  if n["status"] not in ("DESTROYING", "DESTROYED"))


def node(sessions: sessionmaker[Session], cluster_id: str, name: str) -> EngineNode:
    with sessions() as session:
        found = session.scalars(select(EngineNode).where(
            EngineNode.cluster_id == cluster_id, EngineNode.name == name)
            .order_by(EngineNode.created_at.desc())).first()
        assert found is not None
        session.expunge(found)
        return found


def started(admin: TestClient, sessions: sessionmaker[Session], clock: ManualClock, count: int,
            **overrides: Any) -> tuple[dict[str, Any], ModelledQueue, EngineWorker]:
    created = admin.post("/v1/clusters", json=cluster_body(node_count=count, **overrides))
    assert created.status_code == 201, created.text
    settings = EngineSettings.model_validate(FAST)
    driver = ModelledQueue(settings)
    worker = EngineWorker(sessions, settings, driver=driver, clock=clock)
    drain(worker)
    cluster = get(admin, created.json()["id"])
    assert cluster["status"] == "RUNNING"
    return cluster, driver, worker


def scale(admin: TestClient, cluster_id: str, count: int, **extra: Any) -> None:
    response = admin.patch(f"/v1/clusters/{cluster_id}", json={"node_count": count, **extra})
    assert response.status_code == 200, response.text


def test_engine_scale_down_takes_idle_nodes_first_then_the_newest(
    admin: TestClient, sessions: sessionmaker[Session], clock: ManualClock
) -> None:
    cluster, driver, worker = started(admin, sessions, clock, 4)
    assert cluster["scale_down_grace_minutes"] == 30  # the default
    driver.queue = [job(11, "RUNNING", "train-1"), job(12, "RUNNING", "train-3")]

    scale(admin, cluster["id"], 3)  # train-0 and train-2 are idle: the newer of them goes
    drain(worker)
    assert members(admin, cluster["id"]) == ["train-0", "train-1", "train-3"]

    scale(admin, cluster["id"], 1)  # train-0 idle goes at once; then the newest busy one, train-3
    run_for(worker, clock, 60)
    assert members(admin, cluster["id"]) == ["train-1", "train-3"]
    leaving = node(sessions, cluster["id"], "train-3")
    assert scale_down.leaving(leaving) and leaving.drained and leaving.applied_config["drained"]
    assert not node(sessions, cluster["id"], "train-1").drained
    assert get(admin, cluster["id"])["node_count"] == 1

    # Its job ends within the grace: the node goes, nothing was requeued.
    driver.queue = [job(11, "RUNNING", "train-1"), job(12, "COMPLETED", "train-3")]
    run_for(worker, clock, 120)
    assert members(admin, cluster["id"]) == ["train-1"]
    assert driver.submitted == []
    with sessions() as session:
        details = [r.detail for r in session.scalars(select(PhaseRecord).where(
            PhaseRecord.cluster_id == cluster["id"], PhaseRecord.phase == "ScaleDownDraining"))]
    assert len(details) == 1 and "train-3 drained for a scale-down: waiting for job(s) 12" in str(details[0])


def test_engine_scale_down_requeues_the_jobs_after_the_grace_then_releases(
    admin: TestClient, sessions: sessionmaker[Session], clock: ManualClock
) -> None:
    cluster, driver, worker = started(admin, sessions, clock, 2, scale_down_grace_minutes=10)
    assert cluster["scale_down_grace_minutes"] == 10
    driver.queue = [job(21, "RUNNING", "train-0"), job(22, "RUNNING", "train-[0-1]", name="ddp")]

    scale(admin, cluster["id"], 1)
    run_for(worker, clock, 9 * 60)  # within the grace: drained, serving its job
    assert members(admin, cluster["id"]) == ["train-0", "train-1"]
    assert node(sessions, cluster["id"], "train-1").drained and driver.submitted == []

    run_for(worker, clock, 2 * 60)  # past it: job 22 (on both nodes) requeued, then train-1 released
    assert members(admin, cluster["id"]) == ["train-0"]
    assert list(driver.requeues.values()) == [[22]]
    assert [j.state for j in driver.queue if j.job_id == 22] == ["PENDING"]
    released = node(sessions, cluster["id"], "train-1")
    with sessions() as session:
        reasons = list(session.scalars(select(NodeTransition.reason).where(
            NodeTransition.node_id == released.id, NodeTransition.to_status == "DESTROYING")))
        assert reasons == ["removed by a scale-down after scale_down_grace_minutes: job(s) requeued (22)"]
        steps = list(session.scalars(select(Step).where(Step.cluster_id == cluster["id"],
                                                        Step.kind == "node_requeue")))
    assert [s.outcome for s in steps] == ["succeeded"]
    assert not node(sessions, cluster["id"], "train-0").drained  # the staying node was never drained


def test_engine_scale_down_with_no_grace_requeues_once_drained(
    admin: TestClient, sessions: sessionmaker[Session], clock: ManualClock
) -> None:
    cluster, driver, worker = started(admin, sessions, clock, 2, scale_down_grace_minutes=0)
    driver.queue = [job(31, "RUNNING", "train-0"), job(32, "RUNNING", "train-1")]
    scale(admin, cluster["id"], 1)
    run_for(worker, clock, 30)
    assert members(admin, cluster["id"]) == ["train-0"] and list(driver.requeues.values()) == [[32]]


def test_engine_scale_down_removal_survives_a_crash_and_requeues_once(
    admin: TestClient, sessions: sessionmaker[Session], clock: ManualClock
) -> None:
    cluster, driver, worker = started(admin, sessions, clock, 2, scale_down_grace_minutes=5)
    driver.queue = [job(41, "RUNNING", "train-0"), job(42, "RUNNING", "train-1")]
    scale(admin, cluster["id"], 1)
    run_for(worker, clock, 60)
    marked = node(sessions, cluster["id"], "train-1")
    assert scale_down.leaving(marked)  # stored: a new worker process sees the pending removal

    # A new worker (a restarted process) takes over; its pass is killed after the scheduler took the
    # requeue but before it committed. The next pass repeats the same client token: requeued once.
    settings = EngineSettings.model_validate(FAST)
    successor = ModelledQueue(settings)
    successor.queue, successor.crash_after_requeue = driver.queue, True
    restarted = EngineWorker(sessions, settings, driver=successor, clock=clock)
    run_for(restarted, clock, 10 * 60)
    assert members(admin, cluster["id"]) == ["train-0"]
    assert len(successor.submitted) == 2 and len(set(successor.submitted)) == 1
    assert list(successor.requeues.values()) == [[42]]
    assert successor.submitted[0] == f"{marked.id}/node_requeue/{marked.op_seq + 1}"


def test_engine_scale_up_while_draining_keeps_the_leaving_node(
    admin: TestClient, sessions: sessionmaker[Session], clock: ManualClock
) -> None:
    cluster, driver, worker = started(admin, sessions, clock, 2)
    driver.queue = [job(51, "RUNNING", "train-0"), job(52, "RUNNING", "train-1")]
    scale(admin, cluster["id"], 1)
    run_for(worker, clock, 60)
    assert node(sessions, cluster["id"], "train-1").drained

    scale(admin, cluster["id"], 2)  # back up: the draining node stays (undrained), no new node
    run_for(worker, clock, 60)
    kept = node(sessions, cluster["id"], "train-1")
    assert not scale_down.leaving(kept) and not kept.drained and not kept.applied_config["drained"]
    assert members(admin, cluster["id"]) == ["train-0", "train-1"]
    assert len(get(admin, cluster["id"])["nodes"]) == 2


def test_engine_scale_down_by_explicit_names_waits_for_their_jobs(
    admin: TestClient, sessions: sessionmaker[Session], clock: ManualClock
) -> None:
    cluster, driver, worker = started(admin, sessions, clock, 3)
    driver.queue = [job(61, "RUNNING", "train-0")]
    scale(admin, cluster["id"], 2, remove_node_names=["train-0"])
    run_for(worker, clock, 60)
    assert members(admin, cluster["id"]) == ["train-0", "train-1", "train-2"]
    assert node(sessions, cluster["id"], "train-0").drained
    driver.queue = []
    run_for(worker, clock, 120)
    assert members(admin, cluster["id"]) == ["train-1", "train-2"]


def test_scale_down_preview_names_the_nodes_and_their_jobs(
    admin: TestClient, sessions: sessionmaker[Session], clock: ManualClock
) -> None:
    cluster, driver, _ = started(admin, sessions, clock, 3)
    driver.queue = [job(71, "RUNNING", "train-1"), job(72, "RUNNING", "train-2", name="sweep")]
    # The app reads the workload through its runtime's driver: the same modelled queue.
    admin.app.state.gpucloud.runtime.driver = driver  # type: ignore[attr-defined]
    response = admin.get(f"/v1/clusters/{cluster['id']}/scale-down-preview", params={"node_count": 1})
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["node_count"], body["current_node_count"], body["workload_known"]) == (1, 3, True)
    assert [(n["name"], [j["job_id"] for j in n["running_jobs"]]) for n in body["nodes"]] == [
        ("train-0", []), ("train-2", [72])]  # idle first, then the newest
    assert body["summary"].startswith("Scaling train to 1 node(s) removes train-0 (idle), train-2 (running "
                                      "job(s) 72 (sweep, alice)).")
    assert "scale_down_grace_minutes (30)" in body["summary"]
    assert admin.get(f"/v1/clusters/{cluster['id']}/scale-down-preview").json()["nodes"] == []
    assert admin.get(f"/v1/clusters/{cluster['id']}/scale-down-preview",
                     params={"node_count": 0}).status_code == 422
    assert admin.get("/v1/clusters/clu_missing/scale-down-preview").status_code == 404


def test_scale_down_never_takes_the_controller_of_a_cluster_on_a_host_pool() -> None:
    # A pool cluster's first node runs slurmctld and is its login node (no jumphost): an idle first node
    # stays and a busy newer one is drained instead; elsewhere the first node is a node like any other.
    members = [EngineNode(name=f"own-{i}", index=i) for i in range(3)]
    busy = {"own-1": [job(1, "RUNNING", "own-1")], "own-2": [job(2, "RUNNING", "own-2")]}
    on_pool, elsewhere = Cluster(host_pool_id="hpl_1"), Cluster(host_pool_id=None)
    assert [n.name for n in scale_down.choose(on_pool, members, 1, busy)] == ["own-2"]
    assert [n.name for n in scale_down.choose(on_pool, members, 5, {})] == ["own-2", "own-1"]
    assert [n.name for n in scale_down.choose(elsewhere, members, 1, busy)] == ["own-0"]
    assert scale_down.controller(on_pool, members) is members[0]
    assert scale_down.controller(elsewhere, members) is None
