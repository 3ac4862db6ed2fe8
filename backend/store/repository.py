"""The repository of a project's objects: every lookup, list and reference applies the kind's declared
team scoping (backend.domain.scoping), so a kind without a declaration can be neither read nor written
here (`UndeclaredKind`); plus the generic helpers of writes (If-Match, generations, keyset pages).

Scope answers: a row the key's scope does not see is 404, exactly as another project's (nothing says it
exists); a project-wide row it sees but may not change is 403 `out_of_scope` naming why.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any, Protocol, TypeVar

from sqlalchemy import Select, select
from sqlalchemy.orm import InstrumentedAttribute, Session
from sqlalchemy.orm.interfaces import ORMOption

from backend.domain.access import Scope
from backend.domain.clock import utcnow
from backend.domain.errors import NotFound, PreconditionFailed
from backend.domain.etags import etag_for, if_match_satisfied
from backend.domain.ids import is_id_of
from backend.domain.scoping import (
    Declaration,
    UndeclaredKind,
    check_writable,
    in_scope,
    scoped_label_filter,
    scoped_labels,
    served,
    visible,
)
from backend.store.scoping import declared_filter

__all__ = [
    "UndeclaredKind",
    "check_create",
    "check_if_match",
    "declaration",
    "get_owned",
    "in_scope",
    "keyset_page",
    "owned_select",
    "referenced",
    "scoped_label_filter",
    "scoped_labels",
    "touch",
]


class OwnedRow(Protocol):
    """A project-owned row; team-owned ones also have `labels`, budgets `label_key`/`label_value`."""

    id: Any
    project_id: Any
    generation: Any
    updated_at: Any


class ProjectRow(Protocol):
    id: Any
    project_id: Any


Row = TypeVar("Row", bound=ProjectRow)


def declaration(model: type[Any]) -> Declaration:
    """The scoping declaration of `model`'s table; UndeclaredKind for undeclared tables and records."""
    return served(model.__tablename__)


def _shared(declared: Declaration, row: Any) -> bool:
    return declared.shared_flag is not None and bool(getattr(row, declared.shared_flag))


def _visible(declared: Declaration, row: Any, scope: Scope | None) -> bool:
    return visible(
        declared,
        scope,
        labels=getattr(row, "labels", None),
        label_filter=(getattr(row, "label_key", None), getattr(row, "label_value", None)),
        shared=_shared(declared, row),
    )


def owned_select(model: type[Row], *, project_id: str, scope: Scope | None) -> Select[Any]:
    """The query of the project's rows of `model` that a key of `scope` sees."""
    declared = declaration(model)
    return select(model).where(model.project_id == project_id, declared_filter(model, declared, scope))


def get_owned(
    session: Session,
    model: type[Row],
    *,
    kind: str,
    project_id: str,
    row_id: str,
    field: str,
    scope: Scope | None,
    for_update: bool = False,
    write: bool = False,
    options: Sequence[ORMOption] = (),
) -> Row:
    """The row with `row_id` in the caller's project that its scope sees; 404 naming `field` otherwise
    (other projects and other teams alike). `write`: the caller is about to change or delete it (403
    `out_of_scope` for a project-wide row and a scoped key)."""
    declared = declaration(model)
    label = kind.replace("_", " ")
    if not is_id_of(kind, row_id):
        raise NotFound(f"no {label} with id {row_id[:64]!r}", field=field)
    row = session.get(model, row_id, with_for_update=for_update, options=options)
    if row is None or row.project_id != project_id or not _visible(declared, row, scope):
        raise NotFound(f"no {label} with id {row_id!r}", field=field)
    if write:
        check_writable(declared, scope, shared=_shared(declared, row))
    return row


def referenced(
    session: Session,
    model: type[Row],
    ids: Collection[str],
    *,
    project_id: str,
    scope: Scope | None,
    kept: Collection[str] = (),
) -> list[Row]:
    """The rows of `ids` an object of the caller may reference: in its project and seen by its scope, or
    referenced already (`kept`: a scoped key may keep what an unscoped one attached)."""
    declared = declaration(model)
    if not ids:
        return []
    rows = session.scalars(select(model).where(model.id.in_(list(ids)), model.project_id == project_id))
    return [row for row in rows if row.id in kept or _visible(declared, row, scope)]


def check_create(model: type[Any], scope: Scope | None) -> None:
    """403 `out_of_scope` when a scoped key would create a project-wide object of `model`."""
    check_writable(declaration(model), scope)


def check_if_match(if_match: str | None, row: OwnedRow) -> None:
    """412 when an If-Match header names another version of `row`."""
    current = etag_for(row.generation)
    if not if_match_satisfied(if_match, current):
        raise PreconditionFailed(
            f"the resource changed: its ETag is now {current}; read it again and retry",
            field="If-Match",
            code="etag_mismatch",
        )


def touch(row: OwnedRow) -> None:
    """Record a change of the declared state: new generation (so a new ETag) and updated_at."""
    row.generation = row.generation + 1
    row.updated_at = utcnow()


def keyset_page(
    session: Session,
    query: Select[Any],
    id_column: InstrumentedAttribute[str],
    *,
    after_id: str | None,
    limit: int,
) -> tuple[Sequence[Any], bool]:
    """Rows of `query` after `after_id` in id order, at most `limit`, and whether more follow."""
    if after_id is not None:
        query = query.where(id_column > after_id)
    rows = session.scalars(query.order_by(id_column).limit(limit + 1)).all()
    return rows[:limit], len(rows) > limit
