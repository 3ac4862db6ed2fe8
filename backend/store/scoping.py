"""Team scopes in queries: the WHERE clauses keeping the rows a key's scope sees, per declared rule."""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, and_, false, or_, true

from backend.domain.access import Scope
from backend.domain.scoping import Declaration, Rule


def scope_filter(labels: Any, scope: Scope | None) -> ColumnElement[bool]:
    """Rows of a `labels` JSON column within `scope`; every row when unscoped (SQLite and PostgreSQL)."""
    if scope is None:
        return true()
    clause: ColumnElement[bool] = labels[scope.key].as_string() == scope.value
    return clause


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
