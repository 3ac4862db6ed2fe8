"""/v1/reserved-ips: public addresses a project keeps across clusters (reserve, list, get, rename and
relabel, release when detached) and /v1/clusters/{id}/reserve-ip (keep a cluster's floating address)."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from sqlalchemy.orm import Session
from starlette.responses import Response

from backend.api.cluster_schemas import CatalogName, Labels
from backend.api.deps import Reader, Writer
from backend.api.listing import page_args, page_body
from backend.api.schemas import (
    DISPLAY_NAME_PATTERN,
    READ_ERRORS,
    WRITE_ERRORS,
    IdempotencyKey,
    IfMatch,
    NameFilter,
    Page,
    PageSize,
    PageToken,
    StrictModel,
    problem_response_doc,
)
from backend.api.state import app_state
from backend.api.writes import WriteOutcome, run_write
from backend.domain.catalog import Catalog
from backend.domain.etags import etag_for
from backend.services import clusters, reserved_ips
from backend.store.models import ReservedIp

router = APIRouter(tags=["reserved-ips"])
KIND = "reserved_ip"
BASE = "/v1/reserved-ips"
RESERVE_ERRORS = {
    **WRITE_ERRORS,
    402: problem_response_doc("Out of prepaid credits (`credits_exhausted`, with `balance_usd`)"),
}
NAME_DOC = "Display name (optional)"


class ReservedIpCreate(StrictModel):
    region: CatalogName = Field(description="Region whose public pool the address comes from (/v1/regions)")
    name: str | None = Field(
        default=None, pattern=DISPLAY_NAME_PATTERN, max_length=128, description=NAME_DOC
    )
    labels: Labels = Field(default_factory=dict)


class ReservedIpUpdate(StrictModel):
    name: str | None = Field(
        default=None, pattern=DISPLAY_NAME_PATTERN, max_length=128, description=NAME_DOC + "; null clears it"
    )
    labels: Labels | None = None


class ClusterAddressReserve(StrictModel):
    name: str | None = Field(
        default=None, pattern=DISPLAY_NAME_PATTERN, max_length=128, description=NAME_DOC
    )
    labels: Labels = Field(default_factory=dict)


class ReservedIpOut(BaseModel):
    id: str
    name: str | None
    region: str
    labels: dict[str, str]
    address: str = Field(description="The public IPv4 address, the project's until released")
    cluster_id: str | None = Field(description="The cluster whose login node answers on it, if any")
    status: str = Field(description="reserved (unattached) or attached")
    hourly_cost_usd: float = Field(description="The price per hour in its current status")
    created_at: datetime
    updated_at: datetime


def to_out(row: ReservedIp, cluster_id: str | None, catalog: Catalog) -> ReservedIpOut:
    attached = cluster_id is not None
    return ReservedIpOut(
        id=row.id,
        name=row.name,
        region=row.region,
        labels=dict(row.labels),
        address=row.address,
        cluster_id=cluster_id,
        status="attached" if attached else "reserved",
        hourly_cost_usd=float(reserved_ips.hourly_cost_usd(catalog, attached=attached)),
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _out(session: Session, row: ReservedIp, catalog: Catalog) -> ReservedIpOut:
    return to_out(row, reserved_ips.holders(session=session, reserved_ip_ids=[row.id])[row.id], catalog)


@router.post(BASE, status_code=201, response_model=ReservedIpOut, responses=RESERVE_ERRORS)
def create_reserved_ip(
    body: ReservedIpCreate, request: Request, principal: Writer, idempotency_key: IdempotencyKey = None
) -> Response:
    """Reserve a public address of a region (billed per hour until released)."""
    catalog = app_state(request).catalog

    def operation(session: Session) -> WriteOutcome:
        row = reserved_ips.create_reserved_ip(
            session=session, catalog=catalog, project_id=principal.project_id, scope=principal.scope,
            region=body.region, name=body.name, labels=body.labels,
        )
        return WriteOutcome(
            KIND, row.id, to_out(row, None, catalog), 201, etag_for(row.generation), f"{BASE}/{row.id}"
        )

    return run_write(request, principal, action="reserved_ip.create", operation=operation, body=body)


@router.get(BASE, response_model=Page[ReservedIpOut], responses=READ_ERRORS)
def list_reserved_ips(
    request: Request,
    principal: Reader,
    page_size: PageSize = None,
    page_token: PageToken = None,
    name: NameFilter = None,
) -> Response:
    """The project's reserved IPs, oldest first."""
    state = app_state(request)
    after_id, limit = page_args(state.settings, kind=KIND, page_size=page_size, page_token=page_token)
    with state.read_sessions() as session:
        rows, more = reserved_ips.list_reserved_ips(
            session=session, project_id=principal.project_id, scope=principal.scope, after_id=after_id,
            limit=limit, name=name,
        )
        held = reserved_ips.holders(session=session, reserved_ip_ids=[r.id for r in rows])
        page = Page[ReservedIpOut].model_validate(
            page_body(KIND, rows, more, lambda r: to_out(r, held[r.id], state.catalog))
        )
    return Response(page.model_dump_json(), media_type="application/json")


@router.get(BASE + "/{reserved_ip_id}", response_model=ReservedIpOut, responses=READ_ERRORS)
def get_reserved_ip(reserved_ip_id: str, request: Request, principal: Reader) -> Response:
    """One reserved IP (404 for another project's)."""
    state = app_state(request)
    with state.read_sessions() as session:
        row = reserved_ips.get_reserved_ip(
            session=session, project_id=principal.project_id, scope=principal.scope,
            reserved_ip_id=reserved_ip_id,
        )
        body = _out(session, row, state.catalog)
    return Response(
        body.model_dump_json(), media_type="application/json", headers={"ETag": etag_for(row.generation)}
    )


@router.patch(BASE + "/{reserved_ip_id}", response_model=ReservedIpOut, responses=WRITE_ERRORS)
def update_reserved_ip(
    reserved_ip_id: str, body: ReservedIpUpdate, request: Request, principal: Writer, if_match: IfMatch = None
) -> Response:
    """Rename and/or relabel (the address and region never change)."""
    catalog = app_state(request).catalog
    changes = {field: getattr(body, field) for field in body.model_fields_set}

    def operation(session: Session) -> WriteOutcome:
        row = reserved_ips.update_reserved_ip(
            session=session, project_id=principal.project_id, scope=principal.scope,
            reserved_ip_id=reserved_ip_id, changes=changes, if_match=if_match,
        )
        return WriteOutcome(KIND, row.id, _out(session, row, catalog), 200, etag_for(row.generation))

    return run_write(request, principal, action="reserved_ip.update", operation=operation, body=body)


@router.delete(BASE + "/{reserved_ip_id}", status_code=204, responses=WRITE_ERRORS)
def release_reserved_ip(
    reserved_ip_id: str, request: Request, principal: Writer, if_match: IfMatch = None
) -> Response:
    """Release the address back to the region (409 `reserved_ip_attached`, naming the cluster, while a
    cluster answers on it)."""

    def operation(session: Session) -> WriteOutcome:
        reserved_ips.release_reserved_ip(
            session=session, project_id=principal.project_id, scope=principal.scope,
            reserved_ip_id=reserved_ip_id, if_match=if_match,
        )
        return WriteOutcome(KIND, reserved_ip_id, None, 204)

    return run_write(request, principal, action="reserved_ip.release", operation=operation)


@router.post("/v1/clusters/{cluster_id}/reserve-ip", status_code=201, response_model=ReservedIpOut,
             responses=RESERVE_ERRORS)
def reserve_cluster_address(
    cluster_id: str,
    body: ClusterAddressReserve,
    request: Request,
    principal: Writer,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Keep the cluster's current floating address as a reserved IP that stays attached to it (the
    cluster's `reserved_ip_id` becomes its id; 409 when it already has one or no address yet)."""
    catalog = app_state(request).catalog

    def operation(session: Session) -> WriteOutcome:
        cluster = clusters.get_cluster(
            session=session, project_id=principal.project_id, cluster_id=cluster_id, for_update=True,
            scope=principal.scope,
        )
        row = reserved_ips.reserve_cluster_address(
            session=session, project_id=principal.project_id, cluster=cluster, name=body.name,
            labels=body.labels, scope=principal.scope, catalog=catalog,
        )
        return WriteOutcome(
            KIND, row.id, to_out(row, cluster.id, catalog), 201, etag_for(row.generation), f"{BASE}/{row.id}"
        )

    return run_write(request, principal, action="cluster.reserve_ip", operation=operation, body=body)
