"""Value helpers: equality (set-aware, number-aware), unknown detection, paths."""

from __future__ import annotations

import pickle
from decimal import Decimal

import pytest

from provider.cty import (
    BOOL,
    DYNAMIC,
    NUMBER,
    STRING,
    UNKNOWN,
    AttributePath,
    Dynamic,
    GetAttr,
    Index,
    List,
    Map,
    Object,
    Set,
    Unknown,
    format_path,
    is_null,
    is_unknown,
    is_wholly_known,
    values_equal,
)


def test_values_equal_ignores_set_order_but_not_list_order() -> None:
    assert values_equal(["a", "b"], ["b", "a"], Set(STRING))
    assert not values_equal(["a", "b"], ["b", "a"], List(STRING))
    assert not values_equal(["a"], ["a", "b"], Set(STRING))


def test_values_equal_handles_sets_of_objects_and_nested_sets() -> None:
    t = Set(Object({"name": STRING, "ports": Set(NUMBER)}))
    a = [{"name": "x", "ports": [1, 2]}, {"name": "y", "ports": []}]
    b = [{"name": "y", "ports": []}, {"name": "x", "ports": [Decimal("2.0"), 1]}]
    assert values_equal(a, b, t)
    assert not values_equal(a, [{"name": "y", "ports": []}, {"name": "x", "ports": [1]}], t)


def test_values_equal_numbers_by_value_and_bools_distinct() -> None:
    assert values_equal(1, Decimal("1.000"), NUMBER)
    assert values_equal(2**80, Decimal(2**80), NUMBER)
    assert not values_equal(Decimal("0.1"), Decimal.from_float(0.1), NUMBER)
    assert not values_equal(True, 1, BOOL)


def test_values_equal_null_and_unknown() -> None:
    assert values_equal(None, None, STRING)
    assert not values_equal(None, "", STRING)
    assert not values_equal(None, UNKNOWN, STRING)
    assert values_equal(UNKNOWN, Unknown(string_prefix="a"), STRING)
    assert not values_equal({"a": None}, {"a": UNKNOWN}, Map(STRING))


def test_values_equal_dynamic_compares_type_and_value() -> None:
    assert values_equal(Dynamic(Set(STRING), ["a", "b"]), Dynamic(Set(STRING), ["b", "a"]), DYNAMIC)
    assert not values_equal(Dynamic(List(STRING), ["a"]), Dynamic(Set(STRING), ["a"]), DYNAMIC)
    assert Dynamic(NUMBER, 1) == Dynamic(NUMBER, Decimal(1))
    assert hash(Dynamic(NUMBER, 1)) == hash(Dynamic(NUMBER, Decimal(1)))


def test_is_wholly_known_looks_everywhere() -> None:
    assert is_wholly_known({"a": [1, {"b": None}]})
    assert not is_wholly_known({"a": [1, {"b": UNKNOWN}]})
    assert not is_wholly_known(Dynamic(List(STRING), ["x", Unknown(not_null=True)]))
    assert not is_wholly_known(UNKNOWN)
    assert is_unknown(Unknown(length_lower=1)) and not is_unknown(None)
    assert is_null(None) and not is_null(UNKNOWN)


def test_unknown_refinements_are_values() -> None:
    refined = Unknown(not_null=True, number_lower=(0, True))
    assert refined.refined and not UNKNOWN.refined
    assert refined == Unknown(not_null=True, number_lower=(Decimal(0), True))
    assert refined != UNKNOWN
    assert repr(UNKNOWN) == "UNKNOWN"
    assert "not_null=True" in repr(refined)
    assert pickle.loads(pickle.dumps(refined)) == refined
    with pytest.raises(AttributeError):
        refined.not_null = False


def test_format_path_reads_like_terraform() -> None:
    path = AttributePath().attr("nodes").element(0).attr("name")
    assert format_path(path) == "nodes[0].name"
    assert str(AttributePath([GetAttr("labels"), Index('te"am')])) == 'labels["te\\"am"]'
    assert format_path(AttributePath()) == ""
    assert isinstance(path[:2], AttributePath) and path[:2] == AttributePath([GetAttr("nodes"), Index(0)])
    assert path + (GetAttr("x"),) == AttributePath(  # noqa: RUF005 - checks our __add__
        [GetAttr("nodes"), Index(0), GetAttr("name"), GetAttr("x")]
    )
    assert Index(1) != Index("1") and Index(True) != Index(1)
    assert hash(AttributePath([GetAttr("a")])) == hash(AttributePath([GetAttr("a")]))
