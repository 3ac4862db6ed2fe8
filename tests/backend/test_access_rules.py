"""The access rules: what each role holds, and how a team scope is written and matched."""

from __future__ import annotations

import pytest

from backend.domain.access import ROLES, Permission, Scope, allows, fields_needing_manage, roles_with


def test_access_member_stays_an_alias_of_viewer_and_admin_holds_everything() -> None:
    assert ROLES == ("viewer", "member", "operator", "admin")
    assert [p for p in Permission if allows("member", p)] == [p for p in Permission if allows("viewer", p)]
    assert roles_with(Permission.OPERATE) == ["operator", "admin"]
    assert roles_with(Permission.MANAGE) == ["admin"]
    assert not allows("root", Permission.READ)  # an unknown role holds nothing


def test_access_operator_fields_are_the_day2_ones() -> None:
    assert fields_needing_manage(["node_count", "labels", "volume_ids", "remove_node_names"]) == []
    assert fields_needing_manage(["name", "node_count", "container"]) == ["container", "name"]


def test_access_scope_parses_label_equals_value_and_matches_labels() -> None:
    scope = Scope.parse("team=nlp")
    assert (scope.key, scope.value, str(scope)) == ("team", "nlp", "team=nlp")
    assert scope.matches({"team": "nlp", "x": "y"}) and not scope.matches({"team": "vision"})
    assert not scope.matches({}) and not scope.matches(None)
    assert Scope.parse("example.com/owner=ml-platform").as_labels() == {"example.com/owner": "ml-platform"}


@pytest.mark.parametrize("text", ["team", "team=", "=nlp", "Team=nlp", "team=n l p", "team=" + "x" * 64])
def test_access_scope_refuses_malformed_text_naming_the_form(text: str) -> None:
    with pytest.raises(ValueError, match=r"LABEL=VALUE, e\.g\. team=nlp"):
        Scope.parse(text)
