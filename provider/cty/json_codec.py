"""JSON codec (go-cty's `cty/json`): what Terraform sends as raw state to UpgradeResourceState.

Numbers are written as exact JSON number text and read back as int/Decimal, so nothing is lost. JSON has
no representation for unknown values: encoding one is an error, as in go-cty.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from provider.cty._decoders import (
    JSON_DIALECT,
    JSON_IGNORING_EXTRA_DIALECT,
    MAX_CACHED_CODECS,
    describe,
    get_decoder,
)
from provider.cty._numbers import NumberError, number_to_json_text
from provider.cty.errors import ValueDecodeError, ValueEncodeError
from provider.cty.path import GetAttr, Index
from provider.cty.types import (
    BOOL,
    NUMBER,
    STRING,
    CtyType,
    DynamicPseudoType,
    List,
    Map,
    Object,
    Set,
    Tuple,
    type_to_json,
)
from provider.cty.values import Dynamic, Unknown

JsonWriter = Callable[[Any, list[str]], None]
_quote: Callable[[str], str] = json.encoder.encode_basestring

_WRITERS: dict[CtyType, JsonWriter] = {}


def encode_json(value: Any, t: CtyType) -> bytes:
    """Encode a wholly known value of type `t` as cty JSON."""
    out: list[str] = []
    _writer(t)(value, out)
    return "".join(out).encode()


def decode_json(data: bytes | str, t: CtyType, *, ignore_extra_attributes: bool = False) -> Any:
    """Decode cty JSON as type `t`. Missing object attributes become null; with `ignore_extra_attributes`
    attributes the type does not declare are dropped (useful when upgrading state written by an older
    schema) instead of being an error."""
    try:
        raw = json.loads(data, parse_float=Decimal)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueDecodeError(f"malformed JSON: {exc}") from None
    dialect = JSON_IGNORING_EXTRA_DIALECT if ignore_extra_attributes else JSON_DIALECT
    return get_decoder(t, dialect)(raw)


def _writer(t: CtyType) -> JsonWriter:
    writer = _WRITERS.get(t)
    if writer is None:
        writer = _compile_writer(t)
        if len(_WRITERS) >= MAX_CACHED_CODECS:
            _WRITERS.clear()
        _WRITERS[t] = writer
    return writer


def _check_known(v: Any) -> None:
    if isinstance(v, Unknown):
        raise ValueEncodeError("an unknown value cannot be written as JSON")


def _compile_writer(t: CtyType) -> JsonWriter:
    if t == STRING:
        return _write_string
    if t == NUMBER:
        return _write_number
    if t == BOOL:
        return _write_bool
    if isinstance(t, DynamicPseudoType):
        return _write_dynamic
    if isinstance(t, List | Set):
        return _list_writer(t)
    if isinstance(t, Map):
        return _map_writer(t)
    if isinstance(t, Tuple):
        return _tuple_writer(t)
    if isinstance(t, Object):
        return _object_writer(t)
    raise TypeError(f"unsupported cty type {t!r}")


def _write_string(v: Any, out: list[str]) -> None:
    if isinstance(v, str):
        out.append(_quote(v))
    elif v is None:
        out.append("null")
    else:
        _check_known(v)
        raise ValueEncodeError(f"string required, got {describe(v)}")


def _write_number(v: Any, out: list[str]) -> None:
    if v is None:
        out.append("null")
        return
    _check_known(v)
    try:
        out.append(number_to_json_text(v))
    except NumberError as exc:
        raise ValueEncodeError(str(exc)) from None


def _write_bool(v: Any, out: list[str]) -> None:
    if v is True:
        out.append("true")
    elif v is False:
        out.append("false")
    elif v is None:
        out.append("null")
    else:
        _check_known(v)
        raise ValueEncodeError(f"bool required, got {describe(v)}")


def _write_dynamic(v: Any, out: list[str]) -> None:
    if v is None:
        out.append("null")
        return
    _check_known(v)
    if not isinstance(v, Dynamic):
        raise ValueEncodeError(f"Dynamic(type, value) required, got {describe(v)}")
    if isinstance(v.type, DynamicPseudoType):
        raise ValueEncodeError("a Dynamic value needs a concrete type, not dynamic")
    out.append('{"type":')
    out.append(type_to_json(v.type).decode())
    out.append(',"value":')
    _writer(v.type)(v.value, out)
    out.append("}")


def _list_writer(t: List | Set) -> JsonWriter:
    element_writer = _writer(t.element)
    expected = t.friendly_name()
    accepted: tuple[type[Any], ...] = (list, tuple, set, frozenset) if isinstance(t, Set) else (list, tuple)

    def write_list(v: Any, out: list[str]) -> None:
        if isinstance(v, accepted):
            out.append("[")
            for i, e in enumerate(v):
                if i:
                    out.append(",")
                try:
                    element_writer(e, out)
                except ValueEncodeError as exc:
                    exc.add_step(Index(i))
                    raise
            out.append("]")
        elif v is None:
            out.append("null")
        else:
            _check_known(v)
            raise ValueEncodeError(f"{expected} required, got {describe(v)}")

    return write_list


def _tuple_writer(t: Tuple) -> JsonWriter:
    writers = tuple(_writer(e) for e in t.elements)

    def write_tuple(v: Any, out: list[str]) -> None:
        if isinstance(v, list | tuple):
            if len(v) != len(writers):
                raise ValueEncodeError(f"a tuple of {len(writers)} elements required, got {len(v)}")
            out.append("[")
            for i, (write, e) in enumerate(zip(writers, v, strict=True)):
                if i:
                    out.append(",")
                try:
                    write(e, out)
                except ValueEncodeError as exc:
                    exc.add_step(Index(i))
                    raise
            out.append("]")
        elif v is None:
            out.append("null")
        else:
            _check_known(v)
            raise ValueEncodeError(f"tuple required, got {describe(v)}")

    return write_tuple


def _map_writer(t: Map) -> JsonWriter:
    element_writer = _writer(t.element)
    expected = t.friendly_name()

    def write_map(v: Any, out: list[str]) -> None:
        if v.__class__ is dict:
            out.append("{")
            for i, key in enumerate(sorted(v)):
                if key.__class__ is not str:
                    raise ValueEncodeError(f"map keys must be strings, got {describe(key)}")
                if i:
                    out.append(",")
                out.append(_quote(key))
                out.append(":")
                try:
                    element_writer(v[key], out)
                except ValueEncodeError as exc:
                    exc.add_step(Index(key))
                    raise
            out.append("}")
        elif v is None:
            out.append("null")
        else:
            _check_known(v)
            raise ValueEncodeError(f"{expected} required, got {describe(v)}")

    return write_map


def _object_writer(t: Object) -> JsonWriter:
    fields = tuple((name, _quote(name) + ":", _writer(at)) for name, at in t.attributes.items())
    optional = t.optional
    names = frozenset(t.attributes)

    def write_object(v: Any, out: list[str]) -> None:
        if v.__class__ is dict:
            extra = [k for k in v if k not in names]
            if extra:
                raise ValueEncodeError(f"unsupported attribute {sorted(map(str, extra))[0]!r}")
            out.append("{")
            for i, (name, prefix, write) in enumerate(fields):
                if i:
                    out.append(",")
                out.append(prefix)
                if name not in v:
                    if name in optional:
                        out.append("null")
                        continue
                    raise ValueEncodeError(f"attribute {name!r} is required (objects carry every attribute)")
                try:
                    write(v[name], out)
                except ValueEncodeError as exc:
                    exc.add_step(GetAttr(name))
                    raise
            out.append("}")
        elif v is None:
            out.append("null")
        else:
            _check_known(v)
            raise ValueEncodeError(f"object required, got {describe(v)}")

    return write_object


__all__ = ["decode_json", "encode_json"]
