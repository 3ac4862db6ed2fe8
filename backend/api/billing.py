"""/v1/billing/* (credits, usage, balance, invoices) and /v1/pricing/estimate (cost before apply)."""

from __future__ import annotations

import uuid
from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, Strict
from sqlalchemy.orm import Session
from starlette.responses import Response

from backend.api.cluster_schemas import ClusterCreate, ClusterName
from backend.api.deps import Reader, Writer
from backend.api.schemas import (
    READ_ERRORS,
    WRITE_ERRORS,
    DateTimeText,
    IdempotencyKey,
    Page,
    PageSize,
    PageToken,
    StrictModel,
    money_text,
)
from backend.api.state import app_state
from backend.api.writes import WriteOutcome, run_write
from backend.billing import chargeback, reports
from backend.billing.estimate import estimate_cluster_cost
from backend.billing.ledger import balance_micros, grant_credits
from backend.billing.money import micros_to_usd, usd_text, usd_to_micros
from backend.billing.pricing import PricingError
from backend.domain.clock import SystemClock, ensure_utc
from backend.domain.cluster_rules import apply_cluster_defaults, validate_cluster_spec
from backend.domain.errors import FieldError, validation_failed
from backend.domain.pagination import decode_page_token, encode_page_token
from backend.services import pool_clusters
from backend.store.billing_models import LedgerEntry
from backend.store.repository import check_create

router = APIRouter(tags=["billing"])
USAGE_KIND = "usage"
_READ: dict[int | str, dict[str, Any]] = {code: READ_ERRORS[code] for code in (400, 401, 413, 422, 429)}
_WRITE: dict[int | str, dict[str, Any]] = {
    code: WRITE_ERRORS[code] for code in (400, 401, 403, 413, 422, 429)
}
# Strict(False): a JSON number or a plain decimal string (exact), never a boolean.
UsdAmount = Annotated[
    Decimal,
    Strict(False),
    Field(gt=0, le=Decimal("10000000"), max_digits=14, decimal_places=6),
    money_text(6),  # after Field: the constraints stay in the JSON Schema
]
UsageKindName = Literal[
    "compute_on_demand", "compute_spot", "compute_reserved", "reservation", "storage", "reserved_ip"
]
RefFilter = Annotated[str | None, Query(max_length=64, pattern=r"^[a-z]{3}_[0-9a-z_-]+$")]
_clock = SystemClock()


class CreditGrantIn(StrictModel):
    amount_usd: UsdAmount = Field(description="Credits to add, in USD (up to six decimals)")
    description: str = Field(default="", max_length=256, pattern=r"^[^\x00-\x1f\x7f]*$")


class CreditGrantOut(BaseModel):
    id: str
    amount_usd: str = Field(description="Exact decimal string")
    description: str
    balance_usd: str = Field(description="The project's balance after this grant")
    created_at: datetime


class BalanceOut(BaseModel):
    billing_mode: Literal["prepaid", "postpaid"] = Field(
        description="prepaid: admission refuses what the balance does not cover and exhaustion pauses "
        "on-demand clusters; postpaid: invoiced monthly, credits reduce the invoice, nothing is paused. "
        "Set by an operator (`gpucloud-backend set-billing-mode`)"
    )
    prepaid: bool = Field(description="billing_mode is prepaid: exhaustion rules apply")
    granted_usd: str
    charged_usd: str
    balance_usd: str
    exhausted: bool
    exhausted_since: datetime | None
    on_demand_paused: bool
    decommission_at: datetime | None = Field(description="When paused on-demand clusters are decommissioned")
    attach_refused: bool
    attach_refused_at: datetime | None
    volume_data_deadline: datetime | None = Field(description="Volume data is kept at least until then")


class UsageItemOut(BaseModel):
    id: str
    idempotency_key: str
    kind: str = Field(
        description="compute_on_demand, compute_spot (a node on spot capacity, at the spot rate), "
        "compute_reserved (prepaid, 0), reservation, storage"
    )
    resource_type: str
    resource_id: str
    cluster_id: str | None
    region: str
    instance_type: str | None
    period_start: datetime
    period_end: datetime
    seconds: int
    units: str = Field(description="GPUs (compute), TiB (storage) or reserved GPUs (reservation)")
    unit_price_usd: str = Field(description="USD per unit-hour charged")
    amount_usd: str
    recorded_at: datetime
    labels: dict[str, str] = Field(
        description="The billed object's labels when the line was charged (what chargeback groups by)"
    )


class InvoiceOut(BaseModel):
    period: str = Field(description="YYYY-MM")
    status: Literal["open", "closed"]
    period_start: datetime
    period_end: datetime
    compute_on_demand_usd: str
    reserved_upfront_usd: str
    storage_usd: str
    reserved_ip_usd: str = Field(description="Reserved public IPs, reserved and attached hours")
    total_usd: str
    line_count: int
    issued_at: datetime | None


class InvoiceList(BaseModel):
    items: list[InvoiceOut]


class ClusterReservationOut(BaseModel):
    """A cluster's reserved term (for the cluster response: `reservation`, null when on-demand or not
    RUNNING yet); built from `backend.billing.reports.cluster_billing`."""

    term_start: datetime
    term_end: datetime
    node_count: int = Field(description="Nodes covered; nodes beyond are billed on-demand")
    upfront_usd: str
    discount: str
    on_expiry: str
    expired: bool


class EstimateIn(ClusterCreate):
    """A cluster spec as for create; region, instance_type, node_count, capacity_type, billing and
    reservation_id set the price."""

    name: ClusterName | None = Field(default=None, description="Optional here")  # type: ignore[assignment]


class EstimateOut(BaseModel):
    hourly_usd: str = Field(description="What the meter charges per hour while all nodes run")
    upfront_usd: str | None = Field(
        description="The whole reserved term, charged when the cluster is RUNNING"
    )
    capacity_type: str
    gpu_hour_usd: str = Field(
        description="USD per GPU-hour the nodes are charged (spot for spot and spot_with_fallback, "
        "the discounted rate for a reserved term)"
    )
    max_hourly_usd: str = Field(
        description="The most it costs per hour (spot_with_fallback: all nodes on on-demand stand-ins); "
        "max_hourly_cost_usd is compared with it"
    )
    on_demand_gpu_hour_usd: str
    reserved_gpu_hour_usd: str | None
    reserved_discount: str | None
    gpu_count: int
    within_max_hourly_cost: bool | None = Field(description="Null when max_hourly_cost_usd is not set")


@router.post("/v1/billing/credits", status_code=201, response_model=CreditGrantOut, responses=_WRITE)
def add_credits(
    body: CreditGrantIn, request: Request, principal: Writer, idempotency_key: IdempotencyKey = None
) -> Response:
    """Add credits to the project (admin keys without a team scope only: credits are project-wide)."""

    def operation(session: Session) -> WriteOutcome:
        check_create(LedgerEntry, principal.scope)
        entry, _new = grant_credits(
            session,
            project_id=principal.project_id,
            amount_micros=usd_to_micros(body.amount_usd),
            idempotency_key=uuid.uuid4().hex,
            actor=principal.key_prefix,
            description=body.description,
            now=_clock.now(),
        )
        out = CreditGrantOut(
            id=str(entry.id),
            amount_usd=str(micros_to_usd(entry.amount_micros)),
            description=entry.description,
            balance_usd=str(micros_to_usd(balance_micros(session, principal.project_id))),
            created_at=entry.created_at,
        )
        return WriteOutcome(resource_type="billing_credit", resource_id=None, body=out, status=201)

    return run_write(request, principal, action="billing.credits_added", operation=operation, body=body)


@router.get("/v1/billing/balance", response_model=BalanceOut, responses=_READ)
def get_balance(request: Request, principal: Reader) -> BalanceOut:
    """The project's credit balance and, when it ran out, the deadlines in force."""
    state = app_state(request)
    with state.read_sessions() as session:
        view = reports.balance_view(
            session, project_id=principal.project_id, now=_clock.now(), settings=state.runtime.billing
        )
    return BalanceOut(**view)


class UsageGroupOut(BaseModel):
    key: str | None = Field(description="The label value, cluster id or UTC date; null: lines without one")
    name: str | None = Field(description="The cluster's name (group_by=cluster)")
    amount_usd: str
    line_count: int


class UsageGroupsOut(BaseModel):
    """Usage summed per group (group_by given): the groups always add up to `total_usd`."""

    group_by: str
    groups: list[UsageGroupOut] = Field(description="Largest amount first")
    total_usd: str = Field(description="All lines matching the filters")
    line_count: int


GroupBy = Annotated[
    str | None, Query(max_length=80, description=f"Sum the lines per group: {chargeback.GROUP_BY_DOC}")
]
ExportFormat = Annotated[
    Literal["json", "csv"],
    Query(alias="format", description="csv: every matching line (or group) as text/csv, unpaginated"),
]
_USAGE_RESPONSES: dict[int | str, dict[str, Any]] = {
    **_READ,
    200: {"content": {"text/csv": {"schema": {"type": "string"}}}},
}


@router.get(
    "/v1/billing/usage", response_model=Page[UsageItemOut] | UsageGroupsOut, responses=_USAGE_RESPONSES
)
def list_usage(
    request: Request,
    principal: Reader,
    page_size: PageSize = None,
    page_token: PageToken = None,
    kind: UsageKindName | None = None,
    cluster_id: RefFilter = None,
    resource_id: RefFilter = None,
    start: Annotated[DateTimeText | None, Query(description="Only lines ending after this time")] = None,
    end: Annotated[DateTimeText | None, Query(description="Only lines starting before this time")] = None,
    group_by: GroupBy = None,
    export: ExportFormat = "json",
) -> Any:
    """Usage line items (hour slices per node and volume, reserved terms), oldest first; with `group_by`
    the chargeback view (totals per team label, cluster or day); `format=csv` exports either. A
    team-scoped key gets its team's clusters' and volumes' lines."""
    state = app_state(request)
    if group_by is not None and not chargeback.valid_group_by(group_by):
        raise validation_failed([FieldError(
            "group_by", "invalid_group_by", f"group_by must be {chargeback.GROUP_BY_DOC}, not {group_by!r}"
        )])
    filters = reports.UsageFilter(
        kind=kind, cluster_id=cluster_id, resource_id=resource_id, start=_aware(start), end=_aware(end),
        scope=principal.scope,
    )
    if group_by is not None:
        with state.read_sessions() as session:
            grouped = chargeback.group_usage(
                session, project_id=principal.project_id, filters=filters, group_by=group_by
            )
        if export == "csv":
            return _csv_response(chargeback.groups_csv(grouped), f"usage-by-{group_by.replace(':', '-')}")
        return chargeback.groups_view(grouped)
    after_id = None
    if page_token:
        raw = decode_page_token(page_token, kind=USAGE_KIND)
        after_id = int(raw) if raw.isdigit() else None
    limit = min(page_size or state.settings.default_page_size, state.settings.max_page_size)
    if export == "csv":
        after_id, limit = None, CSV_MAX_LINES
    with state.read_sessions() as session:
        rows, more = reports.list_usage(
            session, project_id=principal.project_id, filters=filters, after_id=after_id, limit=limit
        )
        items = [reports.usage_item(row) for row in rows]
    if export == "csv":
        if more:
            raise validation_failed([FieldError(
                "start", "too_many_lines",
                f"more than {CSV_MAX_LINES} lines match; narrow start and end, or export with group_by",
            )])
        return _csv_response(chargeback.lines_csv(items), "usage")
    token = encode_page_token(kind=USAGE_KIND, after_id=str(rows[-1].id)) if more and rows else None
    return {"items": items, "next_page_token": token}


CSV_MAX_LINES = 500_000


def _csv_response(text: str, name: str) -> Response:
    return Response(
        text,
        media_type="text/csv",
        headers={"Content-Disposition": f'attachment; filename="{name}.csv"'},
    )


@router.get("/v1/billing/invoices", response_model=InvoiceList, responses=_READ)
def list_invoices(request: Request, principal: Reader) -> InvoiceList:
    """Monthly summaries: the open current month first, then every closed month, newest first."""
    state = app_state(request)
    with state.read_sessions() as session:
        items = reports.invoices_view(session, project_id=principal.project_id, now=_clock.now())
    return InvoiceList(items=[InvoiceOut(**item) for item in items])


@router.post("/v1/pricing/estimate", response_model=EstimateOut, responses=_READ)
def estimate(body: EstimateIn, request: Request, principal: Reader) -> JSONResponse:
    """What a cluster spec would cost: per hour and, for a reserved term, up front. Nothing is stored."""
    catalog = app_state(request).catalog
    spec = body.model_dump(mode="json", exclude_none=True)
    spec.setdefault("name", "estimate")
    if spec.get("host_pool_id") is not None:  # region and instance type default to the pool's
        with app_state(request).read_sessions() as session:
            spec = pool_clusters.complete(session, catalog, principal.project_id, spec, principal.scope)
    full = apply_cluster_defaults(spec, catalog)
    errors = [FieldError(e.path, e.code, e.message) for e in validate_cluster_spec(full, catalog)]
    if errors:
        raise validation_failed(errors)
    try:
        result = estimate_cluster_cost(full, catalog)
    except PricingError as error:
        raise validation_failed([FieldError(error.field, "no_price", error.message)]) from None
    ceiling = body.max_hourly_cost_usd
    out = EstimateOut(
        hourly_usd=usd_text(result.hourly_usd),
        upfront_usd=None if result.upfront_usd is None else usd_text(result.upfront_usd),
        capacity_type=result.capacity_type,
        gpu_hour_usd=usd_text(result.gpu_hour_usd),
        max_hourly_usd=usd_text(result.max_hourly_usd),
        on_demand_gpu_hour_usd=str(result.on_demand_gpu_hour_usd),
        reserved_gpu_hour_usd=None
        if result.reserved_gpu_hour_usd is None
        else usd_text(result.reserved_gpu_hour_usd),
        reserved_discount=None if result.reserved_discount is None else str(result.reserved_discount),
        gpu_count=result.gpu_count,
        within_max_hourly_cost=None if ceiling is None else result.max_hourly_usd <= ceiling,
    )
    return JSONResponse(out.model_dump(mode="json"))


def _aware(moment: datetime | None) -> datetime | None:
    return None if moment is None else ensure_utc(moment)
