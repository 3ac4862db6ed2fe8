"""The simulated datacenter's Slurm workload: jobs placed by a small scheduler, reproducible from the
seed, in Slurm's own states, and the one source of what each node has allocated (the GPU readings of
`telemetry` follow it, so utilisation, node states and the job table always agree).

Time is cut in 15-minute slots and every job ends by its slot's end, so each slot is scheduled on its
own (only jobs requeued by a failure carry over). In a slot:
- each node that is up, undrained and not failed gets its own job with probability 0.75 (all its GPUs
  70 % of the time, else a few: `telemetry.busy_gpus`), submitted in the slot's first minute (or the
  minute after the node came up, unless that is in the slot's last five minutes) and run
  for 8 minutes to the slot's end (5 % FAILED, 3 % TIMEOUT at their time limit, 3 % CANCELLED
  half-way); in some slots these are the tasks of one array job (`sweep-lr`, Slurm's `1234_5`);
- a third of the nodes add a short job submitted a few minutes in, asking for a whole node or a few
  GPUs, which waits (PENDING, no nodes, reason Resources) while it fits nowhere; a job still waiting
  when the slot ends is cancelled by its user.
The scheduler starts any waiting job that fits on one usable node (up, not failed, not drained), the
job's own node first, as Slurm's backfill would; so a job is pending only while its GPUs are not free.
An array's tasks that have not started are one pending record, as slurmctld keeps them (`1234_[3-5]`).
A node whose machine fails, is taken out (a repair, a scale-down) or is powered off or restarted (an
outage: Slurm has it DOWN) ends its jobs: they are requeued under the same id (PENDING, reason BeginTime
for slurmctld's two minutes, then Resources; while a powered-off node is off, `NodeDown: <its Slurm
reason>`) and run again wherever they fit, a node's replacement or the node back on included, for what
was left of them. A machine that is off takes no job and submits none; it is still the node's, so its
earlier jobs stay. A drained node takes no new job; its running ones finish. Job ids count up with time
like slurmctld's.
"""

from __future__ import annotations

import datetime as dt
import functools
import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from backend.node_agent.topology import slurm_range
from backend.provisioning.driver import Job, NodeRun, Outage
from backend.provisioning.drivers.simulated.telemetry import SLOT, _uniform, busy_gpus
from backend.provisioning.node_config.slurm_control import REPAIR_REASON

HISTORY = dt.timedelta(hours=24)
REQUEUE_HOLD = dt.timedelta(minutes=2)  # slurmctld's wait before a requeued job may start again
NAMES = ("train-llama-70b", "finetune-lora", "eval-mmlu", "nccl-allreduce-test", "data-prep", "sweep-lr")
USERS = ("alice", "bob", "carol", "dave", "erin")
TIME_LIMITS = (dt.timedelta(hours=1), dt.timedelta(hours=4), dt.timedelta(hours=12), dt.timedelta(days=1))
FAILED_SHARE = 0.05
TIMEOUT_SHARE = 0.03
CANCELLED_SHARE = 0.03
ARRAY_SHARE = 0.15  # slots whose nodes' own jobs are one array's tasks
ARRAY_NAME = "sweep-lr"
OWN_RUN_MINUTES = (8.0, 14.5)  # how long a node's own job runs (at most to its slot's end)
LATE_START = dt.timedelta(minutes=5)  # a node up this close to a slot's end waits for the next slot
EXTRA_SHARE = 0.35  # nodes that add a short job a few minutes into the slot
ANCHOR_SLOTS = 24  # the schedule is replayed from a 6-hour boundary, so every read sees the same past
IDS_PER_SLOT = 4096  # job ids of a slot's submissions, in the order they were submitted

Drains = Mapping[str, Sequence[tuple[dt.datetime, dt.datetime | None]]]


@dataclass(frozen=True)
class Machine:
    """One machine behind a node name, as the scheduler sees it: when it can take new jobs."""

    name: str
    index: int
    attempt: int
    gpu_count: int
    up_since: dt.datetime
    failed_at: dt.datetime | None
    drains: tuple[tuple[dt.datetime, dt.datetime | None], ...] = ()  # [from, until) spans; None: still
    outages: tuple[Outage, ...] = ()  # [start, end) spans powered off (DOWN in Slurm); end None: still

    def failed(self, at: dt.datetime) -> bool:
        return self.failed_at is not None and at >= self.failed_at

    def off(self, at: dt.datetime) -> Outage | None:
        """The outage the machine is in at `at` (None: not off)."""
        return next((o for o in self.outages if o.start <= at and (o.end is None or at < o.end)), None)

    def back_at(self, at: dt.datetime) -> dt.datetime:
        """`at`, or when the machine is on again if it is off at `at` and that is known."""
        outage = self.off(at)
        return outage.end if outage is not None and outage.end is not None else at

    def usable(self, at: dt.datetime) -> bool:
        """Slurm may start a job here at `at`: up, not failed, not powered off, not drained."""
        if at < self.up_since or self.failed(at) or self.off(at) is not None:
            return False
        return not any(start <= at and (end is None or at < end) for start, end in self.drains)


@dataclass(frozen=True)
class Task:
    """A job as submitted: what it asks for and how it would end."""

    job_id: int
    name: str
    user: str
    gpus: int
    submitted_at: dt.datetime
    eligible_at: dt.datetime  # submitted_at, or a requeued job's end of hold
    run_for: dt.timedelta  # what is left of its run
    outcome: str  # COMPLETED, FAILED, TIMEOUT, CANCELLED (when it runs to its end)
    time_limit: dt.timedelta
    priority: int
    home: str | None  # the node it was meant for (its node's own job), else None
    array_job_id: int | None = None
    array_task_id: int | None = None
    requeued: bool = False
    # Requeued because its node was powered off: the node's Slurm reason, shown while the job waits and
    # the node is still off (`down_until`: when it came back; None: still off).
    down_reason: str | None = None
    down_until: dt.datetime | None = None


@dataclass(frozen=True)
class Run:
    machine: str
    attempt: int
    start: dt.datetime
    end: dt.datetime
    ended_by: str  # "end" (ran its course), "node_fail" (requeued) or "slot_end" (cut at the slot's end)


@dataclass(frozen=True)
class Record:
    """A task and what the scheduler did with it in one slot; `cancelled_at`: dropped unstarted."""

    task: Task
    runs: tuple[Run, ...] = ()
    cancelled_at: dt.datetime | None = None


@dataclass
class _Placed:
    task: Task
    machine: int  # its position in the fleet
    start: dt.datetime
    end: dt.datetime


@dataclass
class _Slot:
    """One slot's scheduler: the queue, what runs where, and the runs done (heaps keep a slot of a large
    cluster near-linear)."""

    machines: tuple[Machine, ...]
    end: dt.datetime
    arrivals: list[tuple[dt.datetime, int, Task]] = field(default_factory=list)  # heap: not yet eligible
    waiting: list[Task] = field(default_factory=list)
    running: dict[int, _Placed] = field(default_factory=dict)  # by job id
    ends: list[tuple[dt.datetime, int]] = field(default_factory=list)  # heap of (end, job id)
    used: list[int] = field(default_factory=list)  # GPUs held, per machine
    moments: list[dt.datetime] = field(default_factory=list)  # heap: machines (back) up, leaving a drain
    failures: list[tuple[dt.datetime, int]] = field(default_factory=list)  # heap of (down at, machine)
    runs: dict[int, list[Run]] = field(default_factory=dict)
    requeued: dict[int, Task] = field(default_factory=dict)  # jobs a node going DOWN gave back, as requeued
    homes: dict[str, list[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.used = [0] * len(self.machines)
        for position, machine in enumerate(self.machines):
            self.homes.setdefault(machine.name, []).append(position)

    def submit(self, task: Task, begin: dt.datetime) -> None:
        """`task` joins the queue once eligible (a job carried from an earlier slot: at `begin`)."""
        heapq.heappush(self.arrivals, (max(task.eligible_at, begin), task.job_id, task))

    def add_moment(self, at: dt.datetime) -> None:
        heapq.heappush(self.moments, at)

    def next_moment(self) -> dt.datetime | None:
        heads = [heap[0][0] for heap in (self.arrivals, self.ends, self.failures) if heap]
        at = min([*heads, *self.moments[:1]], default=None)
        return None if at is None or at >= self.end else at

    def step(self, at: dt.datetime) -> None:
        """Everything at `at`: jobs end, a failed node's jobs are requeued, waiting jobs start."""
        while self.moments and self.moments[0] <= at:
            heapq.heappop(self.moments)
        while self.ends and self.ends[0][0] <= at:
            _, job_id = heapq.heappop(self.ends)
            placed = self.running.get(job_id)
            if placed is not None and placed.end <= at:
                self._finish(placed, placed.end)
        while self.failures and self.failures[0][0] <= at:
            _, position = heapq.heappop(self.failures)
            outage = self.machines[position].off(at)
            for placed in [p for p in self.running.values() if p.machine == position]:
                self._requeue(placed, at, outage)
        while self.arrivals and self.arrivals[0][0] <= at:
            self.waiting.append(heapq.heappop(self.arrivals)[2])
        if self.waiting:
            self.waiting.sort(key=lambda t: (not t.requeued, -t.priority, t.job_id))
            self.waiting = [task for task in self.waiting if not self._place(task, at)]

    def close(self) -> None:
        for placed in list(self.running.values()):
            self._finish(placed, placed.end)

    def _fits(self, position: int, task: Task, at: dt.datetime) -> bool:
        machine = self.machines[position]
        return machine.usable(at) and machine.gpu_count - self.used[position] >= task.gpus

    def _place(self, task: Task, at: dt.datetime) -> bool:
        """Start `task` at `at` on its own node if it fits there, else on the first usable node it fits."""
        home = [p for p in self.homes.get(task.home or "", []) if self._fits(p, task, at)]
        position = home[0] if home else next(
            (p for p in range(len(self.machines)) if self._fits(p, task, at)), None)
        if position is None:
            return False
        placed = _Placed(task, position, at, min(at + task.run_for, self.end))
        self.running[task.job_id] = placed
        self.used[position] += task.gpus
        heapq.heappush(self.ends, (placed.end, task.job_id))
        return True

    def _requeue(self, placed: _Placed, at: dt.datetime, outage: Outage | None) -> None:
        """Its node went DOWN (failed, taken out, or powered off: `outage`): Slurm requeues the batch job,
        held for REQUEUE_HOLD, with what was left."""
        self._finish(placed, at, node_failed=True)
        left = max(placed.start + placed.task.run_for - at, dt.timedelta(seconds=1))
        task = replace(placed.task, eligible_at=at + REQUEUE_HOLD, run_for=left, requeued=True, home=None,
                       down_reason=None if outage is None else f"{REPAIR_REASON}: {outage.reason}",
                       down_until=None if outage is None else outage.end)
        self.requeued[task.job_id] = task
        self.submit(task, at)

    def _finish(self, placed: _Placed, at: dt.datetime, *, node_failed: bool = False) -> None:
        del self.running[placed.task.job_id]
        self.used[placed.machine] -= placed.task.gpus
        ended_by = "node_fail" if node_failed else (
            "end" if at >= placed.start + placed.task.run_for else "slot_end")
        machine = self.machines[placed.machine]
        run = Run(machine.name, machine.attempt, placed.start, at, ended_by)
        self.runs.setdefault(placed.task.job_id, []).append(run)


def _slot(at: dt.datetime) -> int:
    return int(at.timestamp() // SLOT.total_seconds())


def _start(slot: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(slot * SLOT.total_seconds(), dt.UTC)


def machines(nodes: Sequence[NodeRun], drains: Drains | None = None) -> tuple[Machine, ...]:
    """The machines behind the member nodes that have been up: each node's current one (a powered-off
    one too: it is still the node's), and the machine a repaired node replaces, until it failed or was
    taken out (from when it first ran, where known, else from the slot before: it ran that slot's jobs)."""
    found = []
    for node in nodes:
        if node.replaced_failure is not None and node.attempt > 1:
            failed = node.replaced_failure
            found.append(Machine(node.name, node.index, node.attempt - 1, node.gpu_count,
                                 min(node.replaced_since or _start(_slot(failed) - 1), failed), failed))
        since = node.first_up or node.up_since  # a powered-off node is still its machine
        if since is not None:
            spans = tuple((drains or {}).get(node.name, ()))
            found.append(Machine(node.name, node.index, node.attempt, node.gpu_count, since,
                                 node.failed_at, spans, node.outages))
    return tuple(sorted(found, key=lambda m: (m.index, m.attempt, m.up_since)))


def _pick(seed: int, cluster: str, key: tuple[object, ...], options: tuple[object, ...]) -> object:
    return options[int(_uniform(seed, cluster, *key) * len(options))]


def _own_task(seed: int, cluster: str, machine: Machine, slot: int, begin: dt.datetime, gpus: int) -> Task:
    """The node's own job of the slot: submitted within a minute of `begin` (the slot's start, or when
    the node came up), run for 8 minutes to the slot's end."""
    array = _uniform(seed, cluster, slot, "array") < ARRAY_SHARE
    key: tuple[object, ...] = (slot,) if array else (machine.name, machine.attempt, slot)
    start = begin + dt.timedelta(seconds=int(_uniform(seed, cluster, machine.name, slot, "lag") * 60))
    run = OWN_RUN_MINUTES[0] + (OWN_RUN_MINUTES[1] - OWN_RUN_MINUTES[0]) * _uniform(
        seed, cluster, machine.name, slot, "run")
    end = min(start + dt.timedelta(seconds=int(run * 60)), _start(slot + 1) - dt.timedelta(seconds=1))
    limit: dt.timedelta = _pick(seed, cluster, (*key, "limit"), TIME_LIMITS)  # type: ignore[assignment]
    outcome, run_for = "COMPLETED", end - start
    draw = _uniform(seed, cluster, machine.name, slot, "outcome")
    if draw < FAILED_SHARE:
        outcome = "FAILED"
    elif draw < FAILED_SHARE + TIMEOUT_SHARE:  # killed at its limit: a job that asked for 13 minutes
        outcome, limit = "TIMEOUT", dt.timedelta(minutes=13)
        run_for = limit
    elif draw < FAILED_SHARE + TIMEOUT_SHARE + CANCELLED_SHARE:  # scancel'ed by its user, half-way
        outcome, run_for = "CANCELLED", run_for / 2
    name = ARRAY_NAME if array else str(_pick(seed, cluster, (*key, "name"), NAMES))
    return Task(
        job_id=0, name=name, user=str(_pick(seed, cluster, (*key, "user"), USERS)),
        gpus=gpus, submitted_at=start, eligible_at=start, run_for=run_for, outcome=outcome, time_limit=limit,
        priority=1 + int(_uniform(seed, cluster, machine.name, slot, "priority") * 10_000), home=machine.name,
        array_job_id=0 if array else None, array_task_id=machine.index if array else None)


def _extra_task(seed: int, cluster: str, machine: Machine, slot: int) -> Task | None:
    """A short job a node's user adds a few minutes into the slot (it may have to wait), or None."""
    if _uniform(seed, cluster, machine.name, machine.attempt, slot, "extra") >= EXTRA_SHARE:
        return None
    whole = _uniform(seed, cluster, machine.name, slot, "extra-whole") < 0.5
    gpus = machine.gpu_count if whole else 1 + int(
        _uniform(seed, cluster, machine.name, slot, "extra-size") * max(1, machine.gpu_count - 1))
    submitted = _start(slot) + dt.timedelta(
        seconds=120 + int(_uniform(seed, cluster, machine.name, slot, "extra-at") * 480))
    run_for = dt.timedelta(seconds=60 + int(_uniform(seed, cluster, machine.name, slot, "extra-run") * 240))
    failed = _uniform(seed, cluster, machine.name, slot, "extra-outcome") < FAILED_SHARE
    return Task(
        job_id=0,
        name=str(_pick(seed, cluster, (machine.name, slot, "extra-name"), NAMES[:-1])),
        user=str(_pick(seed, cluster, (machine.name, slot, "extra-user"), USERS)), gpus=gpus,
        submitted_at=submitted, eligible_at=submitted, run_for=run_for,
        outcome="FAILED" if failed else "COMPLETED", time_limit=TIME_LIMITS[0],
        priority=1 + int(_uniform(seed, cluster, machine.name, slot, "extra-priority") * 10_000), home=None)


def _arrivals(seed: int, cluster: str, fleet: tuple[Machine, ...], slot: int) -> list[Task]:
    """The jobs submitted in the slot: each node's own (from when it is up: a new node's users start at
    once) and the short extra ones."""
    tasks = []
    for machine in fleet:
        begin = machine.back_at(max(_start(slot), machine.up_since))
        if begin >= _start(slot + 1) - LATE_START or not machine.usable(begin):
            continue
        gpus = busy_gpus(seed, cluster, machine.name, machine.attempt, machine.gpu_count, _start(slot))
        if gpus:
            own = _own_task(seed, cluster, machine, slot, begin, gpus)
            if machine.usable(own.submitted_at):
                tasks.append(own)
        extra = _extra_task(seed, cluster, machine, slot)
        if extra is not None and extra.submitted_at >= begin and machine.off(extra.submitted_at) is None:
            tasks.append(extra)
    return _numbered(tasks, slot)


def _numbered(tasks: list[Task], slot: int) -> list[Task]:
    """Job ids in submission order, counting up with time like slurmctld's (a job seen once keeps its
    id: whatever is learnt later, a node joining or draining, only changes later submissions); an
    array's id is its first task's."""
    base = 1000 + slot % 10_000 * IDS_PER_SLOT
    ordered = sorted(tasks, key=lambda t: (t.submitted_at, t.home is None, t.priority, t.name, t.gpus))
    numbered = [replace(task, job_id=base + rank) for rank, task in enumerate(ordered)]
    array = next((t.job_id for t in numbered if t.array_job_id is not None), None)
    return [replace(t, array_job_id=array) if t.array_job_id is not None else t for t in numbered]


def _downs(machine: Machine, begin: dt.datetime, end: dt.datetime) -> list[dt.datetime]:
    """When in [begin, end) the machine's running jobs are requeued: its failure, each power-off (one
    before `begin` counts at `begin`)."""
    starts = [machine.failed_at, *(o.start for o in machine.outages if o.end is None or o.end > begin)]
    return [max(at, begin) for at in starts if at is not None and at < end]


@functools.lru_cache(maxsize=16384)
def schedule_slot(seed: int, cluster: str, fleet: tuple[Machine, ...], slot: int, carried: tuple[Task, ...]
                  ) -> tuple[tuple[Record, ...], tuple[Task, ...]]:
    """The slot's jobs as the scheduler ran them (only what is known at the time of asking is passed in,
    so later events are all in the modelled future), and the requeued jobs still waiting at its end."""
    begin = _start(slot)
    state = _Slot(fleet, _start(slot + 1))
    tasks = [*carried, *_arrivals(seed, cluster, fleet, slot)]
    for task in tasks:
        state.submit(task, begin)
    for position, machine in enumerate(fleet):  # machines coming up, failing, off and on, leaving a drain
        for moment in (machine.up_since, *(e for _, e in machine.drains), *(o.end for o in machine.outages)):
            if moment is not None and moment < state.end:
                state.add_moment(max(moment, begin))
        for down in _downs(machine, begin, state.end):
            heapq.heappush(state.failures, (down, position))
    while (at := state.next_moment()) is not None:
        state.step(at)
    state.close()
    waiting = [*state.waiting, *(entry[2] for entry in state.arrivals)]
    carry = tuple(sorted((task for task in waiting if task.requeued), key=lambda t: t.job_id))
    still_waiting = {t.job_id for t in waiting}
    gave_up = state.end - dt.timedelta(seconds=1)  # still waiting at the slot's end: its user cancels it
    records = []
    for job_id, task in ({t.job_id: t for t in tasks} | state.requeued).items():
        cancelled = job_id in still_waiting and not task.requeued
        if job_id in state.runs or cancelled:
            records.append(Record(task, tuple(state.runs.get(job_id, ())), gave_up if cancelled else None))
    return tuple(records), carry


@dataclass(frozen=True)
class Snapshot:
    """The scheduler's view at one moment: the job table and the GPUs each node has allocated."""

    jobs: list[Job]
    allocated: dict[str, int]


def snapshot(seed: int, cluster: str, nodes: Sequence[NodeRun], now: dt.datetime,
             drains: Drains | None = None, *, history: bool = True) -> Snapshot:
    """Replay the schedule up to `now` and read it at `now` (`drains`: each node's drained spans).
    Without `history` only the slots that can still matter are replayed (the allocation is the same;
    the job table then holds only their jobs)."""
    fleet = machines(nodes, drains)
    current = _slot(now)
    shown_from = _slot(now - HISTORY)
    first = shown_from - shown_from % ANCHOR_SLOTS
    if fleet:
        first = max(first, min(_slot(m.up_since) for m in fleet))
    if not history:  # only requeued jobs outlive their slot, and only a failure or a power-off requeues
        downs = [m.failed_at for m in fleet if m.failed_at is not None]
        downs += [o.start for m in fleet for o in m.outages]
        first = max(first, min([current, *(_slot(at) for at in downs)]))
    latest: dict[int, Record] = {}
    carried: tuple[Task, ...] = ()
    for slot in range(first, current + 1):
        records, carried = schedule_slot(seed, cluster, fleet, slot, carried)
        for record in records:
            if slot >= shown_from or record.task.job_id in latest:
                latest[record.task.job_id] = record
    for task in carried:  # requeued and waiting beyond the slot
        latest[task.job_id] = Record(task)
    jobs, allocated = [], {m.name: 0 for m in fleet}
    unstarted = set()
    for record in latest.values():
        job = _job_at(record, now)
        if job is None:
            continue
        jobs.append(job)
        if job.state == "RUNNING":
            allocated[job.nodes] += job.gpus
        if job.state == "PENDING" and not record.task.requeued and all(r.start > now for r in record.runs):
            unstarted.add(job.job_id)
    return Snapshot(sorted(array_rests(jobs, unstarted), key=lambda j: j.job_id, reverse=True), allocated)


def array_rests(jobs: Sequence[Job], unstarted: set[int]) -> list[Job]:
    """As slurmctld keeps them: the tasks of an array that have not started (job ids in `unstarted`), two
    or more, are one pending record, squeue's `1234_[3-5]` (`array_tasks`, no task id of its own). Its id
    is the lowest of theirs: Slurm's is the array's own, which the modelled array gives its first task."""
    waiting: dict[int, list[Job]] = {}
    for job in jobs:
        if job.job_id in unstarted and job.array_job_id is not None and job.array_task_id is not None:
            waiting.setdefault(job.array_job_id, []).append(job)
    rests = {array: group for array, group in waiting.items() if len(group) > 1}
    folded = {job.job_id for group in rests.values() for job in group}
    return [*(job for job in jobs if job.job_id not in folded),
            *(replace(min(group, key=lambda j: j.job_id), array_task_id=None,
                      array_tasks=slurm_range(j.array_task_id for j in group if j.array_task_id is not None))
              for group in rests.values())]


def jobs(seed: int, cluster: str, nodes: Sequence[NodeRun], now: dt.datetime,
         drains: Drains | None = None) -> list[Job]:
    """The cluster's jobs of the last day and its queue, newest first."""
    return snapshot(seed, cluster, nodes, now, drains).jobs


def _job_at(record: Record, now: dt.datetime) -> Job | None:
    """The job as squeue / sacct show it at `now` (None: not submitted yet)."""
    task = record.task
    if task.submitted_at > now:
        return None
    job = Job(job_id=task.job_id, name=task.name, user=task.user, partition="gpu", nodes="", gpus=task.gpus,
              state="PENDING", submitted_at=task.submitted_at, started_at=None, ended_at=None,
              time_limit=task.time_limit, priority=task.priority, reason="Resources",
              array_job_id=task.array_job_id, array_task_id=task.array_task_id)
    runs = [r for r in record.runs if r.start <= now]
    if record.cancelled_at is not None and record.cancelled_at <= now and not runs:
        return replace(job, state="CANCELLED", reason=None, ended_at=record.cancelled_at)
    if not runs:
        return replace(job, reason=_requeued_reason(task, now) if task.requeued else "Resources")
    run = runs[-1]
    placed = replace(job, nodes=run.machine, started_at=run.start)
    if now < run.end:
        return replace(placed, state="RUNNING", reason=None)
    if run.ended_by == "node_fail":  # requeued: waiting again, on no node until it starts
        return replace(job, reason=_requeued_reason(task, now))
    if run.ended_by == "slot_end" or task.requeued:
        return replace(placed, state="COMPLETED", reason=None, ended_at=run.end)
    reason = {"FAILED": "NonZeroExitCode", "TIMEOUT": "TimeLimit"}.get(task.outcome)
    return replace(placed, state=task.outcome, reason=reason, ended_at=run.end)


def _requeued_reason(task: Task, now: dt.datetime) -> str:
    """Why a requeued job waits at `now`: its node powered off (the node's Slurm reason, while it is
    off), else slurmctld's hold after a requeue (BeginTime), then Resources."""
    if task.down_reason is not None and (task.down_until is None or now < task.down_until):
        return f"NodeDown: {task.down_reason}"
    return "BeginTime" if now < task.eligible_at else "Resources"
