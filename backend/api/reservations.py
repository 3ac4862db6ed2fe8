"""/v1/reservations: capacity reservations apart from clusters, paid up front for their whole term."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from sqlalchemy.orm import Session
from starlette.responses import Response

from backend.api.cluster_schemas import CatalogName, ExpiresAt, Labels
from backend.api.deps import Reader, Writer
from backend.api.listing import page_args, page_body
from backend.api.schemas import (
    DISPLAY_NAME_PATTERN,
    READ_ERRORS,
    WRITE_ERRORS,
    IdempotencyKey,
    IfMatch,
    Page,
    PageSize,
    PageToken,
    StrictModel,
)
from backend.api.state import app_state
from backend.api.writes import WriteOutcome, run_write
from backend.billing.money import micros_to_usd
from backend.domain.clock import utcnow
from backend.provisioning import reservations as holds
from backend.services import reservations
from backend.store.billing_models import CapacityReservation

router = APIRouter(prefix="/v1/reservations", tags=["billing"])
KIND = "reservation"


class ReservationCreate(StrictModel):
    name: str = Field(pattern=DISPLAY_NAME_PATTERN, max_length=128, description="Display name")
    region: CatalogName
    instance_type: CatalogName
    node_count: int = Field(ge=1, le=4096, description="Nodes held for the term")
    duration_days: int = Field(ge=1, le=90, description="Term length in days (the catalog's reserved rate)")
    starts_at: ExpiresAt | None = Field(
        default=None, description="When the term starts (RFC 3339 with a time zone); default: now"
    )
    labels: Labels = Field(
        default_factory=dict,
        description="Key/value tags; a team-scoped API key's scope label is added (and no other value "
        "for it accepted)",
    )


class ReservationUpdate(StrictModel):
    """What changes in place: nothing priced or held (a new term is a new reservation)."""

    name: str | None = Field(
        default=None, pattern=DISPLAY_NAME_PATTERN, max_length=128, description="Display name"
    )
    labels: Labels | None = Field(
        default=None,
        description="Replaces the labels; a team-scoped API key's scope label is kept (no other value for "
        "it accepted)",
    )


class ReservationOut(BaseModel):
    id: str
    name: str
    region: str
    instance_type: str
    node_count: int
    duration_days: int
    labels: dict[str, str]
    starts_at: datetime
    ends_at: datetime
    fabric: str = Field(description="The fabric of the region whose nodes are held")
    status: str = Field(description="scheduled (before starts_at), active or ended")
    free_nodes: int = Field(description="Nodes no cluster draws now (0 once ended)")
    cluster_ids: list[str] = Field(description="Clusters drawing from it")
    gpu_hour_usd: str = Field(description="Reserved USD per GPU-hour (the catalog's rate for the term)")
    discount: str
    upfront_usd: str = Field(description="The one charge for the whole term, at starts_at")
    charged_at: datetime | None
    created_at: datetime


def to_out(session: Session, row: CapacityReservation) -> ReservationOut:
    now = utcnow()
    starts, ends = row.starts_at, row.ends_at
    status = "scheduled" if now < starts else "active" if now < ends else "ended"
    return ReservationOut(
        id=row.id,
        name=row.name,
        region=row.region,
        instance_type=row.instance_type,
        node_count=row.node_count,
        duration_days=row.duration_days,
        labels=dict(row.labels or {}),
        starts_at=starts,
        ends_at=ends,
        fabric=row.pool.split("/")[1],
        status=status,
        free_nodes=holds.free_nodes(session, row) if status != "ended" else 0,
        cluster_ids=reservations.cluster_ids(session, row.id),
        gpu_hour_usd=str(row.gpu_hour_usd.normalize()),
        discount=str(row.discount.normalize()),
        upfront_usd=str(micros_to_usd(row.upfront_micros)),
        charged_at=None if row.charged_at is None else row.charged_at,
        created_at=row.created_at,
    )


@router.post("", status_code=201, response_model=ReservationOut, responses=WRITE_ERRORS)
def create_reservation(
    body: ReservationCreate, request: Request, principal: Writer, idempotency_key: IdempotencyKey = None
) -> Response:
    """Book capacity for a term: held from now to the term's end, charged once up front at starts_at."""

    def operation(session: Session) -> WriteOutcome:
        row = reservations.book_reservation(
            session=session,
            catalog=app_state(request).catalog,
            project_id=principal.project_id,
            scope=principal.scope,
            spec=reservations.ReservationSpec(**body.model_dump()),
            now=utcnow(),
        )
        return WriteOutcome(KIND, row.id, to_out(session, row), 201, reservations.reservation_etag(row),
                            location=f"/v1/reservations/{row.id}")

    return run_write(request, principal, action="reservation.create", operation=operation, body=body)


@router.get("", response_model=Page[ReservationOut], responses=READ_ERRORS)
def list_reservations(
    request: Request, principal: Reader, page_size: PageSize = None, page_token: PageToken = None
) -> Response:
    """The project's reservations (a team-scoped key: its team's), oldest first."""
    state = app_state(request)
    after_id, limit = page_args(state.settings, kind=KIND, page_size=page_size, page_token=page_token)
    with state.read_sessions() as session:
        rows, more = reservations.list_reservations(
            session=session, project_id=principal.project_id, scope=principal.scope, after_id=after_id,
            limit=limit,
        )
        page = Page[ReservationOut].model_validate(page_body(KIND, rows, more, lambda r: to_out(session, r)))
    return Response(page.model_dump_json(), media_type="application/json")


@router.get("/{reservation_id}", response_model=ReservationOut, responses=READ_ERRORS)
def get_reservation(reservation_id: str, request: Request, principal: Reader) -> Response:
    """One reservation with its free nodes and the clusters drawing from it."""
    with app_state(request).read_sessions() as session:
        row = reservations.get_reservation(
            session=session, project_id=principal.project_id, reservation_id=reservation_id,
            scope=principal.scope,
        )
        return Response(to_out(session, row).model_dump_json(), media_type="application/json",
                        headers={"ETag": reservations.reservation_etag(row)})


@router.patch("/{reservation_id}", response_model=ReservationOut, responses=WRITE_ERRORS)
def update_reservation(
    reservation_id: str,
    body: ReservationUpdate,
    request: Request,
    principal: Writer,
    if_match: IfMatch = None,
) -> Response:
    """Rename and/or relabel in place (no new booking, no new charge); 412 on a stale If-Match."""
    changes = {name: getattr(body, name) for name in body.model_fields_set}

    def operation(session: Session) -> WriteOutcome:
        row = reservations.update_reservation(
            session=session, project_id=principal.project_id, reservation_id=reservation_id,
            changes=changes, if_match=if_match, scope=principal.scope,
        )
        return WriteOutcome(KIND, row.id, to_out(session, row), 200, reservations.reservation_etag(row))

    return run_write(request, principal, action="reservation.update", operation=operation, body=body)


@router.delete("/{reservation_id}", status_code=204, responses=WRITE_ERRORS)
def delete_reservation(reservation_id: str, request: Request, principal: Writer) -> Response:
    """Give the capacity back early (no refund once started); 409 while clusters draw from it."""

    def operation(session: Session) -> WriteOutcome:
        reservations.delete_reservation(
            session=session, project_id=principal.project_id, reservation_id=reservation_id, now=utcnow(),
            scope=principal.scope,
        )
        return WriteOutcome(KIND, reservation_id, None, 204)

    return run_write(request, principal, action="reservation.delete", operation=operation)
