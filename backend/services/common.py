"""Helpers shared by the resource services: owned-row lookup, If-Match, generations, keyset pages."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeVar

from sqlalchemy import Select
from sqlalchemy.orm import InstrumentedAttribute, Session
from sqlalchemy.orm.interfaces import ORMOption

from backend.domain.access import Scope
from backend.domain.errors import Forbidden, NotFound, PreconditionFailed
from backend.domain.etags import etag_for, if_match_satisfied
from backend.domain.ids import is_id_of
from backend.services.clock import utcnow


class OwnedRow(Protocol):
    """A project-owned row; team-owned ones (clusters, volumes, SSH keys) also have `labels`."""

    id: Any
    project_id: Any
    generation: Any
    updated_at: Any


Row = TypeVar("Row", bound=OwnedRow)


def get_owned(
    session: Session,
    model: type[Row],
    *,
    kind: str,
    project_id: str,
    row_id: str,
    field: str,
    for_update: bool = False,
    options: Sequence[ORMOption] = (),
    scope: Scope | None = None,
) -> Row:
    """The row with `row_id` in the caller's project (and team scope); 404 naming `field` otherwise
    (other projects and other teams too)."""
    label = kind.replace("_", " ")
    if not is_id_of(kind, row_id):
        raise NotFound(f"no {label} with id {row_id[:64]!r}", field=field)
    row = session.get(model, row_id, with_for_update=for_update, options=options)
    if row is None or row.project_id != project_id or not in_scope(scope, getattr(row, "labels", None)):
        raise NotFound(f"no {label} with id {row_id!r}", field=field)
    return row


def scoped_labels(labels: Mapping[str, str], scope: Scope | None) -> dict[str, str]:
    """The labels a scoped caller's cluster gets: its scope label added when absent; another value for
    that label is refused (403 naming it), so a team key cannot hand a cluster to another team."""
    if scope is None or labels.get(scope.key) == scope.value:
        return dict(labels)
    if scope.key not in labels:
        return {**labels, scope.key: scope.value}
    raise Forbidden(
        f"this API key is scoped to {scope}: labels.{scope.key} must be {scope.value!r} (or left out, "
        "and it is set to that)",
        field=f"labels.{scope.key}",
        code="out_of_scope",
    )


def in_scope(scope: Scope | None, labels: Any) -> bool:
    """Whether a resource with `labels` is visible to a key of `scope` (None: unscoped, sees all)."""
    return scope is None or scope.matches(labels)


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
