"""Every kind of project-owned object declares how team scopes apply to it (backend.domain.scoping), and
the repository refuses a kind without one: a new table cannot be served unscoped by forgetting."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

import backend.store.billing_models
import backend.store.engine_models
import backend.store.models
import backend.store.quota_models  # noqa: F401  (every table registered on the one metadata)
from backend.domain.access import Scope
from backend.domain.errors import ApiError
from backend.domain.scoping import DECLARATIONS, Rule, UndeclaredKind, check_writable, declaration_of, visible
from backend.store import repository, scoping
from backend.store.base import Base
from backend.store.billing_models import Budget, CapacityReservation, UsageRecord
from backend.store.models import Cluster, Project, SecurityGroup

NLP = Scope("team", "nlp")


def _project_owned() -> set[str]:
    return {table.name for table in Base.metadata.tables.values() if "project_id" in table.columns}


def test_scoping_every_project_owned_table_declares_its_rule() -> None:
    missing = _project_owned() - set(DECLARATIONS)
    assert not missing, f"declare how team scopes apply to {sorted(missing)} in backend/domain/scoping.py"
    assert set(DECLARATIONS) <= _project_owned()  # no declaration outlives its table


def test_scoping_team_label_tables_have_labels_and_budgets_a_label_filter() -> None:
    for name, declared in DECLARATIONS.items():
        columns = Base.metadata.tables[name].columns
        if declared.rule is Rule.TEAM_LABEL:
            assert "labels" in columns, name
        if declared.rule is Rule.LABEL_FILTER:
            assert {"label_key", "label_value"} <= set(columns.keys()), name
        if declared.shared_flag is not None:
            assert declared.shared_flag in columns and declared.shared_why, name


def test_scoping_repository_refuses_undeclared_kinds_and_records() -> None:
    for model in (Project, UsageRecord):
        with pytest.raises(UndeclaredKind):
            repository.owned_select(model, project_id="prj_1", scope=None)  # type: ignore[type-var]
        with pytest.raises(UndeclaredKind):
            repository.get_owned(Session(), model, kind="project", project_id="prj_1", row_id="prj_1",  # type: ignore[type-var]
                                 field="id", scope=None)
    with pytest.raises(UndeclaredKind):
        declaration_of("a_new_table")


def test_scoping_default_group_is_read_by_every_team_and_written_unscoped_only() -> None:
    declared = repository.declaration(SecurityGroup)
    assert visible(declared, NLP, labels={}, shared=True)
    assert not visible(declared, NLP, labels={}, shared=False)
    check_writable(declared, None, shared=True)
    check_writable(declared, NLP, shared=False)  # the team's own group
    with pytest.raises(ApiError) as refused:
        check_writable(declared, NLP, shared=True)
    assert (refused.value.status, refused.value.code) == (403, "out_of_scope")


def test_scoping_budgets_by_label_filter_and_reservations_by_labels() -> None:
    budget, reservation = repository.declaration(Budget), repository.declaration(CapacityReservation)
    assert visible(budget, NLP, label_filter=("team", "nlp"))
    assert not visible(budget, NLP, label_filter=(None, None))
    assert not visible(budget, NLP, label_filter=("team", "cv"))
    assert visible(budget, None, label_filter=("team", "cv"))
    assert visible(reservation, NLP, labels={"team": "nlp"})
    assert not visible(reservation, NLP, labels={})


BACKEND = Path(__file__).resolve().parents[2] / "backend"
# Modules outside backend/store still building a labels-scope clause themselves, and why. Each entry is
# a debt: switch it to the store's declared filters (`owned_select`, `declared_filter`, `record_filter`).
PENDING = {
    "billing/reports.py": "usage lines: scope_filter(UsageRecord.labels, s) -> record_filter(UsageRecord, s)",
}


def _mentions_scope(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Name) and "scope" in n.id.lower() for n in ast.walk(node))


def _builds_scope_clause(node: ast.AST) -> bool:
    """Whether `node` names `scope_filter` or subscripts a `labels` column by a scope
    (`X.labels[scope.key]`)."""
    if isinstance(node, ast.ImportFrom):
        return any(alias.name == "scope_filter" for alias in node.names)
    if isinstance(node, ast.Name):
        return node.id == "scope_filter"
    if isinstance(node, ast.Attribute):
        return node.attr == "scope_filter"
    return (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute)
            and node.value.attr == "labels" and _mentions_scope(node.slice))


def _own_scope_clauses(tree: ast.AST) -> list[int]:
    nodes = (node for node in ast.walk(tree) if isinstance(node, ast.stmt | ast.expr))
    return sorted({node.lineno for node in nodes if _builds_scope_clause(node)})


def test_scoping_no_module_outside_the_store_builds_its_own_scope_clause() -> None:
    """Every query of a project-owned kind goes through the declaration: a list that filters `labels` by
    the key's scope itself would keep working for one kind and silently miss the next rule change."""
    found = {}
    for path in sorted(BACKEND.rglob("*.py")):
        relative = path.relative_to(BACKEND).as_posix()
        if relative.startswith("store/"):
            continue
        lines = _own_scope_clauses(ast.parse(path.read_text(), str(path)))
        if lines:
            found[relative] = lines
    unexpected = {name: lines for name, lines in found.items() if name not in PENDING}
    assert not unexpected, f"use backend.store's owned_select/declared_filter/record_filter: {unexpected}"
    assert set(PENDING) <= set(found), f"no longer pending, remove from PENDING: {set(PENDING) - set(found)}"


def test_scoping_the_scan_sees_a_hand_built_scope_clause() -> None:
    hand_built = "q = select(Volume).where(Volume.labels[scope.key].as_string() == scope.value)\n"
    assert _own_scope_clauses(ast.parse(hand_built)) == [1]
    assert _own_scope_clauses(ast.parse("from backend.store.scoping import scope_filter\n")) == [1]
    assert _own_scope_clauses(ast.parse("value = cluster.labels[key]\n")) == []


def test_scoping_record_filter_only_for_records_carrying_labels() -> None:
    assert "labels" in str(scoping.record_filter(UsageRecord, NLP))
    with pytest.raises(ValueError):
        scoping.record_filter(Cluster, NLP)  # an object: owned_select/declared_filter apply its rule
