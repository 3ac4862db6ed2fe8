"""Team scopes in queries: a WHERE clause keeping the rows whose labels carry a key's scope label."""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, true

from backend.domain.access import Scope


def scope_filter(labels: Any, scope: Scope | None) -> ColumnElement[bool]:
    """Rows of a `labels` JSON column within `scope`; every row when unscoped (SQLite and PostgreSQL)."""
    if scope is None:
        return true()
    clause: ColumnElement[bool] = labels[scope.key].as_string() == scope.value
    return clause
