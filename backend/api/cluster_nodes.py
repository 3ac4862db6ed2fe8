"""Day 2 on a running cluster: its nodes with health and GPU readings (`GET .../nodes`), a node's history
(`GET .../nodes/{name}/events`), node actions (`POST .../nodes/{name}/actions`) and cluster actions
(`POST .../actions`). Actions need an admin key, are audited, honour `Idempotency-Key`, and answer 409
with the reason when the node's state forbids them."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request
from pydantic import BaseModel, Field
from sqlalchemy.orm import Session
from starlette.responses import Response

from backend.api.deps import Operator, Reader
from backend.api.listing import page_args
from backend.api.schemas import READ_ERRORS, WRITE_ERRORS, Page, PageSize, PageToken, StrictModel
from backend.api.state import app_state
from backend.api.writes import WriteOutcome, run_write
from backend.domain.errors import BadRequest, NotFound
from backend.domain.lifecycle import no_such_node
from backend.domain.pagination import encode_page_token
from backend.node_agent.host import HostReading
from backend.node_agent.links import LinkReading
from backend.node_agent.nvidia import GpuReading
from backend.provisioning import node_actions, node_history, node_metrics, node_views
from backend.provisioning.driver import ProvisioningDriver
from backend.services import clusters

router = APIRouter(prefix="/v1/clusters", tags=["clusters"])
NodeName = Annotated[str, Path(max_length=80, pattern=r"^[a-z0-9-]+$", description="The node's hostname")]
MetricsWindow = Annotated[
    Literal["5m", "15m", "1h", "6h", "1d"], Query(description="How far back (at most ~300 points a series)")
]
NodeFilter = Annotated[
    str | None, Query(max_length=80, pattern=r"^[a-z0-9-]+$", description="One node's series only")
]
EVENTS_KIND = "node_event"
HealthFilter = Annotated[
    Literal["failed", "xid", "healthy"] | None,
    Query(description="failed: FAILED nodes; xid: nodes with recent XID events; healthy: healthy nodes"),
]


def driver(request: Request) -> ProvisioningDriver:
    """The runtime's driver (from the driver registry; the embedded worker's too), asked for node
    telemetry, jobs, logs and volume data."""
    return app_state(request).runtime.driver


def now(request: Request) -> dt.datetime:
    """The time on the runtime's clock (the engine's)."""
    return app_state(request).runtime.clock.now()


class XidEventOut(BaseModel):
    code: int
    pci_bus_id: str
    gpu_index: int | None
    meaning: str
    hardware: bool = Field(description="True when NVIDIA's catalogue points at the hardware, not the job")
    detail: str
    logged_at: str | None


class NodeEventOut(BaseModel):
    at: dt.datetime = Field(description="When it happened (UTC)")
    node: str = Field(description="The node's name (it survives a repair)")
    instance_id: str | None = Field(description="The machine it was about")
    kind: node_history.NodeEventKind = Field(
        description="xid, slurmd_down, unreachable, fault: a fault of the running node; degraded, "
        "recovered: its readings; repair_started / _finished / _failed, restart_started / _finished / "
        "_failed; restart / replace / drain / resume _requested: a node action; released: scaled down"
    )
    code: int | None = Field(description="The XID code of an xid event")
    detail: str
    actor: str = Field(description="Who asked: an API key's prefix, or `engine` for what the engine did "
                       "by itself")


class NodeOut(BaseModel):
    name: str
    role: str
    index: int
    instance_id: str = Field(description="The machine; a repaired node keeps its name and gets a new one")
    status: str
    status_reason: str | None
    health: Literal["healthy", "degraded", "unreachable", "failed", "repairing"]
    health_reason: str | None = Field(description="Why the node is not healthy, or why a healthy one takes "
                                      "no new work (drained: the scheduler's reason); null otherwise")
    orchestrator_state: str | None = Field(
        description="Slurm: IDLE, ALLOCATED, MIXED, DRAIN, DOWN, UNKNOWN; Kubernetes: Ready, NotReady, "
        "SchedulingDisabled; null without an orchestrator"
    )
    drained: bool
    pending_action: str | None
    capacity_type: Literal["on_demand", "spot"] = Field(
        description="The capacity the node runs on (and is billed at): spot, or on_demand (with "
        "capacity_type spot_with_fallback, an on-demand node standing in while spot is short)"
    )
    preemption_at: str | None = Field(
        default=None, description="A spot node that got its preemption notice: when the market reclaims it"
    )
    # The node agent's own dataclasses: their fields are the wire fields, declared once.
    gpus: list[GpuReading] | None = Field(description="One per GPU as `nvidia-smi -q -x` reads it; null "
                                          "inside a GPU where the driver reports N/A")
    gpus_unavailable_reason: str | None
    xid_events: list[XidEventOut]
    host: HostReading | None = Field(default=None, description="CPU and memory where the node's agent "
                                     "reports them (the local driver's nodes); null otherwise")
    links: LinkReading | None = Field(default=None, description="NVLink and InfiniBand link state where "
                                      "the node's agent reads it (a real node); null otherwise")
    read_at: str | None
    last_event: NodeEventOut | None = Field(
        default=None, description="The latest event of the node's history (`GET .../nodes/{name}/events`)"
    )


class NodeList(BaseModel):
    items: list[NodeOut]
    counts: dict[str, int] = Field(description="Nodes per health state (before the filter)")


class NodeActionIn(StrictModel):
    action: Literal["restart", "replace", "drain", "resume"]


class NodeActionOut(BaseModel):
    action: str
    node: NodeOut


class ClusterActionIn(StrictModel):
    action: Literal["restart_workers"] = Field(
        description="restart_workers: restart every worker reporting XID errors"
    )


class ClusterActionOut(BaseModel):
    action: str
    nodes: list[str] = Field(description="The nodes the action was taken on")


class MetricsSeries(BaseModel):
    node: str
    gpu_utilization_pct: list[float | None] = Field(description="Mean over the node's GPUs, per bucket")
    gpu_memory_used_mib: list[int | None] = Field(description="Sum over the node's GPUs, per bucket")


class MetricsOut(BaseModel):
    window: str
    step_seconds: int = Field(description="Width of one bucket (each value is the mean of its samples)")
    timestamps: list[str] = Field(description="Start of each bucket; every series has one value per bucket")
    series: list[MetricsSeries]


def _event_out(row: Any) -> NodeEventOut:
    return NodeEventOut(at=row.at, node=row.node_name, instance_id=row.node_id, kind=row.kind, code=row.code,
                        detail=row.detail, actor=row.actor)


def _views(request: Request, session: Session, cluster: Any) -> list[dict[str, Any]]:
    views = node_views.node_views(session, driver(request), cluster, now(request))
    last = node_history.last_events(session, cluster.id)
    for view in views:
        event = last.get(view["name"])
        view["last_event"] = _event_out(event) if event is not None else None
    return views


@router.get("/{cluster_id}/nodes", response_model=NodeList, responses=READ_ERRORS)
def list_nodes(cluster_id: str, request: Request, principal: Reader, health: HealthFilter = None) -> Response:
    """The cluster's nodes: health, orchestrator state, machine, latest GPU readings, recent XID events."""
    state = app_state(request)
    with state.read_sessions() as session:
        cluster = clusters.get_cluster(session=session, project_id=principal.project_id,
                                       scope=principal.scope,
                                       cluster_id=cluster_id)
        every = _views(request, session, cluster)
    counts = {name: 0 for name in node_views.HEALTH_STATES}
    for view in every:
        counts[view["health"]] += 1
    chosen = [v for v in every if node_views.matches(v, health)]
    body = NodeList(items=[NodeOut.model_validate(v) for v in chosen], counts=counts)
    return Response(body.model_dump_json(), media_type="application/json")


@router.get("/{cluster_id}/nodes/{name}/events", response_model=Page[NodeEventOut], responses=READ_ERRORS)
def list_node_events(cluster_id: str, name: NodeName, request: Request, principal: Reader,
                     page_size: PageSize = None, page_token: PageToken = None) -> Response:
    """The node's history, newest first: faults (with their XID code), repairs, restarts and node
    actions with who asked, across every machine that held the name. 404 when the cluster never had a
    node of that name."""
    state = app_state(request)
    after, limit = page_args(state.settings, kind=EVENTS_KIND, page_size=page_size, page_token=page_token)
    if after is not None and not (after.isascii() and after.isdigit() and len(after) <= 18):  # an event id
        raise BadRequest("page_token is not a token returned by this listing", field="page_token",
                         code="invalid_page_token")
    with state.read_sessions() as session:
        cluster = clusters.get_cluster(session=session, project_id=principal.project_id,
                                       scope=principal.scope, cluster_id=cluster_id)
        if not node_history.ever_had(session, cluster_id, name):
            names = node_actions.member_names(session, cluster_id)
            raise NotFound(no_such_node(cluster.name, name, names), field="name")
        rows = node_history.history(session, cluster_id, name, before_id=int(after) if after else None,
                                    limit=limit + 1)
    more = len(rows) > limit
    rows = rows[:limit]
    token = encode_page_token(kind=EVENTS_KIND, after_id=str(rows[-1].id)) if more and rows else None
    body = Page[NodeEventOut](items=[_event_out(r) for r in rows], next_page_token=token)
    return Response(body.model_dump_json(), media_type="application/json")


@router.get("/{cluster_id}/metrics", response_model=MetricsOut, responses=READ_ERRORS)
def get_metrics(cluster_id: str, request: Request, principal: Reader, window: MetricsWindow = "1h",
                node: NodeFilter = None) -> Response:
    """GPU utilisation and memory per node over the window, from the metrics ring buffer (null where
    no sample was taken: a node not yet up, or down)."""
    state = app_state(request)
    with state.read_sessions() as session:
        clusters.get_cluster(
            session=session, project_id=principal.project_id, scope=principal.scope, cluster_id=cluster_id
        )
        body = node_metrics.series(session, cluster_id, window, now(request), node)
    return Response(MetricsOut.model_validate(body).model_dump_json(), media_type="application/json")


@router.post("/{cluster_id}/nodes/{name}/actions", status_code=202, response_model=NodeActionOut,
             responses=WRITE_ERRORS)
def node_action(cluster_id: str, name: NodeName, body: NodeActionIn, request: Request, principal: Operator,
                ) -> Response:
    """restart (reboot in place), replace (new machine, same hostname and address), drain (no new work),
    resume (undo drain). 409 `node_state_conflict` when the node's state forbids it."""
    catalog = app_state(request).catalog

    def operation(session: Session) -> WriteOutcome:
        cluster = clusters.get_cluster(session=session, project_id=principal.project_id,
                                       scope=principal.scope,
                                       cluster_id=cluster_id, for_update=True)
        node_actions.request_node_action(session, catalog, cluster, name, body.action, now=now(request),
                                         actor=principal.key_prefix)
        session.flush()
        view = next(v for v in _views(request, session, cluster) if v["name"] == name)
        return WriteOutcome("cluster", cluster_id,
                            NodeActionOut(action=body.action, node=NodeOut.model_validate(view)), 202)

    return run_write(request, principal, action=f"cluster.node_{body.action}", operation=operation, body=body)


@router.post("/{cluster_id}/actions", status_code=202, response_model=ClusterActionOut,
             responses=WRITE_ERRORS)
def cluster_action(cluster_id: str, body: ClusterActionIn, request: Request, principal: Operator) -> Response:
    """restart_workers: restart every worker that reports XID errors (failed by one, or with a hardware
    XID in the last hour); the answer names them (empty when none does)."""

    def operation(session: Session) -> WriteOutcome:
        cluster = clusters.get_cluster(session=session, project_id=principal.project_id,
                                       scope=principal.scope,
                                       cluster_id=cluster_id, for_update=True)
        xid = {v["name"] for v in _views(request, session, cluster) if node_views.matches(v, "xid")}
        names = node_actions.restart_workers(session, cluster, xid, now=now(request),
                                             actor=principal.key_prefix)
        return WriteOutcome("cluster", cluster_id, ClusterActionOut(action=body.action, nodes=names), 202)

    return run_write(request, principal, action=f"cluster.{body.action}", operation=operation, body=body)
