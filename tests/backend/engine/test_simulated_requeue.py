"""The simulated driver's job table when a node's machine goes (issue 28): as under real Slurm, where the
local driver sets the node DOWN first, the jobs running on it are requeued (PENDING under the same id, on
no node) and run again once a node can take them; they never drop out of the table. Checked through the
engine paths that take machines away: a credit pause (`pause_cluster`, as billing does) and the resume,
a node replaced by a node action, and a scale-down past its grace."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from backend.domain.clock import ManualClock
from backend.provisioning.driver import NodeRun, Outage
from backend.provisioning.drivers.simulated.workload import jobs
from backend.provisioning.engine import pause_cluster, resume_cluster
from backend.provisioning.worker import EngineWorker
from tests.backend.engine.conftest import catch_up, create, drain, get

NOW = dt.datetime(2026, 11, 26, 12, 7, tzinfo=dt.UTC)
SINCE = NOW - dt.timedelta(hours=30)
PAUSE = "powered off (credits exhausted)"


def job_table(admin: TestClient, cluster_id: str) -> dict[int, dict[str, Any]]:
    response = admin.get(f"/v1/clusters/{cluster_id}/jobs", params={"limit": 1000})
    assert response.status_code == 200, response.text
    return {job["job_id"]: job for job in response.json()["items"]}


def running_on(admin: TestClient, cluster_id: str, clock: ManualClock, node: str | None = None
               ) -> dict[str, Any]:
    """Move the clock on minute by minute until a job runs (on `node`, if given); that job."""
    for _ in range(60):
        clock.advance(seconds=60)
        found = [j for j in job_table(admin, cluster_id).values()
                 if j["state"] == "running" and node in (None, j["nodes"])]
        if found:
            return min(found, key=lambda j: j["job_id"])
    raise AssertionError(f"no job ran on {node or 'the cluster'} within an hour")


def up(admin: TestClient, make_worker: Callable[..., EngineWorker], clock: ManualClock, count: int,
       **spec: Any) -> tuple[dict[str, Any], EngineWorker]:
    cluster = create(admin, node_count=count, **spec)
    worker = make_worker()
    drain(worker)
    assert get(admin, cluster["id"])["status"] == "RUNNING"
    catch_up(clock)
    return cluster, worker


def test_workload_a_powered_off_node_keeps_its_jobs_requeued_until_it_is_on_again() -> None:
    """The model itself, from a seed: the job running when the node is powered off waits (PENDING, the
    node's reason) under the same id while it is off, the jobs before stay as they were, nothing runs on
    the node meanwhile; once it is on again the job runs first, and every read replays the same."""
    on = [NodeRun("train-0", 0, 1, 8, SINCE, None, False)]
    off_at = next(NOW + dt.timedelta(minutes=m) for m in range(60)
                  if any(j.state == "RUNNING" for j in jobs(3, "train", on, NOW + dt.timedelta(minutes=m))))
    before = {j.job_id: j for j in jobs(3, "train", on, off_at)}
    (was_running,) = [j for j in before.values() if j.state == "RUNNING"]
    paused = [NodeRun("train-0", 0, 1, 8, None, None, False, first_up=SINCE,
                      outages=(Outage(off_at, None, PAUSE),))]
    later = off_at + dt.timedelta(hours=2)
    table = {j.job_id: j for j in jobs(3, "train", paused, later)}
    assert table == {j.job_id: j for j in jobs(3, "train", paused, later)}  # reproducible
    requeued = table[was_running.job_id]
    assert (requeued.state, requeued.nodes, requeued.started_at, requeued.reason) == (
        "PENDING", "", None, f"NodeDown: gpucloud repair: {PAUSE}")
    recent = {i for i, j in before.items() if j.submitted_at >= later - dt.timedelta(hours=23)}  # still shown
    assert recent <= set(table) and not [j for j in table.values() if j.state == "RUNNING"]
    ended = [i for i in set(before) & set(table) if before[i].ended_at is not None]
    assert ended and all(table[i] == before[i] for i in ended)  # the past is unchanged
    assert all(j.submitted_at <= off_at for j in table.values())  # nobody submits to a node that is off

    back_at = later + dt.timedelta(seconds=30)
    resumed = [NodeRun("train-0", 0, 1, 8, back_at, None, False, first_up=SINCE,
                       outages=(Outage(off_at, back_at, PAUSE),))]
    again = {j.job_id: j for j in jobs(3, "train", resumed, back_at)}[was_running.job_id]
    assert (again.state, again.nodes, again.started_at) == ("RUNNING", "train-0", back_at)


def test_simulated_pause_requeues_the_jobs_of_the_powered_off_nodes_and_they_run_after_the_resume(
    admin: TestClient, make_worker: Callable[..., EngineWorker], sessions: sessionmaker[Session],
    clock: ManualClock,
) -> None:
    cluster, worker = up(admin, make_worker, clock, 2)
    job = running_on(admin, cluster["id"], clock)
    before = job_table(admin, cluster["id"])

    with sessions.begin() as session:
        pause_cluster(session, cluster["id"], "credits exhausted", now=clock.now())
    drain(worker, catch_up_with_wall=False)
    assert [n["status"] for n in get(admin, cluster["id"])["nodes"]] == ["PAUSED", "PAUSED"]
    paused = job_table(admin, cluster["id"])
    assert set(before) <= set(paused)  # nothing drops out of the table, earlier jobs neither
    requeued = paused[job["job_id"]]
    assert (requeued["state"], requeued["nodes"], requeued["started_at"]) == ("pending", "", None)
    assert requeued["reason"] == "NodeDown: gpucloud repair: powered off (credits exhausted)"
    assert not [j for j in paused.values() if j["state"] == "running"]  # no machine runs anything

    clock.advance(seconds=3 * 3600)  # a long pause: the job waits (across slots), nothing new starts
    later = job_table(admin, cluster["id"])
    assert set(before) <= set(later)
    assert (later[job["job_id"]]["state"], later[job["job_id"]]["reason"]) == ("pending", requeued["reason"])
    assert not [j for j in later.values() if j["state"] == "running"]

    with sessions.begin() as session:
        resume_cluster(session, cluster["id"], "credits added", now=clock.now())
    drain(worker, catch_up_with_wall=False)
    assert [n["status"] for n in get(admin, cluster["id"])["nodes"]] == ["RUNNING", "RUNNING"]
    resumed_at = clock.now()
    clock.advance(seconds=1)
    again = job_table(admin, cluster["id"])[job["job_id"]]  # started as its node came back (it may be done)
    assert again["state"] in ("running", "completed") and again["nodes"] in ("train-0", "train-1"), again
    assert dt.datetime.fromisoformat(again["started_at"]) >= resumed_at - dt.timedelta(seconds=1)
    clock.advance(seconds=20 * 60)
    finished = job_table(admin, cluster["id"])
    assert (finished[job["job_id"]]["state"], finished[job["job_id"]]["started_at"]) == (
        "completed", again["started_at"])
    assert set(before) <= set(finished)


def test_simulated_replace_of_a_running_node_requeues_its_jobs_and_they_run_again(
    admin: TestClient, make_worker: Callable[..., EngineWorker], clock: ManualClock,
) -> None:
    cluster, worker = up(admin, make_worker, clock, 2)
    job = running_on(admin, cluster["id"], clock, "train-1")
    before = job_table(admin, cluster["id"])

    # A healthy, running node replaced by a node action (no FAILED status): its machine goes.
    replaced = admin.post(f"/v1/clusters/{cluster['id']}/nodes/train-1/actions", json={"action": "replace"})
    assert replaced.status_code == 202, replaced.text
    taken_out = clock.now()
    drain(worker, catch_up_with_wall=False)
    assert [n["status"] for n in get(admin, cluster["id"])["nodes"]] == ["RUNNING", "RUNNING"]
    after = job_table(admin, cluster["id"])
    assert set(before) <= set(after)  # the old machine's jobs stay in the table
    requeued = after[job["job_id"]]
    assert (requeued["state"], requeued["nodes"], requeued["reason"]) == ("pending", "", "BeginTime")
    assert not [j for j in after.values() if j["state"] == "running" and j["nodes"] == "train-1"
                and dt.datetime.fromisoformat(j["started_at"]) < taken_out]  # nothing left on the old one

    clock.advance(seconds=40 * 60)  # it ran again wherever it fitted (the new train-1 included), and ended
    done = job_table(admin, cluster["id"])[job["job_id"]]
    assert done["state"] == "completed" and done["nodes"] in ("train-0", "train-1"), done
    assert dt.datetime.fromisoformat(done["started_at"]) >= taken_out + dt.timedelta(minutes=2)  # the hold


def test_simulated_scale_down_past_its_grace_requeues_the_jobs_of_the_node_it_removes(
    admin: TestClient, make_worker: Callable[..., EngineWorker], clock: ManualClock,
) -> None:
    cluster, worker = up(admin, make_worker, clock, 2, scale_down_grace_minutes=0)
    for _ in range(120):  # both nodes busy: the scale-down has to take a node that runs a job
        clock.advance(seconds=60)
        table = job_table(admin, cluster["id"])
        busy = {j["nodes"]: j for j in table.values() if j["state"] == "running"}
        if set(busy) == {"train-0", "train-1"}:
            break
    else:
        raise AssertionError("the two nodes never ran jobs at the same time")
    job = busy["train-1"]  # the newer node goes

    scaled = admin.patch(f"/v1/clusters/{cluster['id']}", json={"node_count": 1})
    assert scaled.status_code == 200, scaled.text
    removed_at = clock.now()
    drain(worker, catch_up_with_wall=False)
    assert [n["name"] for n in get(admin, cluster["id"])["nodes"] if n["status"] == "RUNNING"] == ["train-0"]
    after = job_table(admin, cluster["id"])
    assert set(table) <= set(after)  # the removed node's jobs, earlier ones too, stay in the table
    requeued = after[job["job_id"]]
    assert (requeued["state"], requeued["nodes"], requeued["started_at"]) == ("pending", "", None)

    runs = []
    for _ in range(40):  # it runs again on the node that stays once that has room, then ends (at the
        # latest with the model's slot: a job runs to its 15-minute slot's end at most)
        clock.advance(seconds=60)
        runs.append(job_table(admin, cluster["id"])[job["job_id"]])
    waited = [j["state"] for j in runs if j["started_at"] is None]
    assert waited and set(waited) == {"pending"}, runs  # requeued, on no node, until the staying one has room
    assert {j["nodes"] for j in runs if j["started_at"] is not None} == {"train-0"}
    assert runs[-1]["state"] == "completed", runs[-1]
    assert all(dt.datetime.fromisoformat(j["started_at"]) >= removed_at for j in runs if j["started_at"])


def test_simulated_restart_requeues_the_jobs_of_the_node_and_they_run_again(
    admin: TestClient, make_worker: Callable[..., EngineWorker], clock: ManualClock,
) -> None:
    cluster, worker = up(admin, make_worker, clock, 2)
    job = running_on(admin, cluster["id"], clock, "train-1")
    before = job_table(admin, cluster["id"])

    restarted = admin.post(f"/v1/clusters/{cluster['id']}/nodes/train-1/actions", json={"action": "restart"})
    assert restarted.status_code == 202, restarted.text
    restarted_at = clock.now()
    drain(worker, catch_up_with_wall=False)
    assert [n["status"] for n in get(admin, cluster["id"])["nodes"]] == ["RUNNING", "RUNNING"]
    after = job_table(admin, cluster["id"])
    assert set(before) <= set(after)
    requeued = after[job["job_id"]]  # not left RUNNING across the reboot
    assert (requeued["state"], requeued["nodes"], requeued["reason"]) == ("pending", "", "BeginTime")

    clock.advance(seconds=40 * 60)  # it ran again once held long enough, and ended
    done = job_table(admin, cluster["id"])[job["job_id"]]
    assert done["state"] == "completed" and done["nodes"] in ("train-0", "train-1"), done
    assert dt.datetime.fromisoformat(done["started_at"]) >= restarted_at + dt.timedelta(minutes=2)
