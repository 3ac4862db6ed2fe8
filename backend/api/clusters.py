"""/v1/clusters: create, list, get, partial update, delete, attach/detach volumes."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request
from sqlalchemy.orm import Session
from starlette.responses import Response

from backend.api.cluster_nodes import driver, now
from backend.api.cluster_schemas import (
    NULLABLE_FIELDS,
    ClusterCreate,
    ClusterOut,
    ClusterUpdate,
    ScaleDownJobOut,
    ScaleDownNodeOut,
    ScaleDownPreviewOut,
)
from backend.api.deps import Operator, Reader, Writer, check_cluster_fields
from backend.api.listing import page_args, page_body
from backend.api.read_cache import ClusterRead
from backend.api.schemas import (
    READ_ERRORS,
    WRITE_ERRORS,
    IdempotencyKey,
    IfMatch,
    NameFilter,
    Page,
    PageSize,
    PageToken,
    problem_response_doc,
)
from backend.api.state import app_state, run_read
from backend.api.writes import WriteOutcome, run_write
from backend.billing.reports import cluster_billing
from backend.domain.catalog import Catalog
from backend.domain.etags import etag_for
from backend.provisioning import scale_down
from backend.provisioning.lifetime import lifetime_warnings
from backend.provisioning.views import cluster_runtime
from backend.services import clusters
from backend.store.models import Cluster

router = APIRouter(prefix="/v1/clusters", tags=["clusters"])
# Billing refuses creates and scale-ups of a project out of prepaid credits, and new volume attachments
# after a grace period.
CLUSTER_WRITE_ERRORS = {
    **WRITE_ERRORS,
    402: problem_response_doc("Out of prepaid credits (`credits_exhausted`, with `balance_usd`)"),
    403: problem_response_doc(
        "The API key's role may not write, or the change would pass a project quota (`quota_exceeded`, "
        "with `quota`, `limit`, `in_use` and `requested`; see GET /v1/quotas)"
    ),
}
KIND = "cluster"


def to_out(
    session: Session, row: Cluster | Any, catalog: Catalog, spec: dict[str, Any] | None = None
) -> ClusterOut:
    """The cluster as returned: the stored spec, computed fields and the engine's runtime view.

    `row` may be a Core row of the clusters table with its `spec` (the GET path, see read_cluster).
    """
    spec = spec if spec is not None else clusters.cluster_spec(row)
    itype = catalog.instance_type(row.instance_type)
    try:
        hourly: float | None = float(clusters.estimated_hourly_cost(spec, catalog))
    except ValueError:  # a price removed from the catalog after creation
        hourly = None
    ceiling = spec["max_hourly_cost_usd"]
    body: dict[str, Any] = {
        "id": row.id,
        **spec,
        "max_hourly_cost_usd": float(ceiling) if ceiling is not None else None,
        "status": row.status,
        "phase": row.phase,
        "status_reason": row.status_reason,
        "num_gpus": row.node_count * (itype.gpu_count if itype else 0),
        "gpu_type": itype.gpu_model if itype else None,
        "estimated_hourly_cost_usd": hourly,
        "deletion_requested_at": row.deletion_requested_at,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
    }
    body.update(cluster_runtime(session, row.id, row))
    body.update(cluster_billing(session, row.id, spec=spec, catalog=catalog))
    body["warnings"] = lifetime_warnings(row)
    return ClusterOut.model_validate(body)


def _outcome(
    session: Session, row: Cluster, catalog: Catalog, status: int = 200, location: str | None = None
) -> WriteOutcome:
    return WriteOutcome(
        KIND, row.id, to_out(session, row, catalog), status, etag_for(row.generation), location
    )


@router.post("", status_code=201, response_model=ClusterOut, responses=CLUSTER_WRITE_ERRORS)
def create_cluster(
    body: ClusterCreate, request: Request, principal: Writer, idempotency_key: IdempotencyKey = None
) -> Response:
    """Accept a cluster; it starts PENDING and the engine provisions it (poll GET for the status)."""
    catalog = app_state(request).catalog
    spec = body.model_dump(exclude_none=False)
    if "node_count" not in body.model_fields_set:
        del spec["node_count"]  # the default (1, or autoscaling.min_nodes) is the service's

    def operation(session: Session) -> WriteOutcome:
        row = clusters.create_cluster(
            session=session,
            catalog=catalog,
            project_id=principal.project_id,
            scope=principal.scope,
            spec=spec,
        )
        return _outcome(session, row, catalog, 201, f"/v1/clusters/{row.id}")

    return run_write(request, principal, action="cluster.create", operation=operation, body=body)


@router.get("", response_model=Page[ClusterOut], responses=READ_ERRORS)
def list_clusters(
    request: Request,
    principal: Reader,
    page_size: PageSize = None,
    page_token: PageToken = None,
    name: NameFilter = None,
) -> Response:
    """The project's clusters, oldest first (destroyed ones are gone)."""
    state = app_state(request)
    after_id, limit = page_args(state.settings, kind=KIND, page_size=page_size, page_token=page_token)
    with state.read_sessions() as session:
        rows, more = clusters.list_clusters(
            session=session,
            project_id=principal.project_id,
            scope=principal.scope,
            after_id=after_id,
            limit=limit,
            name=name,
        )
        page = Page[ClusterOut].model_validate(
            page_body(KIND, rows, more, lambda row: to_out(session, row, state.catalog))
        )
    return Response(page.model_dump_json(), media_type="application/json")


@router.get("/{cluster_id}", response_model=ClusterOut, responses=READ_ERRORS)
async def get_cluster(cluster_id: str, request: Request, principal: Reader) -> Response:
    """One cluster with its runtime state."""
    state = app_state(request)

    def read() -> Response:
        with state.read_sessions() as session:
            stamp = state.change_stamps.before_read(session) if state.change_stamps is not None else None
            row, spec = clusters.read_cluster(
                session=session, project_id=principal.project_id, scope=principal.scope, cluster_id=cluster_id
            )
            body = to_out(session, row, state.catalog, spec).model_dump_json().encode()
        etag = etag_for(row.generation)
        if stamp is not None:  # served again in front of the router while the stamp holds (cluster_reads)
            state.cluster_reads.put(cluster_id, ClusterRead(stamp, row.project_id, row.labels, body, etag))
        return Response(body, media_type="application/json", headers={"ETag": etag})

    # The hottest route: its database work runs on the small read pool, not FastAPI's 40 threads.
    return await run_read(request, read)


@router.get("/{cluster_id}/scale-down-preview", response_model=ScaleDownPreviewOut, responses=READ_ERRORS)
def scale_down_preview(
    cluster_id: str, request: Request, principal: Reader,
    node_count: int | None = Query(default=None, ge=1, le=4096,
                                   description="The node_count to preview (default: the current one)"),
) -> Response:
    """Which nodes a scale-down to `node_count` would remove (idle first, then the newest) and the jobs
    running on each, which are drained and requeued after `scale_down_grace_minutes`. Changes nothing."""
    state = app_state(request)
    at = now(request)
    with state.read_sessions() as session:
        row = clusters.get_cluster(session=session, project_id=principal.project_id, scope=principal.scope,
                                   cluster_id=cluster_id)
        target = row.node_count if node_count is None else node_count
        found = scale_down.preview(session, driver(request), row, target, at)
        current, name = row.node_count, row.name
    nodes = [ScaleDownNodeOut(
        name=n.name, index=n.index, already_leaving=n.leaving,
        running_jobs=[ScaleDownJobOut(job_id=j.job_id, name=j.name, user=j.user, nodes=j.nodes,
                                      started_at=j.started_at) for j in n.jobs]) for n in found.nodes]
    body = ScaleDownPreviewOut(cluster_id=cluster_id, node_count=target, current_node_count=current,
                               scale_down_grace_minutes=found.grace_minutes,
                               workload_known=found.workload_known, nodes=nodes,
                               summary=scale_down.summary(name, found))
    return Response(body.model_dump_json(), media_type="application/json")


@router.patch("/{cluster_id}", response_model=ClusterOut, responses=CLUSTER_WRITE_ERRORS)
def update_cluster(
    cluster_id: str, body: ClusterUpdate, request: Request, principal: Operator, if_match: IfMatch = None
) -> Response:
    """Partial update: scale, rename, labels, keys, volumes, container, protection, cost ceiling
    (operator keys: node_count, remove_node_names, labels and volume_ids only)."""
    check_cluster_fields(principal, body.model_fields_set)
    catalog = app_state(request).catalog
    changes = {
        field: getattr(body, field)
        for field in body.model_fields_set - {"remove_node_names"}
        if getattr(body, field) is not None or field in NULLABLE_FIELDS
    }
    if "billing" in changes:
        changes["billing"] = body.billing.model_dump(exclude_unset=True) if body.billing else None
    if "autoscaling" in changes:
        changes["autoscaling"] = body.autoscaling.model_dump() if body.autoscaling else None

    def operation(session: Session) -> WriteOutcome:
        row = clusters.update_cluster(
            session=session,
            catalog=catalog,
            project_id=principal.project_id,
            scope=principal.scope,
            cluster_id=cluster_id,
            changes=changes,
            if_match=if_match,
            remove_node_names=body.remove_node_names or (),
        )
        return _outcome(session, row, catalog)

    return run_write(request, principal, action="cluster.update", operation=operation, body=body)


@router.delete("/{cluster_id}", status_code=202, response_model=ClusterOut, responses=CLUSTER_WRITE_ERRORS)
def delete_cluster(
    cluster_id: str, request: Request, principal: Writer, if_match: IfMatch = None
) -> Response:
    """Request deletion (409 under deletion_protection); the cluster goes DESTROYING, then 404."""
    catalog = app_state(request).catalog

    def operation(session: Session) -> WriteOutcome:
        row = clusters.delete_cluster(
            session=session,
            project_id=principal.project_id,
            scope=principal.scope,
            cluster_id=cluster_id,
            if_match=if_match,
        )
        return _outcome(session, row, catalog, 202)

    return run_write(request, principal, action="cluster.delete", operation=operation)


@router.post("/{cluster_id}/volumes/{volume_id}", response_model=ClusterOut, responses=CLUSTER_WRITE_ERRORS)
def attach_volume(
    cluster_id: str,
    volume_id: str,
    request: Request,
    principal: Operator,
    if_match: IfMatch = None,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Attach a volume of the cluster's region (no change if already attached)."""
    catalog = app_state(request).catalog

    def operation(session: Session) -> WriteOutcome:
        row = clusters.attach_volume(
            session=session,
            catalog=catalog,
            project_id=principal.project_id,
            scope=principal.scope,
            cluster_id=cluster_id,
            volume_id=volume_id,
            if_match=if_match,
        )
        return _outcome(session, row, catalog)

    return run_write(request, principal, action="cluster.attach_volume", operation=operation)


@router.delete("/{cluster_id}/volumes/{volume_id}", response_model=ClusterOut, responses=CLUSTER_WRITE_ERRORS)
def detach_volume(
    cluster_id: str, volume_id: str, request: Request, principal: Operator, if_match: IfMatch = None
) -> Response:
    """Detach a volume (404 when it is not attached)."""
    catalog = app_state(request).catalog

    def operation(session: Session) -> WriteOutcome:
        row = clusters.detach_volume(
            session=session,
            catalog=catalog,
            project_id=principal.project_id,
            scope=principal.scope,
            cluster_id=cluster_id,
            volume_id=volume_id,
            if_match=if_match,
        )
        return _outcome(session, row, catalog)

    return run_write(request, principal, action="cluster.detach_volume", operation=operation)
