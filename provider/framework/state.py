"""Stored-state helpers: fitting raw JSON state to a schema (upgrade, move) and private state."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from provider.cty import DYNAMIC, decode_json, is_unknown
from provider.framework.schema import Block, NestedAttribute, Schema
from provider.framework.walk import Node


def parse_raw_state(raw_json: bytes) -> Any:
    """JSON state as stored by Terraform, numbers kept exact (int or Decimal)."""
    if not raw_json:
        return None
    return json.loads(raw_json, parse_float=Decimal)


def fit_object(node: Node, raw: Any) -> dict[str, Any] | None:
    """Conform a parsed JSON object to `node`: every attribute present (missing ones null), unknown keys
    dropped, missing list/set blocks []. This is what UpgradeResourceState must return even when the
    stored version equals the schema version (attributes may have been added since)."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ValueError(f"stored state is not an object: {type(raw).__name__}")
    out: dict[str, Any] = {}
    for name, attr in node.attributes.items():
        v = raw.get(name)
        if isinstance(attr, NestedAttribute):
            out[name] = _fit_nested(attr, attr.nesting, v)
        elif attr.cty_type == DYNAMIC:
            out[name] = None if v is None else decode_json(json.dumps(v, default=str), DYNAMIC)
        else:
            out[name] = _fit_plain(v)
    for name, block in node.blocks.items():
        v = raw.get(name)
        if v is None and block.nesting != "single":
            out[name] = []
        else:
            out[name] = _fit_nested(block, block.nesting, v)
    return out


def _fit_nested(node: NestedAttribute | Block, nesting: str, v: Any) -> Any:
    if v is None:
        return None
    if nesting == "single":
        return fit_object(node, v)
    if nesting == "map":
        return {k: fit_object(node, e) for k, e in v.items()}
    return [fit_object(node, e) for e in v]


def fit_plain_value(v: Any) -> Any:
    """A parsed JSON value in the plain-Python cty shapes (integral numbers as int)."""
    return _fit_plain(v)


def _fit_plain(v: Any) -> Any:
    # JSON already gives the plain-Python cty shapes (str, bool, int/Decimal, list, dict).
    # Floats parsed as Decimal: normalise integral ones to int, as the msgpack decoder would.
    if isinstance(v, Decimal) and v == v.to_integral_value() and abs(v) < Decimal(2) ** 63:
        return int(v)
    if isinstance(v, list):
        return [_fit_plain(e) for e in v]
    if isinstance(v, dict):
        return {k: _fit_plain(e) for k, e in v.items()}
    return v


def schema_object(schema: Schema, values: dict[str, Any]) -> dict[str, Any]:
    """An object of `schema` from a partial dict: missing attributes null, missing list/set blocks []."""
    out = fit_object(schema, {}) or {}
    out.update(values)
    return out


def encode_private(private: dict[str, Any]) -> bytes:
    return json.dumps(private, sort_keys=True, separators=(",", ":")).encode() if private else b""


def decode_private(data: bytes) -> dict[str, Any]:
    if not data:
        return {}
    value = json.loads(data)
    return value if isinstance(value, dict) else {}


def contains_unknown(value: Any) -> bool:
    if is_unknown(value):
        return True
    if isinstance(value, list):
        return any(contains_unknown(v) for v in value)
    if isinstance(value, dict):
        return any(contains_unknown(v) for v in value.values())
    return False
