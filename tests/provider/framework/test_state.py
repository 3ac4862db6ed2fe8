import datetime as dt
from decimal import Decimal

import pytest

from provider.framework import (
    Int64Attribute,
    ListNestedBlock,
    Schema,
    SingleNestedBlock,
    StringAttribute,
    parse_duration,
    timeout,
    timeouts_block,
)
from provider.framework.state import decode_private, encode_private, fit_object, parse_raw_state

SCHEMA = Schema(
    attributes={"id": StringAttribute(computed=True), "size": Int64Attribute(optional=True)},
    blocks={
        "disk": ListNestedBlock(attributes={"name": StringAttribute(required=True)}),
        "timeouts": timeouts_block(create=True),
    },
)


def test_fit_object_fills_missing_attributes_and_blocks():
    fitted = fit_object(SCHEMA, parse_raw_state(b'{"id": "x", "removed_attr": 1}'))
    assert fitted == {"id": "x", "size": None, "disk": [], "timeouts": None}


def test_fit_object_keeps_numbers_exact():
    fitted = fit_object(SCHEMA, parse_raw_state(b'{"id": "x", "size": 12345678901234567890}'))
    assert fitted["size"] == 12345678901234567890
    assert parse_raw_state(b'{"a": 1.25}') == {"a": Decimal("1.25")}


def test_private_state_round_trip():
    assert encode_private({}) == b""
    assert decode_private(b"") == {}
    assert decode_private(encode_private({"k": [1, "v"]})) == {"k": [1, "v"]}


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0),
        ("90s", 90),
        ("1h30m", 5400),
        ("1.5h", 5400),
        ("250ms", 0.25),
        ("2h45m30s", 9930),
        ("-1m", -60),
    ],
)
def test_parse_duration_like_go(text, seconds):
    assert parse_duration(text) == dt.timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "1", "1d", "h", "1h 30m", "abc"])
def test_parse_duration_rejects_invalid(text):
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


def test_timeout_reads_block_or_default():
    default = dt.timedelta(hours=2)
    assert timeout({"timeouts": None}, "create", default) == default
    assert timeout({"timeouts": {"create": "10m"}}, "create", default) == dt.timedelta(minutes=10)
    assert isinstance(SCHEMA.blocks["timeouts"], SingleNestedBlock)
