"""What a failed statement says about a race, read from the driver: SQLite's extended result codes and
messages, PostgreSQL's SQLSTATE and diagnostics. The unit of work decides what to answer."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from sqlalchemy import UniqueConstraint
from sqlalchemy.exc import DBAPIError

from backend.store import models  # noqa: F401  (registers the core tables in the metadata)
from backend.store.base import Base

Kind = Literal["unique", "foreign_key", "transient", "lock_timeout", "other"]

_SQLITE_KINDS: dict[str, Kind] = {
    "SQLITE_CONSTRAINT_UNIQUE": "unique",
    "SQLITE_CONSTRAINT_PRIMARYKEY": "unique",
    "SQLITE_CONSTRAINT_FOREIGNKEY": "foreign_key",
}
_POSTGRES_KINDS: dict[str, Kind] = {
    "23505": "unique",  # unique_violation
    "23503": "foreign_key",  # foreign_key_violation
    "40P01": "transient",  # deadlock_detected
    "40001": "transient",  # serialization_failure
    "55P03": "lock_timeout",  # lock_not_available
}
_SQLITE_UNIQUE_MESSAGE = re.compile(r"UNIQUE constraint failed: (.+)$")
_SQLITE_DELETE = re.compile(r'\s*DELETE\s+FROM\s+"?(\w+)"?', re.IGNORECASE)
_POSTGRES_ON_TABLE = re.compile(r'on table "([^"]+)"\s*$')


@dataclass(frozen=True)
class DbFailure:
    """One failed statement: its kind, the constraint when the driver names it, and for a foreign key
    whether a delete hit a row still referenced (`referenced_by`: the referencing table, when known)."""

    kind: Kind
    summary: str
    constraint: str | None = None
    deleting_referenced: bool = False
    referenced_by: str | None = None


def classify(error: DBAPIError) -> DbFailure:
    """What `error` is (anything not listed above is "other")."""
    driver_error = error.orig
    lines = str(driver_error).strip().splitlines()
    summary = lines[0] if lines else type(driver_error).__name__
    sqlstate = getattr(driver_error, "sqlstate", None)
    if sqlstate is not None:
        return _postgres(driver_error, str(sqlstate), summary)
    kind = _SQLITE_KINDS.get(str(getattr(driver_error, "sqlite_errorname", "")), "other")
    if kind == "unique":
        return DbFailure(kind, summary, constraint=_sqlite_unique_constraint(summary))
    if kind == "foreign_key":
        deleted = _SQLITE_DELETE.match(error.statement or "")
        if deleted is None:
            return DbFailure(kind, summary)
        return DbFailure(kind, summary, deleting_referenced=True,
                         referenced_by=_restricting_table(deleted.group(1)))
    return DbFailure(kind, summary)


def _postgres(driver_error: object, sqlstate: str, summary: str) -> DbFailure:
    kind = _POSTGRES_KINDS.get(sqlstate, "other")
    diag = getattr(driver_error, "diag", None)
    constraint = getattr(diag, "constraint_name", None)
    if kind != "foreign_key":
        return DbFailure(kind, summary, constraint=constraint)
    primary = str(getattr(diag, "message_primary", None) or summary)
    # "update or delete on table "volumes" violates foreign key constraint ... on table "cluster_volumes""
    deleting = primary.startswith("update or delete")
    match = _POSTGRES_ON_TABLE.search(primary)
    return DbFailure(kind, summary, constraint=constraint, deleting_referenced=deleting,
                     referenced_by=match.group(1) if deleting and match else None)


def _sqlite_unique_constraint(summary: str) -> str | None:
    """SQLite names the columns ("UNIQUE constraint failed: ssh_keys.project_id, ssh_keys.fingerprint"),
    not the constraint: find the constraint of the metadata on those columns."""
    match = _SQLITE_UNIQUE_MESSAGE.search(summary)
    if match is None:
        return None
    qualified = [part.strip() for part in match.group(1).split(",")]
    tables = {part.split(".", 1)[0] for part in qualified}
    if len(tables) != 1:
        return None
    table = Base.metadata.tables.get(tables.pop())
    if table is None:
        return None
    columns = [part.split(".", 1)[1] for part in qualified]
    candidates = [c for c in table.constraints if isinstance(c, UniqueConstraint)] + [
        i for i in table.indexes if i.unique
    ]
    for candidate in candidates:
        if [column.name for column in candidate.columns] == columns and isinstance(candidate.name, str):
            return candidate.name
    return None


def _restricting_table(referenced: str) -> str | None:
    """SQLite does not say which reference stopped a delete: the first table (by name) whose foreign key
    to `referenced` does not cascade is the one that can."""
    for table in sorted(Base.metadata.tables.values(), key=lambda t: t.name):
        for key in table.foreign_keys:
            if key.column.table.name == referenced and (key.ondelete or "").upper() not in ("CASCADE",
                                                                                               "SET NULL"):
                return table.name
    return None
