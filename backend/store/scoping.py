"""Team scopes in queries: the WHERE clauses keeping the rows a key's scope sees, per declared rule."""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, and_, false, or_, true

from backend.domain.access import Scope
from backend.domain.scoping import Declaration, Rule, declaration_of


def scope_filter(labels: Any, scope: Scope | None) -> ColumnElement[bool]:
    """Rows of a `labels` JSON column within `scope`; every row when unscoped (SQLite and PostgreSQL).
    For the store only: queries elsewhere go through `declared_filter`/`owned_select` or `record_filter`
    (tests/backend/test_scoping_declarations.py checks). Public until billing.reports, its last user
    outside the store, moves to `record_filter`; then it becomes `_scope_filter`."""
    if scope is None:
        return true()
    clause: ColumnElement[bool] = labels[scope.key].as_string() == scope.value
    return clause


def record_filter(model: Any, scope: Scope | None) -> ColumnElement[bool]:
    """The rows of a RECORD table (usage lines, events) a key of `scope` sees: those carrying the team
    label of the object they name, copied when written (so a deleted object's records keep their team)."""
    declared = declaration_of(model.__tablename__)
    if declared.rule is not Rule.RECORD or "labels" not in model.__table__.columns:
        raise ValueError(f"{model.__tablename__!r} is not a record carrying its object's labels")
    return scope_filter(model.labels, scope)


def declared_filter(model: Any, declaration: Declaration, scope: Scope | None) -> ColumnElement[bool]:
    """The rows of `model` a key of `scope` sees under `declaration` (see backend.domain.scoping)."""
    if scope is None or declaration.rule is Rule.PROJECT:
        return true()
    if declaration.rule is Rule.TEAM_LABEL:
        clause = scope_filter(model.labels, scope)
        if declaration.shared_flag is not None:
            clause = or_(clause, getattr(model, declaration.shared_flag).is_(True))
        return clause
    if declaration.rule is Rule.LABEL_FILTER:
        return and_(model.label_key == scope.key, model.label_value == scope.value)
    return false()
