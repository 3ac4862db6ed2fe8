"""The simulated datacenter's Slurm view agrees with itself at every moment (issue 31): running jobs hold
exactly the GPUs the nodes report allocated and busy, pending jobs sit on no node and wait only for GPUs
that are not free, a requeued job keeps its history, and a drained or down node says why.

The model is stepped over hours of ticks through failures, repairs, drains and late joins; the API is
stepped on the engine's manual clock through a drain node action."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient

from backend.domain.clock import ManualClock
from backend.provisioning.driver import Job, NodeRun
from backend.provisioning.drivers.simulated.workload import Drains, Machine, machines, snapshot
from backend.provisioning.node_config.slurm_control import ACTION_REASON
from backend.provisioning.worker import EngineWorker
from tests.backend.engine.conftest import create, drain
from tests.backend.engine.test_engine_repair import _bring_up_then_fault, _seed_failing_once

START = dt.datetime(2026, 11, 26, 3, 50, tzinfo=dt.UTC)  # crosses the schedule's 6-hour replay anchor
TICK = dt.timedelta(seconds=37)  # never aligned with the slots, so ticks land everywhere in them
HELD_REASONS = {"BeginTime", "Dependency", "JobHeldUser", "JobHeldAdmin"}


@dataclass(frozen=True)
class Scenario:
    name: str
    nodes: Callable[[dt.datetime], list[NodeRun]]  # the member nodes as the engine sees them at a moment
    drains: Drains


def _up(i: int, since: dt.timedelta = dt.timedelta(hours=30), gpus: int = 8) -> NodeRun:
    return NodeRun(f"train-{i}", i, 1, gpus, START - since, None, False)


def _steady(at: dt.datetime) -> list[NodeRun]:
    del at
    return [_up(i) for i in range(4)]


def _mixed_sizes(at: dt.datetime) -> list[NodeRun]:
    del at
    return [_up(0, gpus=8), _up(1, gpus=4), _up(2, gpus=8)]


FAIL_AT = START + dt.timedelta(minutes=57, seconds=13)  # train-0 and train-1 run jobs then
REPAIRED_AT = FAIL_AT + dt.timedelta(minutes=26)


def _fail_and_repair(at: dt.datetime) -> list[NodeRun]:
    """train-1 fails mid-job; its replacement (same name, next attempt) is up 26 minutes later."""
    others = [_up(0), _up(2)]
    if at < FAIL_AT:
        return [*others, _up(1)]
    if at < REPAIRED_AT:
        return [*others, NodeRun("train-1", 1, 2, 8, None, None, False, replaced_failure=FAIL_AT)]
    return [*others, NodeRun("train-1", 1, 2, 8, REPAIRED_AT, None, False, replaced_failure=FAIL_AT)]


def _single_fails(at: dt.datetime) -> list[NodeRun]:
    """A one-node cluster whose node fails and stays failed: its requeued job waits with nowhere to go."""
    failed = at >= FAIL_AT
    return [NodeRun("train-0", 0, 1, 8, START - dt.timedelta(hours=2), FAIL_AT if failed else None, failed)]


JOIN_AT = START + dt.timedelta(minutes=22, seconds=5)


def _late_join(at: dt.datetime) -> list[NodeRun]:
    """A scale-up: train-2 comes up while the others are busy."""
    return [_up(0), _up(1), *([_up(2, since=START - JOIN_AT)] if at >= JOIN_AT else [])]


DRAINED = (START + dt.timedelta(minutes=31, seconds=40), START + dt.timedelta(minutes=95))
SCENARIOS = [
    Scenario("steady", _steady, {}),
    Scenario("mixed node sizes", _mixed_sizes, {}),
    Scenario("failure and repair", _fail_and_repair, {}),
    Scenario("lone node fails", _single_fails, {}),
    Scenario("late join", _late_join, {}),
    Scenario("drained for an hour", _steady, {"train-2": [DRAINED]}),
    Scenario("drained until now", _steady, {"train-3": [(DRAINED[0], None)]}),
]


def _drains_known(drains: Drains, at: dt.datetime) -> dict[str, list[tuple[dt.datetime, dt.datetime | None]]]:
    """The drains as known at `at`: a span not begun yet is unknown, one not ended yet is open."""
    return {name: [(start, end if end is not None and end <= at else None) for start, end in spans
                   if start <= at] for name, spans in drains.items()}


def _free(fleet: Sequence[Machine], allocated: dict[str, int], at: dt.datetime) -> dict[str, int]:
    """GPUs a new job could get on each node in service at `at`."""
    return {m.name: m.gpu_count - allocated[m.name] for m in fleet if m.usable(at)}


def _check(at: dt.datetime, nodes: list[NodeRun], drains: Drains, jobs: list[Job],
           allocated: dict[str, int]) -> None:
    fleet = machines(nodes, drains)
    running = [j for j in jobs if j.state == "RUNNING"]
    held = {name: 0 for name in allocated}
    for job in running:
        held[job.nodes] += job.gpus
    assert held == allocated, (at, running, allocated)  # running jobs hold exactly what nodes report
    current = {m.name: m for m in fleet if m.up_since <= at}  # the latest machine of each name
    for name, gpus in allocated.items():
        assert gpus <= current[name].gpu_count
        if gpus:
            assert not current[name].failed(at), (at, name)  # a down node's jobs were requeued
    for job in running:
        machine = current[job.nodes]
        assert job.started_at is not None and job.started_at >= machine.up_since
        for start, end in machine.drains:  # no job starts on a drained node
            assert not (start <= job.started_at and (end is None or job.started_at < end)), (at, job)
    free = _free(fleet, allocated, at)
    for job in jobs:
        if job.state != "PENDING":
            continue
        assert job.nodes == "" and job.started_at is None and job.reason, (at, job)
        if job.reason not in HELD_REASONS:  # waits for GPUs: none of the nodes in service has them free
            assert job.reason == "Resources" and all(job.gpus > f for f in free.values()), (at, job, free)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_simulated_slurm_view_is_consistent_at_every_tick(scenario: Scenario) -> None:
    seen: dict[int, Job] = {}
    states: set[str] = set()
    waited = 0
    at = START
    while at < START + dt.timedelta(hours=3):
        nodes, drains = scenario.nodes(at), _drains_known(scenario.drains, at)
        now = snapshot(7, "train", nodes, at, drains)
        _check(at, nodes, drains, now.jobs, now.allocated)
        assert snapshot(7, "train", nodes, at, drains, history=False).allocated == now.allocated  # readings
        for job in now.jobs:
            before = seen.get(job.job_id)
            if before is not None and before.state == "RUNNING" and job.state == "RUNNING":
                assert (job.nodes, job.started_at) == (before.nodes, before.started_at)  # history holds
            if before is not None and before.state == "PENDING" and job.state == "RUNNING":
                waited += 1
            seen[job.job_id] = job
            states.add(job.state)
        at += TICK
    assert {"RUNNING", "COMPLETED"} <= states
    if scenario.name != "lone node fails":
        assert waited, "no pending job ever started: the queue was not exercised"


def test_a_requeued_job_waits_for_resources_and_starts_when_the_repair_is_up() -> None:
    """The lone node fails: its running job is requeued (BeginTime, then Resources: no node has GPUs) and
    keeps waiting across slots; its replacement runs it as soon as it is up."""
    just_before = FAIL_AT - dt.timedelta(seconds=1)
    before = snapshot(7, "train", _single_fails(just_before), just_before)
    (victim,) = [j for j in before.jobs if j.state == "RUNNING"]
    later = FAIL_AT + dt.timedelta(minutes=40)
    waiting = {j.job_id: j for j in snapshot(7, "train", _single_fails(later), later).jobs}
    assert (waiting[victim.job_id].state, waiting[victim.job_id].reason) == ("PENDING", "Resources")
    up_at = later + dt.timedelta(minutes=1)
    back = [NodeRun("train-0", 0, 2, 8, up_at, None, False, replaced_failure=FAIL_AT)]
    rerun = {j.job_id: j for j in snapshot(7, "train", back, up_at + dt.timedelta(seconds=1)).jobs}
    assert (rerun[victim.job_id].state, rerun[victim.job_id].nodes, rerun[victim.job_id].started_at) == (
        "RUNNING", "train-0", up_at)


# Through the API: what the console's overview and `gpucloud nodes` / `gpucloud jobs` read ---------------

def _views(admin: TestClient, cluster_id: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    nodes = admin.get(f"/v1/clusters/{cluster_id}/nodes")
    jobs = admin.get(f"/v1/clusters/{cluster_id}/jobs", params={"limit": 1000})
    assert nodes.status_code == 200 and jobs.status_code == 200, (nodes.text, jobs.text)
    return nodes.json()["items"], jobs.json()


def _check_api(nodes: list[dict[str, Any]], table: dict[str, Any]) -> None:
    running = [j for j in table["items"] if j["state"] == "running"]
    assert table["counts"]["running"] == len(running)
    held = {n["name"]: 0 for n in nodes}
    for job in running:
        held[job["nodes"]] += job["gpus"]
    free = {}
    for node in nodes:
        busy = sum(1 for g in node["gpus"] or [] if g["utilization_pct"])
        assert busy == held[node["name"]], (node["name"], busy, running)  # utilisation only from jobs
        state = node["orchestrator_state"]
        if state in ("DRAIN", "DOWN"):
            assert node["health_reason"], node  # the WHY column is never empty for a node out of service
        elif node["status"] == "RUNNING":
            expected = "IDLE" if not busy else "ALLOCATED" if busy == len(node["gpus"]) else "MIXED"
            assert state == expected, node
            free[node["name"]] = len(node["gpus"]) - busy
    (partition,) = table["partitions"]
    assert partition["gpus_available"] == sum(free.values())
    for job in table["items"]:
        if job["state"] == "pending":
            assert job["nodes"] == "" and job["started_at"] is None
            if job["reason"] not in HELD_REASONS:
                assert all(job["gpus"] > f for f in free.values()), (job, free)


def test_api_nodes_and_jobs_agree_tick_by_tick_through_a_drain_node_action(
    admin: TestClient, make_worker: Callable[..., EngineWorker], clock: ManualClock
) -> None:
    cluster = create(admin, node_count=3)
    worker = make_worker()
    drain(worker)
    for _ in range(40):
        clock.advance(dt.timedelta(seconds=53))
        _check_api(*_views(admin, cluster["id"]))

    acted = admin.post(f"/v1/clusters/{cluster['id']}/nodes/train-1/actions", json={"action": "drain"})
    assert acted.status_code == 202, acted.text
    node = acted.json()["node"]
    assert (node["orchestrator_state"], node["health"], node["health_reason"]) == (
        "DRAIN", "healthy", ACTION_REASON)
    drain(worker, catch_up_with_wall=False)  # the pass carries the drain to the modelled slurmctld
    drained_at = clock.now()
    for _ in range(40):
        clock.advance(dt.timedelta(seconds=53))
        nodes, table = _views(admin, cluster["id"])
        _check_api(nodes, table)
        (train_1,) = [n for n in nodes if n["name"] == "train-1"]
        assert (train_1["orchestrator_state"], train_1["health_reason"]) == ("DRAIN", ACTION_REASON)
        for job in table["items"]:
            if job["nodes"] == "train-1" and job["started_at"] is not None:
                assert dt.datetime.fromisoformat(job["started_at"]) < drained_at, job  # no new work
    (train_1,) = [n for n in _views(admin, cluster["id"])[0] if n["name"] == "train-1"]
    assert not any(g["utilization_pct"] for g in train_1["gpus"])  # its jobs have finished: idle


def test_api_a_failed_node_is_down_with_its_reason_and_holds_no_job(
    admin: TestClient, make_worker: Callable[..., EngineWorker], clock: ManualClock
) -> None:
    """node_repair manual: the failed node stays DOWN, says why, and its jobs were requeued elsewhere."""
    seed = _seed_failing_once("train-2")
    before, worker = _bring_up_then_fault(admin, make_worker, seed, node_repair="manual")
    drain(worker)
    for _ in range(30):
        nodes, table = _views(admin, before["id"])
        _check_api(nodes, table)
        (train_2,) = [n for n in nodes if n["name"] == "train-2"]
        assert (train_2["status"], train_2["orchestrator_state"]) == ("FAILED", "DOWN")
        assert "XID" in (train_2["health_reason"] or "")
        assert not any(j["nodes"] == "train-2" and j["state"] == "running" for j in table["items"])
        clock.advance(dt.timedelta(seconds=61))
