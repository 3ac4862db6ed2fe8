"""The simulated datacenter's Slurm workload: the jobs behind the modelled GPU utilisation, reproducible
from the seed.

Each node runs one job per busy 15-minute slot of `telemetry.busy_gpus` (so a node's utilisation
follows its jobs): the current slot's job is RUNNING, past ones COMPLETED (5 % FAILED), the next busy
slot's job PENDING in the queue. A job on a node that failed while it ran is FAILED with the node; a
drained node gets no new job. Job ids count up with time like slurmctld's.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from backend.provisioning.driver import Job, NodeRun
from backend.provisioning.drivers.simulated.telemetry import SLOT, _uniform, busy_gpus

HISTORY = dt.timedelta(hours=24)
NAMES = ("train-llama-70b", "finetune-lora", "eval-mmlu", "nccl-allreduce-test", "data-prep", "sweep-lr")
USERS = ("alice", "bob", "carol", "dave", "erin")
TIME_LIMITS = (dt.timedelta(hours=1), dt.timedelta(hours=4), dt.timedelta(hours=12), dt.timedelta(days=1))
FAILED_SHARE = 0.05


def _slot(at: dt.datetime) -> int:
    return int(at.timestamp() // SLOT.total_seconds())


def _start(slot: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(slot * SLOT.total_seconds(), dt.UTC)


def jobs(seed: int, cluster: str, nodes: Sequence[NodeRun], now: dt.datetime) -> list[Job]:
    """The cluster's jobs of the last day and its queue, newest first."""
    found = []
    current = _slot(now)
    for node in nodes:
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


def _job(seed: int, cluster: str, node: NodeRun, slot: int, current: int, gpus: int, now: dt.datetime
         ) -> Job | None:
    def pick(options: tuple[object, ...], purpose: str) -> object:
        return options[int(_uniform(seed, cluster, node.name, node.attempt, slot, purpose) * len(options))]

    start = _start(slot) + dt.timedelta(seconds=int(_uniform(seed, cluster, node.name, slot, "lag") * 60))
    end = _start(slot + 1) - dt.timedelta(seconds=int(_uniform(seed, cluster, node.name, slot, "early") * 90))
    started: dt.datetime | None = start
    ended: dt.datetime | None = end
    state, reason = "COMPLETED", None
    if node.failed_at is not None and start >= node.failed_at:
        return None  # nothing starts on a failed node
    if slot > current or (slot == current and start > now):
        if node.drained or node.failed_at is not None:
            return None
        state, started, ended, reason = "PENDING", None, None, "Resources" if slot > current else "Priority"
    elif node.failed_at is not None and start <= node.failed_at <= end:
        state, ended, reason = "FAILED", node.failed_at, "NodeFail"
    elif end > now:
        state, ended = "RUNNING", None
    elif _uniform(seed, cluster, node.name, slot, "outcome") < FAILED_SHARE:
        state, reason = "FAILED", "NonZeroExitCode"
    return Job(
        job_id=1000 + slot % 10_000 * 4096 + node.index, name=str(pick(NAMES, "name")),
        user=str(pick(USERS, "user")), partition="gpu", nodes=node.name, gpus=gpus, state=state,
        submitted_at=start - dt.timedelta(minutes=int(_uniform(seed, cluster, node.name, slot, "wait") * 30)),
        started_at=started, ended_at=ended, time_limit=pick(TIME_LIMITS, "limit"),  # type: ignore[arg-type]
        priority=1 + int(_uniform(seed, cluster, node.name, slot, "priority") * 10_000), reason=reason,
    )
