"""The simulated datacenter's Slurm workload: the jobs behind the modelled GPU utilisation, reproducible
from the seed, in Slurm's own states.

Each node runs one job per busy 15-minute slot of `telemetry.busy_gpus` (so a node's utilisation
follows its jobs): the current slot's job is RUNNING, past ones COMPLETED (5 % FAILED, 3 % TIMEOUT at
their time limit, 3 % CANCELLED early), the next busy slot's job PENDING in the queue. In some slots the
nodes' jobs are the tasks of one array job (`sweep-lr`, Slurm's `1234_5`: task 5 of array 1234, one task
per node). A job on a node that failed while it ran is requeued, as Slurm does with a batch job when the
engine sets its node DOWN: PENDING (reason BeginTime, then Resources) under the same id until the node's
replacement is up, then RUNNING there for what was left of it (at most to the end of that slot; the GPU
model does not count this rerun). A drained or failed node gets no new job. Job ids count up with time
like slurmctld's.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import replace

from backend.provisioning.driver import Job, NodeRun
from backend.provisioning.drivers.simulated.telemetry import SLOT, _uniform, busy_gpus

HISTORY = dt.timedelta(hours=24)
REQUEUE_HOLD = dt.timedelta(minutes=2)  # slurmctld's wait before a requeued job may start again
NAMES = ("train-llama-70b", "finetune-lora", "eval-mmlu", "nccl-allreduce-test", "data-prep", "sweep-lr")
USERS = ("alice", "bob", "carol", "dave", "erin")
TIME_LIMITS = (dt.timedelta(hours=1), dt.timedelta(hours=4), dt.timedelta(hours=12), dt.timedelta(days=1))
FAILED_SHARE = 0.05
TIMEOUT_SHARE = 0.03
CANCELLED_SHARE = 0.03
ARRAY_SHARE = 0.15  # slots whose jobs are one array's tasks
ARRAY_NAME = "sweep-lr"


def _slot(at: dt.datetime) -> int:
    return int(at.timestamp() // SLOT.total_seconds())


def _start(slot: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(slot * SLOT.total_seconds(), dt.UTC)


def jobs(seed: int, cluster: str, nodes: Sequence[NodeRun], now: dt.datetime) -> list[Job]:
    """The cluster's jobs of the last day and its queue, newest first."""
    found = []
    current = _slot(now)
    for node in nodes:
        rerun = _rerun(seed, cluster, node, now)
        if rerun is not None:
            found.append(rerun)
        if node.up_since is None:
            continue
        first = max(_slot(node.up_since) + 1, _slot(now - HISTORY))
        for slot in range(first, current + 2):
            gpus = busy_gpus(seed, cluster, node.name, node.attempt, node.gpu_count, _start(slot))
            if not gpus:
                continue
            job = _job(seed, cluster, node, slot, current, gpus, now)
            if job is not None:
                found.append(job)
    return sorted(found, key=lambda j: j.job_id, reverse=True)


def _span(seed: int, cluster: str, node: NodeRun, slot: int) -> tuple[dt.datetime, dt.datetime]:
    """When the node's job of `slot` starts and ends (were it to run to its end)."""
    start = _start(slot) + dt.timedelta(seconds=int(_uniform(seed, cluster, node.name, slot, "lag") * 60))
    end = _start(slot + 1) - dt.timedelta(seconds=int(_uniform(seed, cluster, node.name, slot, "early") * 90))
    return start, end


def _rerun(seed: int, cluster: str, node: NodeRun, now: dt.datetime) -> Job | None:
    """The job requeued when the machine this node replaces failed: pending until this node is up, then
    running here for what was left of it."""
    failed = node.replaced_failure
    if failed is None or node.attempt <= 1:
        return None
    old = replace(node, attempt=node.attempt - 1, failed_at=failed, drained=False, replaced_failure=None)
    slot = _slot(failed)
    gpus = busy_gpus(seed, cluster, node.name, old.attempt, node.gpu_count, _start(slot))
    job = _job(seed, cluster, old, slot, _slot(now), gpus, now) if gpus else None
    if job is None or job.state != "PENDING":
        return None  # nothing ran on the old machine when it failed
    if node.up_since is None or node.up_since > now:
        return job
    _, end = _span(seed, cluster, node, slot)
    ends = min(node.up_since + (end - failed), _start(_slot(node.up_since) + 1))
    if ends > now:
        return replace(job, state="RUNNING", reason=None, started_at=node.up_since)
    return replace(job, state="COMPLETED", reason=None, started_at=node.up_since, ended_at=ends)


def _job(seed: int, cluster: str, node: NodeRun, slot: int, current: int, gpus: int, now: dt.datetime
         ) -> Job | None:
    array = _uniform(seed, cluster, slot, "array") < ARRAY_SHARE  # every node's job of the slot: one array

    def pick(options: tuple[object, ...], purpose: str) -> object:
        key = (slot, purpose) if array else (node.name, node.attempt, slot, purpose)
        return options[int(_uniform(seed, cluster, *key) * len(options))]

    start, end = _span(seed, cluster, node, slot)
    limit: dt.timedelta = pick(TIME_LIMITS, "limit")  # type: ignore[assignment]
    started: dt.datetime | None = start
    ended: dt.datetime | None = end
    state, reason = "COMPLETED", None
    outcome = _uniform(seed, cluster, node.name, slot, "outcome")
    if node.failed_at is not None and start >= node.failed_at:
        return None  # nothing starts on a failed node
    if slot > current or (slot == current and start > now):
        if node.drained or node.failed_at is not None:
            return None
        state, started, ended, reason = "PENDING", None, None, "Resources" if slot > current else "Priority"
    elif node.failed_at is not None and start <= node.failed_at <= end:  # requeued: waits for a node
        state, started, ended = "PENDING", None, None
        reason = "BeginTime" if now - node.failed_at < REQUEUE_HOLD else "Resources"
    elif end > now:
        state, ended = "RUNNING", None
    elif outcome < FAILED_SHARE:
        state, reason = "FAILED", "NonZeroExitCode"
    elif outcome < FAILED_SHARE + TIMEOUT_SHARE:  # killed at its limit: a job that asked for 14 minutes
        state, reason, limit = "TIMEOUT", "TimeLimit", dt.timedelta(minutes=14)
        ended = start + limit
    elif outcome < FAILED_SHARE + TIMEOUT_SHARE + CANCELLED_SHARE:  # scancel'ed by its user, half-way
        state, ended = "CANCELLED", start + (end - start) / 2
    base = 1000 + slot % 10_000 * 4096
    return Job(
        job_id=base + node.index, name=ARRAY_NAME if array else str(pick(NAMES, "name")),
        user=str(pick(USERS, "user")), partition="gpu", nodes=node.name, gpus=gpus, state=state,
        submitted_at=start - dt.timedelta(minutes=int(_uniform(seed, cluster, node.name, slot, "wait") * 30)),
        started_at=started, ended_at=ended, time_limit=limit,
        priority=1 + int(_uniform(seed, cluster, node.name, slot, "priority") * 10_000), reason=reason,
        array_job_id=base if array else None, array_task_id=node.index if array else None,
    )
