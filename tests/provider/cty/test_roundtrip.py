"""Property-based round trips: every type, through msgpack and JSON, with unknowns nested anywhere."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings

from provider.cty import (
    CtyType,
    decode_json,
    decode_msgpack,
    encode_json,
    encode_msgpack,
    is_wholly_known,
    type_from_json,
    type_to_json,
    values_equal,
)
from tests.provider.cty.strategies import cty_types, fill_optional, typed_values

THOROUGH = settings(deadline=None, max_examples=300)


@THOROUGH
@given(cty_types())
def test_type_json_round_trip(t: CtyType) -> None:
    assert type_from_json(type_to_json(t)) == t
    assert hash(type_from_json(type_to_json(t))) == hash(t)
    assert type_from_json(type_to_json(t).decode()) == t


@THOROUGH
@given(typed_values(unknowns=True, infinities=True))
def test_msgpack_round_trip_keeps_value_and_bytes(case: tuple[CtyType, Any]) -> None:
    t, value = case
    data = encode_msgpack(value, t)
    decoded = decode_msgpack(data, t)
    assert values_equal(decoded, fill_optional(value, t), t)
    # byte-stable: refinements, number encodings and ordering all survive a second trip
    assert encode_msgpack(decoded, t) == data
    assert is_wholly_known(decoded) == is_wholly_known(value)


@THOROUGH
@given(typed_values(unknowns=False))
def test_json_round_trip_keeps_value_and_bytes(case: tuple[CtyType, Any]) -> None:
    t, value = case
    data = encode_json(value, t)
    decoded = decode_json(data, t)
    assert values_equal(decoded, fill_optional(value, t), t)
    assert encode_json(decoded, t) == data


@THOROUGH
@given(typed_values(unknowns=False))
def test_msgpack_and_json_agree_on_known_values(case: tuple[CtyType, Any]) -> None:
    t, value = case
    via_msgpack = decode_msgpack(encode_msgpack(value, t), t)
    via_json = decode_json(encode_json(value, t), t)
    assert values_equal(via_msgpack, via_json, t)
