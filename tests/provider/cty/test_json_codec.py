"""JSON codec: exact numbers, dynamic values, missing/extra attributes, unknowns refused."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from provider.cty import (
    BOOL,
    DYNAMIC,
    NUMBER,
    STRING,
    UNKNOWN,
    Dynamic,
    GetAttr,
    Index,
    List,
    Map,
    Object,
    ValueDecodeError,
    ValueEncodeError,
    decode_json,
    encode_json,
)


def test_json_numbers_are_exact_text() -> None:
    assert encode_json(Decimal("0.1"), NUMBER) == b"0.1"
    assert encode_json(Decimal("1e-30"), NUMBER) == b"0.000000000000000000000000000001"
    assert encode_json(2**100, NUMBER) == str(2**100).encode()
    assert (
        encode_json(Decimal("123456789012345678901234567890.5"), NUMBER)
        == b"123456789012345678901234567890.5"
    )
    assert decode_json(b"123456789012345678901234567890.5", NUMBER) == Decimal(
        "123456789012345678901234567890.5"
    )
    assert decode_json(b"1e400", NUMBER) == Decimal("1e400")
    assert type(decode_json(str(2**100), NUMBER)) is int


def test_json_refuses_unknown_and_infinite_values() -> None:
    with pytest.raises(ValueEncodeError, match="unknown"):
        encode_json({"a": UNKNOWN}, Map(STRING))
    with pytest.raises(ValueEncodeError):
        encode_json(Decimal("Infinity"), NUMBER)


def test_json_dynamic_is_type_and_value_object() -> None:
    value = Dynamic(List(NUMBER), [1, Decimal("2.5")])
    assert json.loads(encode_json(value, DYNAMIC)) == {"type": ["list", "number"], "value": [1, 2.5]}
    assert decode_json(encode_json(value, DYNAMIC), DYNAMIC) == value
    with pytest.raises(ValueDecodeError):
        decode_json(b'{"type": "number"}', DYNAMIC)
    with pytest.raises(ValueDecodeError, match="invalid type"):
        decode_json(b'{"type": "num", "value": 1}', DYNAMIC)


OBJ = Object({"name": STRING, "size": NUMBER, "tags": Map(STRING)})


def test_json_missing_attributes_decode_as_null() -> None:
    assert decode_json(b'{"name": "a"}', OBJ) == {"name": "a", "size": None, "tags": None}


def test_json_extra_attributes_error_unless_ignored() -> None:
    raw = b'{"name": "a", "size": 1, "tags": {}, "legacy": true}'
    with pytest.raises(ValueDecodeError, match="unsupported attribute 'legacy'"):
        decode_json(raw, OBJ)
    assert decode_json(raw, OBJ, ignore_extra_attributes=True) == {"name": "a", "size": 1, "tags": {}}


def test_json_decoding_is_lenient_with_primitive_spellings_as_go_cty_is() -> None:
    assert decode_json(b'{"name": 12, "size": "3.5", "tags": {"on": true}}', OBJ) == {
        "name": "12",
        "size": Decimal("3.5"),
        "tags": {"on": "true"},
    }
    assert decode_json(b'"true"', BOOL) is True


def test_json_errors_name_the_path() -> None:
    with pytest.raises(ValueDecodeError) as error:
        decode_json(b'{"name": "a", "size": 1, "tags": {"x": [1]}}', OBJ)
    assert list(error.value.path) == [GetAttr("tags"), Index("x")]
    with pytest.raises(ValueEncodeError) as encode_error:
        encode_json({"name": "a", "size": "1", "tags": None}, OBJ)
    assert str(encode_error.value).startswith("size: ")


def test_json_malformed_input_is_a_decode_error() -> None:
    with pytest.raises(ValueDecodeError, match="malformed JSON"):
        decode_json(b"{", OBJ)
    with pytest.raises(ValueDecodeError):
        decode_json(b"NaN", NUMBER)


def test_json_strings_keep_unicode_and_escapes() -> None:
    text = 'é "quoted" \\ \n\t \u2028 😀'
    assert decode_json(encode_json(text, STRING), STRING) == text
