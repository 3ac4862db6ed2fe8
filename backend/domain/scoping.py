"""How every kind of project-owned object is scoped to API keys' teams: the one declaration.

A key with a team scope (`team=nlp`, `backend.domain.access.Scope`) works inside its team; a key without
one works on the whole project. Each table holding a project's rows declares one rule, and the store's
repository (`backend.store.repository`) applies it to every lookup, list and reference, so a kind that
forgot its rule cannot be read or written at all (`UndeclaredKind`).

- TEAM_LABEL: the row's `labels` name its team. A scoped key sees, changes and references only rows
  labelled with its scope label (others are 404, as another project's), and what it creates gets it.
  `shared_flag` names a boolean column whose rows are project-wide instead (the default security group).
- LABEL_FILTER: budgets. The budget's label filter is its team: a scoped key sees and manages only the
  budgets filtered on its own scope label, and what it creates is filtered on it.
- PROJECT: project-wide objects every key of the project reads; only unscoped keys change them.
- UNSCOPED: only unscoped keys read or write them (credits).
- RECORD: records about other objects (usage lines, events, audit, idempotency). They are never served
  as objects of their own: their views scope them through the object they name, and the repository
  refuses them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from backend.domain.access import Scope
from backend.domain.errors import Forbidden


class Rule(StrEnum):
    TEAM_LABEL = "team_label"
    LABEL_FILTER = "label_filter"
    PROJECT = "project"
    UNSCOPED = "unscoped"
    RECORD = "record"


@dataclass(frozen=True)
class Declaration:
    """A kind's scoping: its rule, what it is called, and why scoped keys may not write a shared row."""

    rule: Rule
    noun: str
    shared_flag: str | None = None
    shared_why: str = ""


class UndeclaredKind(LookupError):
    """A table with no declaration (or a RECORD) was read or written as an object: a programming error."""


_TEAM_OWNED = {
    "clusters": "cluster",
    "volumes": "volume",
    "ssh_keys": "SSH key",
    "reserved_ips": "reserved IP",
    "capacity_reservations": "reservation",
    "host_pools": "host pool",
}
_RECORDS = (
    "idempotency_records",  # replayed only to a key of the same scope (services.idempotency)
    "audit_events",
    "billing_usage_records",  # usage lines: scoped by the labels each carries (billing.reports)
    "billing_reservations",  # a cluster's reserved term: scoped through the cluster
    "billing_credit_holds",
    "billing_settled_clusters",
    "reserved_ip_events",
    "volume_events",
    "engine_node_transitions",
)

# Table name -> declaration. A new project-owned table must be added here (a test checks every one is).
DECLARATIONS: Mapping[str, Declaration] = {
    **{table: Declaration(Rule.TEAM_LABEL, noun) for table, noun in _TEAM_OWNED.items()},
    "security_groups": Declaration(
        Rule.TEAM_LABEL,
        "security group",
        shared_flag="is_default",
        shared_why="the project's default security group is the firewall of every team's clusters that "
        "name no group",
    ),
    "billing_budgets": Declaration(Rule.LABEL_FILTER, "budget"),
    "project_quotas": Declaration(
        Rule.PROJECT, "quota", shared_why="quotas hold for the whole project, whatever the team"
    ),
    "billing_accounts": Declaration(
        Rule.PROJECT, "billing account", shared_why="the billing account is the whole project's"
    ),
    "billing_invoices": Declaration(Rule.PROJECT, "invoice", shared_why="invoices are the whole project's"),
    "billing_ledger_entries": Declaration(
        Rule.UNSCOPED, "credit grant", shared_why="credits are the whole project's balance"
    ),
    "api_keys": Declaration(
        Rule.UNSCOPED, "API key", shared_why="API keys are managed for the whole project"
    ),
    **{table: Declaration(Rule.RECORD, table) for table in _RECORDS},
}


def declaration_of(table: str) -> Declaration:
    """The declaration of `table`; UndeclaredKind when it has none."""
    found = DECLARATIONS.get(table)
    if found is None:
        raise UndeclaredKind(f"table {table!r} declares no scoping rule (backend/domain/scoping.py)")
    return found


def served(table: str) -> Declaration:
    """The declaration of a table served as objects; UndeclaredKind for undeclared tables and records."""
    found = declaration_of(table)
    if found.rule is Rule.RECORD:
        raise UndeclaredKind(f"{table!r} holds records, not objects: scope it through what it names")
    return found


def in_scope(scope: Scope | None, labels: object) -> bool:
    """Whether a resource with `labels` is visible to a key of `scope` (None: unscoped, sees all)."""
    return scope is None or scope.matches(labels if isinstance(labels, Mapping) else None)


def visible(
    declaration: Declaration,
    scope: Scope | None,
    *,
    labels: object = None,
    label_filter: tuple[str | None, str | None] = (None, None),
    shared: bool = False,
) -> bool:
    """Whether a key of `scope` sees a row (`labels` for TEAM_LABEL, `label_filter` for LABEL_FILTER)."""
    if scope is None or declaration.rule is Rule.PROJECT:
        return True
    if declaration.rule is Rule.TEAM_LABEL:
        return shared or scope.matches(labels if isinstance(labels, Mapping) else None)
    if declaration.rule is Rule.LABEL_FILTER:
        return label_filter == (scope.key, scope.value)
    return False  # UNSCOPED


def check_writable(declaration: Declaration, scope: Scope | None, *, shared: bool = False) -> None:
    """403 `out_of_scope` when a scoped key would change a project-wide row (or create a project-wide
    object); team rows it sees are its own, so those pass."""
    project_wide = declaration.rule in (Rule.PROJECT, Rule.UNSCOPED) or shared
    if scope is None or not project_wide:
        return
    raise Forbidden(
        f"this API key is scoped to {scope}: {declaration.shared_why}, so only an API key without a team "
        "scope may change it",
        field="Authorization",
        code="out_of_scope",
    )


def scoped_labels(labels: Mapping[str, str], scope: Scope | None) -> dict[str, str]:
    """The labels a scoped caller's object gets: its scope label added when absent; another value for
    that label is refused (403 naming it), so a team key cannot hand an object to another team."""
    if scope is None or labels.get(scope.key) == scope.value:
        return dict(labels)
    if scope.key not in labels:
        return {**labels, scope.key: scope.value}
    raise Forbidden(
        f"this API key is scoped to {scope} and cannot set {scope.key}={labels[scope.key]}: "
        f"labels.{scope.key} must be {scope.value!r} (or left out, and it is set to that); an API key "
        "without a team scope may hand objects to another team",
        field=f"labels.{scope.key}",
        code="out_of_scope",
    )


def scoped_label_filter(
    label_filter: tuple[str, str] | None, scope: Scope | None, *, field: str = "label_filter"
) -> tuple[str, str] | None:
    """The label filter a scoped caller's budget gets: its scope label when none is given; any other
    label (or none, for an unscoped caller only) is refused with 403 naming `field`."""
    if scope is None:
        return label_filter
    if label_filter is None or label_filter == (scope.key, scope.value):
        return (scope.key, scope.value)
    raise Forbidden(
        f"this API key is scoped to {scope}: a budget it manages must filter on {scope} (or leave "
        "label_filter out, and it is set to that)",
        field=field,
        code="out_of_scope",
    )
