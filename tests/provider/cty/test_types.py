"""cty type JSON: the exact forms Terraform reads, and clear errors for bad input."""

from __future__ import annotations

import pickle

import pytest

from provider.cty import (
    BOOL,
    DYNAMIC,
    NUMBER,
    STRING,
    CtyType,
    List,
    Map,
    Object,
    Set,
    Tuple,
    TypeJsonError,
    type_from_json,
    type_to_json,
)


@pytest.mark.parametrize(
    ("t", "text"),
    [
        (STRING, b'"string"'),
        (NUMBER, b'"number"'),
        (BOOL, b'"bool"'),
        (DYNAMIC, b'"dynamic"'),
        (List(STRING), b'["list","string"]'),
        (Set(NUMBER), b'["set","number"]'),
        (Map(BOOL), b'["map","bool"]'),
        (Object({"b": NUMBER, "a": STRING}), b'["object",{"a":"string","b":"number"}]'),
        (Object({"a": STRING, "b": NUMBER}, optional={"b"}), b'["object",{"a":"string","b":"number"},["b"]]'),
        (Tuple([STRING, List(BOOL)]), b'["tuple",["string",["list","bool"]]]'),
        (Tuple([]), b'["tuple",[]]'),
        (Object({}), b'["object",{}]'),
    ],
)
def test_type_json_matches_terraforms_form(t: CtyType, text: bytes) -> None:
    assert type_to_json(t) == text
    assert type_from_json(text) == t
    assert type_from_json(text.decode()) == t


def test_type_json_accepts_whitespace_and_any_key_order() -> None:
    assert type_from_json(' [ "object" , { "b" : "bool", "a" : [ "map", "string" ] } ] ') == Object(
        {"a": Map(STRING), "b": BOOL}
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b"", "invalid cty type JSON"),
        (b"{", "invalid cty type JSON"),
        (b"\xff", "invalid cty type JSON"),
        (b'"strin"', "unknown primitive type 'strin'"),
        (b"42", "expected a type name or an array"),
        (b"[]", "expected a type name or an array"),
        (b'{"list": "string"}', "expected a type name or an array"),
        (b'["list"]', "list needs exactly one element type"),
        (b'["set","string","number"]', "set needs exactly one element type"),
        (b'["bag","string"]', "unknown type kind 'bag'"),
        (b'["tuple","string"]', "tuple must be"),
        (b'["object",["a"]]', "object must be"),
        (b'["object",{"a":"string"},["b"]]', "optional attribute 'b' is not declared"),
        (b'["object",{"a":"string"},"a"]', "optional attributes must be a list of names"),
        (b'["object",{"a":["list","bogus"]}]', "at [1].a[1]: unknown primitive type 'bogus'"),
        (b'["tuple",["string",7]]', "at [1][1]: expected a type name"),
    ],
)
def test_type_json_errors_say_what_and_where(text: bytes, message: str) -> None:
    with pytest.raises(TypeJsonError, match=message.replace("[", r"\[").replace("]", r"\]")):
        type_from_json(text)


def test_type_json_rejects_non_text_input() -> None:
    with pytest.raises(TypeJsonError, match="bytes or str"):
        type_from_json(42)  # type: ignore[arg-type]
    with pytest.raises(TypeJsonError, match="bytes or str"):
        type_from_json(["list", "string"])  # type: ignore[arg-type]


def test_types_are_hashable_immutable_and_structural() -> None:
    a = Object({"x": List(STRING)}, optional=["x"])
    b = Object({"x": List(STRING)}, optional=frozenset({"x"}))
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != Object({"x": List(STRING)})
    assert List(STRING) != Set(STRING) and hash(List(STRING)) != hash(Set(STRING))
    with pytest.raises(AttributeError):
        a.optional = frozenset()
    assert pickle.loads(pickle.dumps(a)) == a


def test_type_constructors_reject_bad_arguments() -> None:
    with pytest.raises(ValueError, match="not attributes"):
        Object({"a": STRING}, optional={"b"})
    with pytest.raises(TypeError):
        List("string")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Object({"a": "string"})  # type: ignore[dict-item]


def test_type_friendly_names() -> None:
    assert List(Map(NUMBER)).friendly_name() == "list of map of number"
    assert repr(Object({"a": STRING}, optional={"a"})) == "<cty object {a: <cty string>}, optional=['a']>"
