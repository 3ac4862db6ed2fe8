"""msgpack wire facts Terraform depends on (go-cty's encoding), checked byte by byte."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings

from provider.cty import (
    BOOL,
    DYNAMIC,
    NUMBER,
    STRING,
    UNKNOWN,
    AttributePath,
    CtyType,
    Dynamic,
    GetAttr,
    Index,
    List,
    Map,
    Object,
    Set,
    Tuple,
    Unknown,
    ValueDecodeError,
    ValueEncodeError,
    decode_msgpack,
    encode_msgpack,
)
from tests.provider.cty.strategies import numbers


def test_msgpack_plain_unknown_is_fixext1_code_zero() -> None:
    assert encode_msgpack(UNKNOWN, STRING) == bytes.fromhex("d40000")
    assert decode_msgpack(bytes.fromhex("d40000"), STRING) is UNKNOWN


@pytest.mark.parametrize("code", [0, 1, 5, 12, 42, 127])
def test_msgpack_reads_any_extension_code_as_unknown(code: int) -> None:
    for payload in (b"", b"\x00", b"\x07\x07\x07"):
        data = msgpack.packb(msgpack.ExtType(code, payload))
        assert isinstance(decode_msgpack(data, NUMBER), Unknown)


@pytest.mark.parametrize(
    "t", [STRING, NUMBER, BOOL, DYNAMIC, List(STRING), Map(NUMBER), Object({"a": STRING})]
)
def test_msgpack_reads_negative_extension_codes_as_unknown(t: CtyType) -> None:
    # -3 goes through the ext hook; -1 is msgpack's timestamp, which the library decodes by itself
    for raw in ("d4fd00", "d6ff00000000"):
        assert decode_msgpack(bytes.fromhex(raw), t) is UNKNOWN


def test_msgpack_decodes_refined_string_unknown_from_raw_bytes() -> None:
    # ext 12, payload {1: false (not null), 2: "ab"} exactly as Terraform 1.11 writes it
    raw = bytes.fromhex("c7070c" + "82" + "01c2" + "02a26162")
    decoded = decode_msgpack(raw, STRING)
    assert decoded == Unknown(not_null=True, string_prefix="ab")
    assert encode_msgpack(decoded, STRING) == raw


def test_msgpack_decodes_refined_number_and_length_unknowns() -> None:
    payload = msgpack.packb({1: False, 3: [0, True], 4: ["1e400", False]})
    decoded = decode_msgpack(msgpack.packb(msgpack.ExtType(12, payload)), NUMBER)
    assert decoded == Unknown(not_null=True, number_lower=(0, True), number_upper=(Decimal("1e400"), False))

    payload = msgpack.packb({5: 1, 6: 3})
    decoded = decode_msgpack(msgpack.packb(msgpack.ExtType(12, payload)), List(STRING))
    assert decoded == Unknown(length_lower=1, length_upper=3)


def test_msgpack_refinement_definitely_null_collapses_to_null() -> None:
    payload = msgpack.packb({1: True})
    assert decode_msgpack(msgpack.packb(msgpack.ExtType(12, payload)), STRING) is None


def test_msgpack_refinements_ignore_future_keys_and_drop_malformed_ones() -> None:
    future = msgpack.packb({1: False, 99: "whatever"})
    assert decode_msgpack(msgpack.packb(msgpack.ExtType(12, future)), BOOL) == Unknown(not_null=True)
    for bad in ({1: "yes"}, {2: 7}, {3: [1]}, {5: "x"}, [1, 2]):
        data = msgpack.packb(msgpack.ExtType(12, msgpack.packb(bad)))
        assert decode_msgpack(data, STRING) is UNKNOWN
    trailing = msgpack.packb({2: "ab"}) + b"\x00\x00"
    assert decode_msgpack(msgpack.packb(msgpack.ExtType(12, trailing)), STRING) == Unknown(string_prefix="ab")


def test_msgpack_encode_drops_refinements_that_do_not_apply_to_the_type() -> None:
    refined = Unknown(not_null=True, string_prefix="x", length_lower=2)
    assert decode_msgpack(encode_msgpack(refined, NUMBER), NUMBER) == Unknown(not_null=True)
    assert decode_msgpack(encode_msgpack(refined, List(NUMBER)), List(NUMBER)) == Unknown(
        not_null=True, length_lower=2
    )
    assert encode_msgpack(refined, DYNAMIC) == bytes.fromhex("d40000")


def test_msgpack_long_string_prefix_is_truncated_to_stay_under_terraforms_limit() -> None:
    decoded = decode_msgpack(encode_msgpack(Unknown(string_prefix="é" * 2000), STRING), STRING)
    assert isinstance(decoded, Unknown)
    assert decoded.string_prefix is not None and 0 < len(decoded.string_prefix.encode()) <= 256


@pytest.mark.parametrize(
    ("value", "wire"),
    [
        (0, 0),
        (-5, -5),
        (2**63 - 1, 2**63 - 1),
        (-(2**63), -(2**63)),
        (2**64 + 1, str(2**64 + 1)),  # not int64, not exact float64 -> text (never uint64)
        (2**64, float(2**64)),  # not int64 but exact float64
        (Decimal("0.5"), 0.5),
        (Decimal("4.0"), 4),
        (Decimal("0.1"), "0.1"),
        (Decimal("1e-30"), "0.000000000000000000000000000001"),
        (Decimal("123456789012345678901234567890.5"), "123456789012345678901234567890.5"),
    ],
)
def test_msgpack_numbers_use_int_then_exact_float_then_text(value: Any, wire: Any) -> None:
    assert msgpack.unpackb(encode_msgpack(value, NUMBER)) == wire
    assert type(msgpack.unpackb(encode_msgpack(value, NUMBER))) is type(wire)


@pytest.mark.parametrize(
    ("wire", "value"),
    [
        (3, 3),
        (2**64 - 1, 2**64 - 1),  # uint64 from another encoder
        (0.25, Decimal("0.25")),
        (0.1, Decimal.from_float(0.1)),  # the exact binary value, so it is written back as the same float64
        (1e30, int(1e30)),  # exact binary value of the float64, as an int
        ("340282366920938463463374607431768211457", 2**128 + 1),
        ("0.000000000000000000000000000001", Decimal("1e-30")),
        ("1.5e3", Decimal(1500)),
    ],
)
def test_msgpack_numbers_decode_without_loss(wire: Any, value: Any) -> None:
    decoded = decode_msgpack(msgpack.packb(wire), NUMBER)
    assert decoded == value
    assert not isinstance(decoded, float | bool)


def test_msgpack_big_ints_come_back_as_ints() -> None:
    for value in (2**64, 2**200 + 7, -(2**90)):
        decoded = decode_msgpack(encode_msgpack(value, NUMBER), NUMBER)
        assert decoded == value and type(decoded) is int


@settings(deadline=None, max_examples=300)
@given(numbers(infinities=True))
def test_msgpack_number_round_trip_is_exact(value: Any) -> None:
    data = encode_msgpack(value, NUMBER)
    assert decode_msgpack(data, NUMBER) == value
    assert encode_msgpack(decode_msgpack(data, NUMBER), NUMBER) == data


@pytest.mark.parametrize("bad", ["12", 1.5, True, Decimal("NaN")])
def test_msgpack_rejects_non_numbers_for_number(bad: Any) -> None:
    with pytest.raises(ValueEncodeError):
        encode_msgpack(bad, NUMBER)


def test_msgpack_dynamic_is_type_json_bytes_and_value() -> None:
    value = Dynamic(List(STRING), ["a", UNKNOWN])
    unpacked = msgpack.unpackb(encode_msgpack(value, DYNAMIC), raw=False)
    assert unpacked[0] == b'["list","string"]'
    assert unpacked[1][0] == "a"
    assert isinstance(unpacked[1][1], msgpack.ExtType)
    assert decode_msgpack(encode_msgpack(value, DYNAMIC), DYNAMIC) == value


def test_msgpack_dynamic_null_unknown_and_typed_null() -> None:
    assert encode_msgpack(None, DYNAMIC) == b"\xc0"
    assert decode_msgpack(b"\xc0", DYNAMIC) is None
    assert decode_msgpack(encode_msgpack(UNKNOWN, DYNAMIC), DYNAMIC) is UNKNOWN
    typed_null = Dynamic(NUMBER, None)
    assert decode_msgpack(encode_msgpack(typed_null, DYNAMIC), DYNAMIC) == typed_null
    # the type may arrive as a msgpack string instead of bin
    assert decode_msgpack(msgpack.packb(['"number"', 7]), DYNAMIC) == Dynamic(NUMBER, 7)


def test_msgpack_dynamic_rejects_bad_wrappers() -> None:
    for bad in (["string"], [b'"strin"', "x"], 5, [b'"dynamic"', 1]):
        with pytest.raises(ValueDecodeError):
            decode_msgpack(msgpack.packb(bad), DYNAMIC)
    with pytest.raises(ValueEncodeError, match="Dynamic"):
        encode_msgpack("bare string", DYNAMIC)


OBJ = Object({"name": STRING, "size": NUMBER, "note": STRING}, optional={"note"})


def test_msgpack_object_carries_every_attribute_and_fills_optional_ones() -> None:
    unpacked = msgpack.unpackb(encode_msgpack({"name": "a", "size": 1}, OBJ))
    assert unpacked == {"name": "a", "note": None, "size": 1}
    assert decode_msgpack(msgpack.packb({"name": "a", "size": 1}), OBJ) == {
        "name": "a",
        "note": None,
        "size": 1,
    }


def test_msgpack_object_missing_required_attribute_is_an_error() -> None:
    with pytest.raises(ValueEncodeError, match="'size' is required"):
        encode_msgpack({"name": "a"}, OBJ)
    with pytest.raises(ValueDecodeError, match="'size' is missing"):
        decode_msgpack(msgpack.packb({"name": "a"}), OBJ)


def test_msgpack_object_unsupported_attribute_is_an_error() -> None:
    with pytest.raises(ValueEncodeError, match="unsupported attribute 'extra'"):
        encode_msgpack({"name": "a", "size": 1, "note": None, "extra": 1}, OBJ)
    with pytest.raises(ValueDecodeError, match="unsupported attribute 'extra'"):
        decode_msgpack(msgpack.packb({"name": "a", "size": 1, "extra": 1}), OBJ)


NESTED = Object(
    {
        "nodes": List(Object({"name": STRING, "hcas": Set(STRING)})),
        "labels": Map(NUMBER),
        "pair": Tuple([STRING, BOOL]),
    }
)


def _nested(**changes: Any) -> dict[str, Any]:
    value: dict[str, Any] = {
        "nodes": [{"name": "n0", "hcas": ["a"]}, {"name": "n1", "hcas": ["b", "c"]}],
        "labels": {"team": 1},
        "pair": ["x", True],
    }
    value.update(changes)
    return value


@pytest.mark.parametrize(
    ("value", "path", "text"),
    [
        (
            _nested(nodes=[{"name": "n0", "hcas": []}, {"name": "n1", "hcas": ["b", 3]}]),
            AttributePath([GetAttr("nodes"), Index(1), GetAttr("hcas"), Index(1)]),
            "nodes[1].hcas[1]",
        ),
        (_nested(labels={"team": "x"}), AttributePath([GetAttr("labels"), Index("team")]), 'labels["team"]'),
        (_nested(pair=["x", "yes"]), AttributePath([GetAttr("pair"), Index(1)]), "pair[1]"),
        (
            _nested(nodes=[{"name": 1, "hcas": []}]),
            AttributePath([GetAttr("nodes"), Index(0), GetAttr("name")]),
            "nodes[0].name",
        ),
    ],
)
def test_msgpack_errors_name_the_attribute_path(value: Any, path: AttributePath, text: str) -> None:
    with pytest.raises(ValueEncodeError) as encode_error:
        encode_msgpack(value, NESTED)
    assert encode_error.value.path == path
    assert str(encode_error.value).startswith(text + ": ")

    raw = msgpack.packb(value)
    with pytest.raises(ValueDecodeError) as decode_error:
        decode_msgpack(raw, NESTED)
    assert decode_error.value.path == path


def test_msgpack_error_messages_never_include_the_value() -> None:
    with pytest.raises(ValueEncodeError) as error:
        encode_msgpack({"name": 123456789, "size": 1}, OBJ)
    assert "123456789" not in str(error.value)


def test_msgpack_malformed_bytes_raise_decode_error() -> None:
    for data in (b"", b"\xc1", b"\x92\x01", b"\x01\x02"):
        with pytest.raises(ValueDecodeError):
            decode_msgpack(data, List(NUMBER))


def test_msgpack_collections_accept_tuples_and_python_sets() -> None:
    assert decode_msgpack(encode_msgpack(("a", "b"), List(STRING)), List(STRING)) == ["a", "b"]
    assert sorted(decode_msgpack(encode_msgpack({"a", "b"}, Set(STRING)), Set(STRING))) == ["a", "b"]
    with pytest.raises(ValueEncodeError):
        encode_msgpack({"a"}, List(STRING))


def test_msgpack_codec_caches_stay_bounded_under_endless_dynamic_types(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from provider.cty import _decoders, msgpack_codec

    monkeypatch.setattr(msgpack_codec, "MAX_CACHED_CODECS", 3)
    monkeypatch.setattr(_decoders, "MAX_CACHED_CODECS", 3)
    for i in range(20):
        value = Dynamic(Object({f"attr{i}": List(STRING)}), {f"attr{i}": ["x"]})
        assert decode_msgpack(encode_msgpack(value, DYNAMIC), DYNAMIC) == value
        assert len(msgpack_codec._ENCODERS) <= 3 and len(_decoders._DECODERS) <= 3
