"""What runs on a cluster: its scheduler's jobs and partitions (`GET .../jobs`) and the controller's and
nodes' logs (`GET .../logs`), from the driver (the modelled workload under the simulated driver)."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Literal, get_args

from fastapi import APIRouter, Query, Request
from fastapi.security.utils import get_authorization_scheme_param
from pydantic import BaseModel, Field
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response, StreamingResponse

from backend.api.cluster_nodes import driver, now
from backend.api.deps import Reader
from backend.api.schemas import READ_ERRORS
from backend.api.state import AppState, app_state
from backend.domain.errors import NotFound, Unauthorized
from backend.provisioning import node_views
from backend.provisioning.driver import Job, LogRequest, logs_of, partitions_of, workload_of
from backend.services import clusters
from backend.services.auth import Principal

router = APIRouter(prefix="/v1/clusters", tags=["clusters"])
# Slurm's job states, lower case (squeue/sacct print them upper case): its base states, then the ones a
# flag shows.
JobState = Literal[
    "pending", "running", "suspended", "completed", "cancelled", "failed", "timeout", "node_fail",
    "preempted", "boot_fail", "deadline", "out_of_memory", "completing", "configuring", "resizing",
    "requeued", "requeue_fed", "requeue_hold", "special_exit", "stopped", "revoked", "resv_del_hold",
    "signaling", "stage_out", "unknown",
]
SLURM_JOB_STATES: tuple[str, ...] = get_args(JobState)
COUNTED_STATES = ("running", "pending", "completed", "failed", "cancelled", "timeout")  # always in `counts`
StateFilter = Annotated[
    JobState | None,
    Query(description="Only jobs in this Slurm state, lower case (pending, running, completing, completed, "
                      "failed, cancelled, timeout, node_fail, preempted, requeued, out_of_memory, ...); the "
                      "counts are always over every job"),
]
Limit = Annotated[int, Query(ge=1, le=1000, description="Most recent jobs returned (default 100)")]
LogSourceName = Annotated[
    str, Query(max_length=80, pattern=r"^[a-z0-9-]+$", description="controller, or a node's name")
]
Tail = Annotated[int, Query(ge=1, le=5000, description="Last lines returned (default 100)")]
Follow = Annotated[bool, Query(description="Stream as Server-Sent Events and keep sending new lines")]
FOLLOW_POLL_SECONDS = 1.0
FOLLOW_MAX_SECONDS = 600.0


class JobOut(BaseModel):
    job_id: int = Field(description="Slurm's job id (an array task's own: JobIDRaw)")
    array_job_id: int | None = Field(description="An array task's array job id (Slurm's `1234_5`: 1234)")
    array_task_id: int | None = Field(description="An array task's index (`1234_5`: 5); null: not one task")
    array_tasks: str | None = Field(
        default=None, description="An array's tasks not started yet, which Slurm keeps as one pending record "
                                  "under the array's own job id (squeue's `1234_[3-5]`): their list as Slurm "
                                  "writes it (`3-5`, `1,4-9`, `3-5%2` with a running-task limit); null: not "
                                  "such a record")
    name: str
    user: str
    partition: str
    nodes: str = Field(description="Slurm NodeList")
    gpus: int = Field(description="The job's GPUs over all its nodes (Slurm's gres/gpu TRES)")
    state: str = Field(description="Slurm's job state, lower case: pending, running, completing, completed, "
                                   "failed, cancelled, timeout, node_fail, preempted, requeued, "
                                   "out_of_memory, ... (whatever Slurm says)")
    reason: str | None = Field(description="Slurm's reason (pending: Resources, Priority; ended: "
                                            "NonZeroExitCode, TimeLimit, NodeDown)")
    priority: int
    submitted_at: dt.datetime
    started_at: dt.datetime | None
    ended_at: dt.datetime | None
    run_time_seconds: int
    time_limit_seconds: int


class PartitionOut(BaseModel):
    name: str
    nodes: int
    gpu_type: str | None
    gpus_available: int
    gpus_total: int
    default_time: str
    max_time: str
    state: str


class JobList(BaseModel):
    items: list[JobOut]
    counts: dict[str, int] = Field(description="Jobs per state over the last day and the queue: running, "
                                               "pending, completed, failed, cancelled, timeout always, "
                                               "any other state Slurm shows when a job is in it")
    partitions: list[PartitionOut]


class LogsOut(BaseModel):
    source: str
    lines: list[str]


def _job_out(job: Job, now: dt.datetime) -> JobOut:
    return JobOut(job_id=job.job_id, array_job_id=job.array_job_id, array_task_id=job.array_task_id,
                  array_tasks=job.array_tasks,
                  name=job.name, user=job.user, partition=job.partition, nodes=job.nodes,
                  gpus=job.gpus, state=job.state.lower() or "unknown", reason=job.reason,
                  priority=job.priority, submitted_at=job.submitted_at, started_at=job.started_at,
                  ended_at=job.ended_at, run_time_seconds=int(job.run_time(now).total_seconds()),
                  time_limit_seconds=int(job.time_limit.total_seconds()))


def _state_order(state: str) -> tuple[int, str]:
    """Slurm's order of its states; one it has added since, after them."""
    return (SLURM_JOB_STATES.index(state) if state in SLURM_JOB_STATES else len(SLURM_JOB_STATES), state)


@router.get("/{cluster_id}/jobs", response_model=JobList, responses=READ_ERRORS)
def list_jobs(cluster_id: str, request: Request, principal: Reader, state: StateFilter = None,
              limit: Limit = 100) -> Response:
    """The scheduler's job table (newest first) with counts per state, and its partitions."""
    app = app_state(request)
    at = now(request)
    with app.read_sessions() as session:
        cluster = clusters.get_cluster(session=session, project_id=principal.project_id,
                                       scope=principal.scope,
                                       cluster_id=cluster_id)
        source = workload_of(driver(request))
        runs = node_views.node_runs(session, cluster_id)
        jobs = source.cluster_jobs(session, cluster.name, runs, at, cluster_id=cluster.id) if (
            source is not None and cluster.orchestrator == "slurm") else []
        itype = app.catalog.instance_type(cluster.instance_type)
        gpu_type = itype.gpu_model if itype else None
        asked = partitions_of(driver(request))
        real = asked.cluster_partitions(session, cluster_id, at) if (
            asked is not None and cluster.orchestrator == "slurm") else None
        cards = node_views.partitions(cluster, runs, jobs, gpu_type) if real is None else [
            {**vars(p), "gpu_type": gpu_type} for p in real]
    items = [_job_out(job, at) for job in jobs]
    counts = Counter(item.state for item in items)
    chosen = [item for item in items if state is None or item.state == state][:limit]
    shown = [*COUNTED_STATES, *sorted(set(counts) - set(COUNTED_STATES), key=_state_order)]
    body = JobList(items=chosen, counts={s: counts.get(s, 0) for s in shown},
                   partitions=[PartitionOut.model_validate(card) for card in cards])
    return Response(body.model_dump_json(), media_type="application/json")


@router.get("/{cluster_id}/logs", response_model=LogsOut, responses={
    **READ_ERRORS, 200: {"content": {"text/event-stream": {}}, "description": "With follow=true: one "
                         "Server-Sent Event per line (`data: <line>`), the tail first, then new lines"}})
def get_logs(cluster_id: str, request: Request, principal: Reader, source: LogSourceName = "controller",
             tail: Tail = 100, follow: Follow = False) -> Response:
    """The last lines of the controller's log (slurmctld) or of one node's (slurmd, kernel), oldest
    first; `follow=true` streams them as Server-Sent Events and keeps sending new lines."""
    app = app_state(request)

    def read() -> list[str]:
        with app.read_sessions() as session:
            return _read_logs(session, principal, cluster_id, source, tail, request)

    lines = read()  # 404s before any streaming starts
    if not follow:
        return Response(LogsOut(source=source, lines=lines).model_dump_json(), media_type="application/json")
    stream = _follow(request, read, lines, _key_check(app, request))
    return StreamingResponse(stream, media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


def _read_logs(session: Session, principal: Principal, cluster_id: str, source: str, tail: int,
               request: Request) -> list[str]:
    cluster = clusters.get_cluster(
        session=session, project_id=principal.project_id, cluster_id=cluster_id, scope=principal.scope
    )
    logs = logs_of(driver(request))
    members = {n.name: n for n in node_views.members(session, cluster_id)}
    if source == "controller" and cluster.orchestrator != "slurm":
        raise NotFound(f"cluster {cluster_id} has no Slurm controller (orchestrator "
                       f"{cluster.orchestrator}); ask for a node's log", field="source", code="no_such_log")
    if source != "controller" and source not in members:
        raise NotFound(f"cluster {cluster_id} has no node {source!r} (controller, or one of: "
                       f"{', '.join(members) or 'none'})", field="source", code="no_such_log")
    if logs is None:
        return []
    node = members.get(source)
    return logs.cluster_logs(session, LogRequest(
        cluster_id=cluster_id, cluster_name=cluster.name, source=source,
        nodes=node_views.node_runs(session, cluster_id),
        node=None if node is None else node_views.telemetry_target(cluster, node), tail=tail), now(request))


def _key_check(app: AppState, request: Request) -> Callable[[], bool]:
    """Whether the request's API key is still valid (not revoked), asked again during a stream: the
    authenticator's answer, so a revoked key is seen within its cache time (auth_cache_seconds)."""
    _, token = get_authorization_scheme_param(request.headers.get("Authorization"))

    def check() -> bool:
        try:
            app.authenticator.authenticate(token)
        except Unauthorized:
            return False
        return True

    return check


async def _follow(
    request: Request, read: Callable[[], list[str]], first: list[str], key_valid: Callable[[], bool]
) -> AsyncIterator[str]:
    """The tail, then every FOLLOW_POLL_SECONDS the lines after the last one sent, until the client goes
    away, its key is revoked (checked before every read: a stream grants no more than a request would)
    or FOLLOW_MAX_SECONDS pass (a client reconnects for more)."""
    deadline = time.monotonic() + FOLLOW_MAX_SECONDS
    lines, last = first, ""
    while True:
        fresh = [line for line in lines if line > last]  # lines start with their timestamp
        for line in fresh:
            yield f"data: {line}\n\n"
        last = fresh[-1] if fresh else last
        if not fresh:
            yield ": keep-alive\n\n"
        await asyncio.sleep(FOLLOW_POLL_SECONDS)
        if await request.is_disconnected() or time.monotonic() > deadline:
            return
        if not await run_in_threadpool(key_valid):
            yield ": the API key was revoked; the stream ends\n\n"
            return
        try:
            lines = await run_in_threadpool(read)
        except NotFound:  # the cluster or node is gone: end the stream
            return
