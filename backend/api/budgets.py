"""/v1/budgets: monthly spending budgets with alert thresholds and an action at 100 %."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Annotated, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field, Strict
from sqlalchemy.orm import Session
from starlette.responses import Response

from backend.api.cluster_schemas import LabelKey, LabelValue
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
    money_text,
)
from backend.api.state import app_state
from backend.api.writes import WriteOutcome, run_write
from backend.billing import budgets
from backend.billing.invoices import month_of
from backend.billing.money import micros_to_usd, usd_to_micros
from backend.domain.clock import SystemClock
from backend.domain.etags import etag_for
from backend.store.billing_models import Budget

router = APIRouter(prefix="/v1/budgets", tags=["billing"])
KIND = "budget"
_clock = SystemClock()
# Strict(False): a JSON number or a plain decimal string (exact), never a boolean.
BudgetAmount = Annotated[
    Decimal,
    Strict(False),
    Field(
        gt=0,
        le=Decimal("1000000000"),
        max_digits=16,
        decimal_places=2,
        # Published for the provider's plan-time checks (JSON Schema has no keyword for them).
        json_schema_extra={"x-max-digits": 16, "x-decimal-places": 2},
    ),
    money_text(2),  # after Field: the constraints stay in the JSON Schema
]
Thresholds = Annotated[
    list[Annotated[int, Field(ge=1, le=1000)]],
    Field(min_length=1, max_length=10, description="Percent of the amount at which to alert"),
]
Action = Literal["notify", "block_new"]
ACTION_DOC = "At 100 %: notify (alert only) or block_new (cluster creates under the budget answer 402)"


class LabelFilter(StrictModel):
    key: LabelKey
    value: LabelValue


class BudgetCreate(StrictModel):
    name: str = Field(pattern=DISPLAY_NAME_PATTERN, max_length=128, description="Display name")
    amount_usd: BudgetAmount = Field(description="Monthly amount in USD (up to two decimals)")
    label_filter: LabelFilter | None = Field(
        default=None,
        description="Only clusters with this label (e.g. team = nlp); null: the whole project (for a "
        "team-scoped API key: its scope label, the only one it may set)",
    )
    thresholds: Thresholds = Field(default_factory=lambda: list(budgets.DEFAULT_THRESHOLDS))
    action: Action = Field(default="notify", description=ACTION_DOC)


class BudgetUpdate(StrictModel):
    """Partial update: absent fields keep their value; `label_filter: null` widens it to the project (a
    team-scoped key's budget stays on its scope label)."""

    name: str | None = Field(default=None, pattern=DISPLAY_NAME_PATTERN, max_length=128)
    amount_usd: BudgetAmount | None = None
    label_filter: LabelFilter | None = None
    thresholds: Thresholds | None = None
    action: Action | None = Field(default=None, description=ACTION_DOC)


class BudgetAlertOut(BaseModel):
    period: str = Field(description="YYYY-MM")
    threshold_percent: int
    spent_usd: str = Field(description="The month's spend when the threshold was crossed")
    raised_at: datetime


class BudgetOut(BaseModel):
    id: str
    name: str
    amount_usd: str = Field(description="Exact decimal string")
    label_filter: LabelFilter | None
    thresholds: list[int]
    action: str
    period: str = Field(description="The current month (YYYY-MM)")
    spent_usd: str = Field(description="Charged this month to the budget's clusters (or the project)")
    alerts: list[BudgetAlertOut] = Field(description="Each threshold crossing, once, oldest first")
    created_at: datetime
    updated_at: datetime


def to_out(session: Session, row: Budget) -> BudgetOut:
    now = _clock.now()
    label = None if row.label_key is None else LabelFilter(key=row.label_key, value=row.label_value or "")
    return BudgetOut(
        id=row.id,
        name=row.name,
        amount_usd=str(micros_to_usd(row.amount_micros)),
        label_filter=label,
        thresholds=list(row.thresholds),
        action=row.action,
        period=month_of(now),
        spent_usd=str(micros_to_usd(budgets.month_spend_micros(session, row, now))),
        alerts=[
            BudgetAlertOut(
                period=a.period,
                threshold_percent=a.threshold,
                spent_usd=str(micros_to_usd(a.spent_micros)),
                raised_at=a.raised_at,
            )
            for a in budgets.alerts_of(session, row.id)
        ],
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _spec_changes(body: BudgetCreate | BudgetUpdate, fields: set[str]) -> dict[str, object]:
    changes: dict[str, object] = {}
    for field in fields:
        value = getattr(body, field)
        if field == "label_filter":  # null widens the budget to the whole project
            changes["label_key"] = None if value is None else value.key
            changes["label_value"] = None if value is None else value.value
        elif value is None:
            continue  # absent or null: keeps its value
        elif field == "amount_usd":
            changes["amount_micros"] = usd_to_micros(value)
        else:
            changes[field] = value
    return changes


@router.post("", status_code=201, response_model=BudgetOut, responses=WRITE_ERRORS)
def create_budget(
    body: BudgetCreate, request: Request, principal: Writer, idempotency_key: IdempotencyKey = None
) -> Response:
    """Create a monthly budget; its alerts are raised by the metering job."""

    def operation(session: Session) -> WriteOutcome:
        fields = _spec_changes(body, set(BudgetCreate.model_fields))
        row = budgets.create_budget(
            session=session,
            project_id=principal.project_id,
            spec=budgets.BudgetSpec(**fields),  # type: ignore[arg-type]
            now=_clock.now(),
            scope=principal.scope,
        )
        return WriteOutcome(
            KIND, row.id, to_out(session, row), 201, etag_for(row.generation), f"/v1/budgets/{row.id}"
        )

    return run_write(request, principal, action="budget.create", operation=operation, body=body)


@router.get("", response_model=Page[BudgetOut], responses=READ_ERRORS)
def list_budgets(
    request: Request, principal: Reader, page_size: PageSize = None, page_token: PageToken = None
) -> Response:
    """The project's budgets (a team-scoped key: those filtered on its scope label), oldest first."""
    state = app_state(request)
    after_id, limit = page_args(state.settings, kind=KIND, page_size=page_size, page_token=page_token)
    with state.read_sessions() as session:
        rows, more = budgets.list_budgets(
            session=session, project_id=principal.project_id, scope=principal.scope, after_id=after_id,
            limit=limit,
        )
        page = Page[BudgetOut].model_validate(page_body(KIND, rows, more, lambda row: to_out(session, row)))
    return Response(page.model_dump_json(), media_type="application/json")


@router.get("/{budget_id}", response_model=BudgetOut, responses=READ_ERRORS)
def get_budget(budget_id: str, request: Request, principal: Reader) -> Response:
    """One budget with this month's spend and its alerts."""
    with app_state(request).read_sessions() as session:
        row = budgets.get_budget(
            session=session, project_id=principal.project_id, scope=principal.scope, budget_id=budget_id
        )
        return Response(
            to_out(session, row).model_dump_json(),
            media_type="application/json",
            headers={"ETag": etag_for(row.generation)},
        )


@router.patch("/{budget_id}", response_model=BudgetOut, responses=WRITE_ERRORS)
def update_budget(
    budget_id: str, body: BudgetUpdate, request: Request, principal: Writer, if_match: IfMatch = None
) -> Response:
    """Change the amount, filter, thresholds, action or name."""

    def operation(session: Session) -> WriteOutcome:
        row = budgets.update_budget(
            session=session,
            project_id=principal.project_id,
            budget_id=budget_id,
            changes=_spec_changes(body, body.model_fields_set),
            if_match=if_match,
            scope=principal.scope,
        )
        return WriteOutcome(KIND, row.id, to_out(session, row), 200, etag_for(row.generation))

    return run_write(request, principal, action="budget.update", operation=operation, body=body)


@router.delete("/{budget_id}", status_code=204, responses=WRITE_ERRORS)
def delete_budget(budget_id: str, request: Request, principal: Writer, if_match: IfMatch = None) -> Response:
    """Delete the budget and its alerts."""

    def operation(session: Session) -> WriteOutcome:
        budgets.delete_budget(
            session=session, project_id=principal.project_id, budget_id=budget_id, if_match=if_match,
            scope=principal.scope,
        )
        return WriteOutcome(KIND, budget_id, None, 204)

    return run_write(request, principal, action="budget.delete", operation=operation)
