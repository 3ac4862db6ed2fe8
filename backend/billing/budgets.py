"""Budgets: a monthly USD amount for a project, or for its clusters with one label (`team=nlp`).

The metering job checks every budget after each pass: the spend of the month so far (charged usage lines
of the matching clusters, or of the whole project without a label filter) against each alert threshold;
a threshold crossed records one alert per month (a unique row: never twice, however often the job runs)
and an audit event `billing.budget_threshold_crossed`. At 100 % a budget with action `block_new` makes
cluster creates that match its filter answer 402 `budget_exceeded` naming the budget, until the month
ends or the amount is raised; it also refuses a relabel into its team and a scale-up or autoscaling
minimum raise under it. Spend is read from each line's own labels (its object's when it was charged), as
in chargeback: volumes, reserved IPs and reservations reach their team, and a relabel moves no past spend.

A budget's label filter is also its team (backend.domain.scoping): a team-scoped key sees and manages
only the budgets filtered on its scope label, and what it creates or changes stays filtered on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from backend.billing import actions
from backend.billing.invoices import month_bounds, month_of
from backend.billing.money import micros_to_usd
from backend.domain.access import Scope
from backend.domain.errors import ApiError
from backend.domain.ids import new_id
from backend.store.billing_models import Budget, BudgetAlert, UsageRecord
from backend.store.repository import (
    check_if_match,
    get_owned,
    keyset_page,
    owned_select,
    scoped_label_filter,
    touch,
)

NOTIFY, BLOCK_NEW = "notify", "block_new"
DEFAULT_THRESHOLDS = (50, 80, 100)
KIND = "budget"


class BudgetExceeded(ApiError):
    status, code, title = 402, "budget_exceeded", "Payment Required"


@dataclass(frozen=True)
class BudgetSpec:
    name: str
    amount_micros: int
    label_key: str | None
    label_value: str | None
    thresholds: list[int]
    action: str


def create_budget(
    *, session: Session, project_id: str, spec: BudgetSpec, now: datetime, scope: Scope | None
) -> Budget:
    """Store a budget (checked from the next metering pass; admission at once); a scoped caller's is
    filtered on its scope label (403 `out_of_scope` for another label)."""
    row = Budget(id=new_id(KIND), project_id=project_id, generation=1, created_at=now, updated_at=now)
    _apply(row, _scoped(spec, scope))
    session.add(row)
    session.flush()
    return row


def get_budget(
    *, session: Session, project_id: str, budget_id: str, scope: Scope | None, for_update: bool = False
) -> Budget:
    """One of the project's budgets within the caller's scope; 404 naming budget_id otherwise."""
    return get_owned(
        session,
        Budget,
        kind=KIND,
        project_id=project_id,
        row_id=budget_id,
        field="budget_id",
        for_update=for_update,
        scope=scope,
    )


def list_budgets(
    *, session: Session, project_id: str, after_id: str | None, limit: int, scope: Scope | None
) -> tuple[Sequence[Budget], bool]:
    """A page of the project's budgets within the caller's scope, oldest first."""
    query = owned_select(Budget, project_id=project_id, scope=scope)
    return keyset_page(session, query, Budget.id, after_id=after_id, limit=limit)


def update_budget(
    *,
    session: Session,
    project_id: str,
    budget_id: str,
    changes: Mapping[str, Any],
    if_match: str | None,
    scope: Scope | None,
) -> Budget:
    """Change any of the budget's settings (absent fields keep their value)."""
    row = get_budget(
        session=session, project_id=project_id, budget_id=budget_id, for_update=True, scope=scope
    )
    check_if_match(if_match, row)
    current = spec_of(row)
    merged = _scoped(BudgetSpec(**{**vars(current), **changes}), scope)
    if merged != current:
        _apply(row, merged)
        touch(row)
    return row


def delete_budget(
    *, session: Session, project_id: str, budget_id: str, if_match: str | None, scope: Scope | None
) -> None:
    """Delete the budget and its alerts."""
    row = get_budget(
        session=session, project_id=project_id, budget_id=budget_id, for_update=True, scope=scope
    )
    check_if_match(if_match, row)
    session.query(BudgetAlert).filter(BudgetAlert.budget_id == row.id).delete()
    session.delete(row)


def spec_of(row: Budget) -> BudgetSpec:
    return BudgetSpec(
        name=row.name,
        amount_micros=row.amount_micros,
        label_key=row.label_key,
        label_value=row.label_value,
        thresholds=list(row.thresholds),
        action=row.action,
    )


def _scoped(spec: BudgetSpec, scope: Scope | None) -> BudgetSpec:
    """`spec` with the label filter a caller of `scope` may give a budget (its own; 403 otherwise)."""
    requested = None if spec.label_key is None else (spec.label_key, spec.label_value or "")
    kept = scoped_label_filter(requested, scope)
    if kept == requested:
        return spec
    assert kept is not None
    return BudgetSpec(**{**vars(spec), "label_key": kept[0], "label_value": kept[1]})


def _apply(row: Budget, spec: BudgetSpec) -> None:
    row.name, row.amount_micros, row.action = spec.name, spec.amount_micros, spec.action
    row.label_key, row.label_value = spec.label_key, spec.label_value
    row.thresholds = sorted(set(spec.thresholds))


def month_spend_micros(session: Session, budget: Budget, now: datetime) -> int:
    """What the lines labelled for the budget (or the whole project's) were charged this month so far."""
    start, end = month_bounds(month_of(now))
    query = select(func.coalesce(func.sum(UsageRecord.amount_micros), 0)).where(
        UsageRecord.project_id == budget.project_id,
        UsageRecord.period_start >= start,
        UsageRecord.period_start < end,
    )
    if budget.label_key is not None:
        label = UsageRecord.labels[budget.label_key].as_string()
        query = query.where(label.is_(None) if budget.label_value is None else label == budget.label_value)
    return int(session.scalar(query) or 0)


def _matches(labels: Mapping[str, str], key: str | None, value: str | None) -> bool:
    return key is None or labels.get(key) == value


def alerts_of(session: Session, budget_id: str) -> list[BudgetAlert]:
    query = select(BudgetAlert).where(BudgetAlert.budget_id == budget_id)
    return list(session.scalars(query.order_by(BudgetAlert.period, BudgetAlert.threshold)))


def check_budgets(session: Session, *, project_id: str, now: datetime) -> int:
    """Record every threshold the project's budgets crossed this month and not alerted yet (one alert
    and one audit event each); returns how many were raised."""
    period = month_of(now)
    raised = 0
    for budget in session.scalars(select(Budget).where(Budget.project_id == project_id)):
        spent = month_spend_micros(session, budget, now)
        done = set(
            session.scalars(
                select(BudgetAlert.threshold).where(
                    BudgetAlert.budget_id == budget.id, BudgetAlert.period == period
                )
            )
        )
        for threshold in budget.thresholds:
            if threshold in done or spent * 100 < budget.amount_micros * threshold:
                continue
            try:
                with session.begin_nested():
                    session.add(
                        BudgetAlert(
                            budget_id=budget.id,
                            period=period,
                            threshold=threshold,
                            spent_micros=spent,
                            raised_at=now,
                        )
                    )
                    session.flush()
            except IntegrityError:
                continue  # a concurrent pass raised it
            raised += 1
            actions.record_audit(
                session,
                project_id=project_id,
                action="billing.budget_threshold_crossed",
                resource_type="budget",
                resource_id=budget.id,
                at=now,
                details={
                    "budget": budget.name,
                    "period": period,
                    "threshold_percent": threshold,
                    "spent_usd": str(micros_to_usd(spent)),
                    "amount_usd": str(micros_to_usd(budget.amount_micros)),
                    "action": budget.action,
                },
            )
    return raised


def check_budget_admission(
    session: Session,
    *,
    project_id: str,
    labels: Mapping[str, str],
    now: datetime,
    what: str = "new clusters are refused",
    previous_labels: Mapping[str, str] | None = None,
) -> None:
    """402 `budget_exceeded` when a `block_new` budget whose filter `labels` match is spent (`what`: the
    refused change, for the message). With `previous_labels` (a relabel) only budgets the cluster did
    not fall under before count: moving into a blocked team is refused, leaving one is not."""
    query = select(Budget).where(Budget.project_id == project_id, Budget.action == BLOCK_NEW)
    for budget in session.scalars(query.order_by(Budget.id)):
        if not _matches(labels, budget.label_key, budget.label_value):
            continue
        if previous_labels is not None and _matches(previous_labels, budget.label_key, budget.label_value):
            continue
        spent = month_spend_micros(session, budget, now)
        if spent < budget.amount_micros:
            continue
        scope = f" for {budget.label_key}={budget.label_value}" if budget.label_key else ""
        raise BudgetExceeded(
            f"budget {budget.name!r} ({budget.id}) of {micros_to_usd(budget.amount_micros)} USD a month"
            f"{scope} is spent ({micros_to_usd(spent)} USD in {month_of(now)}) and its action is block_new: "
            f"{what} until the month ends; raise its amount_usd or set action = notify",
            field="budget_id",
            extra={
                "budget_id": budget.id,
                "spent_usd": str(micros_to_usd(spent)),
                "amount_usd": str(micros_to_usd(budget.amount_micros)),
            },
        )
