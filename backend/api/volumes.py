"""/v1/volumes: shared volumes (create, list, get, rename/grow, delete when detached)."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from sqlalchemy.orm import Session
from starlette.responses import Response

from backend.api.cluster_nodes import driver
from backend.api.cluster_schemas import Labels
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
from backend.provisioning.driver import volume_store_of
from backend.services import volumes
from backend.store.models import Volume

router = APIRouter(prefix="/v1/volumes", tags=["volumes"])
KIND = "volume"
MAX_SIZE_TIB = 10_000
# Creating or growing a volume of a project out of prepaid credits is refused at admission.
VOLUME_GROWTH_ERRORS = {
    **WRITE_ERRORS,
    402: problem_response_doc("Out of prepaid credits (`credits_exhausted`, with `balance_usd`)"),
}


# Billing writes them onto each storage line: chargeback and budgets (group_by=label:team) reach the team.
VOLUME_LABELS_DOC = "Key/value labels (a team-scoped key adds its scope label); storage lines carry them"


class VolumeCreate(StrictModel):
    name: str = Field(pattern=DISPLAY_NAME_PATTERN, max_length=128, description="Display name")
    region: str = Field(
        min_length=1, max_length=64, pattern=r"^[a-z0-9-]+$", description="Region (see /v1/regions)"
    )
    size_tib: int = Field(ge=1, le=MAX_SIZE_TIB, description="Size in TiB; can grow later, never shrink")
    labels: Labels = Field(default_factory=dict, description=VOLUME_LABELS_DOC)


class VolumeUpdate(StrictModel):
    name: str | None = Field(default=None, pattern=DISPLAY_NAME_PATTERN, max_length=128)
    size_tib: int | None = Field(default=None, ge=1, le=MAX_SIZE_TIB, description="New size (>= current)")
    labels: Labels | None = Field(default=None, description="Replaces the labels (spend charged before keeps "
                                  "the labels it was charged under)")


class VolumeOut(BaseModel):
    id: str
    name: str
    region: str
    size_tib: int
    status: str
    mount_path: str = Field(description="Where clusters mount the volume (stable for the volume's life)")
    labels: dict[str, str]
    attached_cluster_ids: list[str]
    estimated_hourly_cost_usd: float
    created_at: datetime
    updated_at: datetime


def to_out(row: Volume, attached: list[str], catalog: Catalog) -> VolumeOut:
    return VolumeOut(
        id=row.id,
        name=row.name,
        region=row.region,
        size_tib=row.size_tib,
        status=row.status,
        mount_path=f"/mnt/shared/{row.id}",
        labels=dict(row.labels or {}),
        attached_cluster_ids=attached,
        estimated_hourly_cost_usd=float(volumes.hourly_cost_usd(catalog, row.size_tib)),
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _out(session: Session, row: Volume, catalog: Catalog) -> VolumeOut:
    attached = volumes.attached_cluster_ids(session=session, volume_ids=[row.id])[row.id]
    return to_out(row, attached, catalog)


@router.post("", status_code=201, response_model=VolumeOut, responses=VOLUME_GROWTH_ERRORS)
def create_volume(
    body: VolumeCreate, request: Request, principal: Writer, idempotency_key: IdempotencyKey = None
) -> Response:
    """Create a shared volume."""
    catalog = app_state(request).catalog

    def operation(session: Session) -> WriteOutcome:
        row = volumes.create_volume(
            session=session,
            catalog=catalog,
            project_id=principal.project_id,
            scope=principal.scope,
            name=body.name,
            region=body.region,
            size_tib=body.size_tib,
            labels=body.labels,
        )
        return WriteOutcome(
            KIND, row.id, to_out(row, [], catalog), 201, etag_for(row.generation), f"/v1/volumes/{row.id}"
        )

    return run_write(request, principal, action="volume.create", operation=operation, body=body)


@router.get("", response_model=Page[VolumeOut], responses=READ_ERRORS)
def list_volumes(
    request: Request,
    principal: Reader,
    page_size: PageSize = None,
    page_token: PageToken = None,
    name: NameFilter = None,
) -> Response:
    """The project's volumes, oldest first."""
    state = app_state(request)
    after_id, limit = page_args(state.settings, kind=KIND, page_size=page_size, page_token=page_token)
    with state.read_sessions() as session:
        rows, more = volumes.list_volumes(
            session=session,
            project_id=principal.project_id,
            scope=principal.scope,
            after_id=after_id,
            limit=limit,
            name=name,
        )
        attached = volumes.attached_cluster_ids(session=session, volume_ids=[r.id for r in rows])
        page = Page[VolumeOut].model_validate(
            page_body(KIND, rows, more, lambda r: to_out(r, attached[r.id], state.catalog))
        )
    return Response(page.model_dump_json(), media_type="application/json")


@router.get("/{volume_id}", response_model=VolumeOut, responses=READ_ERRORS)
def get_volume(volume_id: str, request: Request, principal: Reader) -> Response:
    """One volume."""
    state = app_state(request)
    with state.read_sessions() as session:
        row = volumes.get_volume(
            session=session, project_id=principal.project_id, scope=principal.scope, volume_id=volume_id
        )
        body = _out(session, row, state.catalog)
    return Response(
        body.model_dump_json(), media_type="application/json", headers={"ETag": etag_for(row.generation)}
    )


@router.patch("/{volume_id}", response_model=VolumeOut, responses=VOLUME_GROWTH_ERRORS)
def update_volume(
    volume_id: str, body: VolumeUpdate, request: Request, principal: Writer, if_match: IfMatch = None
) -> Response:
    """Rename and/or grow a volume (shrinking: 422)."""
    catalog = app_state(request).catalog

    def operation(session: Session) -> WriteOutcome:
        row = volumes.update_volume(
            session=session,
            project_id=principal.project_id,
            scope=principal.scope,
            volume_id=volume_id,
            name=body.name,
            size_tib=body.size_tib,
            labels=body.labels,
            if_match=if_match,
            catalog=catalog,
        )
        return WriteOutcome(KIND, row.id, _out(session, row, catalog), 200, etag_for(row.generation))

    return run_write(request, principal, action="volume.update", operation=operation, body=body)


@router.delete("/{volume_id}", status_code=204, responses=WRITE_ERRORS)
def delete_volume(volume_id: str, request: Request, principal: Writer, if_match: IfMatch = None) -> Response:
    """Delete a volume (409 while attached to a cluster)."""

    def operation(session: Session) -> WriteOutcome:
        volumes.delete_volume(
            session=session,
            project_id=principal.project_id,
            scope=principal.scope,
            volume_id=volume_id,
            if_match=if_match,
        )
        return WriteOutcome(KIND, volume_id, None, 204)

    response = run_write(request, principal, action="volume.delete", operation=operation)
    store = volume_store_of(driver(request))
    if response.status_code == 204 and store is not None:  # committed: its data goes too
        store.delete_volume_data(volume_id)
    return response
