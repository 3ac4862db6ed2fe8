"""Every kind of project-owned object declares how team scopes apply to it (backend.domain.scoping), and
the repository refuses a kind without one: a new table cannot be served unscoped by forgetting."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session

import backend.store.billing_models
import backend.store.engine_models
import backend.store.models
import backend.store.quota_models  # noqa: F401  (every table registered on the one metadata)
from backend.domain.access import Scope
from backend.domain.errors import ApiError
from backend.domain.scoping import DECLARATIONS, Rule, UndeclaredKind, check_writable, declaration_of, visible
from backend.store import repository
from backend.store.base import Base
from backend.store.billing_models import Budget, CapacityReservation, UsageRecord
from backend.store.models import Project, SecurityGroup

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
