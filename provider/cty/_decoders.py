"""Per-type decoders turning what msgpack/json unpacked into our Python values.

One decoder is compiled per (type, dialect) and cached. The dialects differ only where the formats do:
msgpack numbers may arrive as floats, dynamic values are `[type JSON bytes, value]` and objects must carry
every non-optional attribute; JSON numbers arrive as int/Decimal, dynamic values are
`{"type": ..., "value": ...}` and missing attributes are null (as go-cty's JSON decoder does). Error
messages never include the value itself (it may be a secret), only its kind.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any, Final

import msgpack

from provider.cty._numbers import NumberError, float_to_number, number_to_json_text, parse_number
from provider.cty.errors import TypeJsonError, ValueDecodeError
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
    type_from_json,
    type_from_obj,
)
from provider.cty.values import UNKNOWN, Dynamic, Unknown

Decoder = Callable[[Any], Any]


class Dialect:
    __slots__ = ("ignore_extra_attributes", "is_json", "name")

    def __init__(self, name: str, *, is_json: bool, ignore_extra_attributes: bool = False) -> None:
        self.name = name
        self.is_json = is_json
        self.ignore_extra_attributes = ignore_extra_attributes


MSGPACK_DIALECT: Final = Dialect("msgpack", is_json=False)
JSON_DIALECT: Final = Dialect("json", is_json=True)
JSON_IGNORING_EXTRA_DIALECT: Final = Dialect("json-ignore-extra", is_json=True, ignore_extra_attributes=True)

MAX_CACHED_CODECS: Final = 4096
_DECODERS: dict[tuple[CtyType, Dialect], Decoder] = {}


def describe(v: Any) -> str:
    """The kind of a value for error messages (never the value: it may be sensitive)."""
    if v is None:
        return "null"
    if isinstance(v, Unknown):
        return "an unknown value"
    if isinstance(v, Dynamic):
        return f"a dynamic {v.type.friendly_name()}"
    return type(v).__name__


def get_decoder(t: CtyType, dialect: Dialect) -> Decoder:
    key = (t, dialect)
    decoder = _DECODERS.get(key)
    if decoder is None:
        decoder = _compile(t, dialect)
        if len(_DECODERS) >= MAX_CACHED_CODECS:  # dynamic values can bring endless new types
            _DECODERS.clear()
        _DECODERS[key] = decoder
    return decoder


def _mismatch(expected: str, v: Any) -> ValueDecodeError:
    return ValueDecodeError(f"{expected} required, got {describe(v)}")


def _unexpected(expected: str, v: Any) -> Any:
    """Slow path of every decoder: msgpack turns extension -1 into a Timestamp instead of calling our
    ext hook, and every extension value is an unknown; anything else is a type mismatch."""
    if v.__class__ is msgpack.Timestamp:
        return UNKNOWN
    raise _mismatch(expected, v)


def _compile(t: CtyType, dialect: Dialect) -> Decoder:
    if t == STRING:
        return _decode_json_string if dialect.is_json else _decode_string
    if t == NUMBER:
        return _decode_number
    if t == BOOL:
        return _decode_json_bool if dialect.is_json else _decode_bool
    if isinstance(t, DynamicPseudoType):
        return _dynamic_decoder(dialect)
    if isinstance(t, List | Set):
        return _list_decoder(t, dialect)
    if isinstance(t, Map):
        return _map_decoder(t, dialect)
    if isinstance(t, Tuple):
        return _tuple_decoder(t, dialect)
    if isinstance(t, Object):
        return _object_decoder(t, dialect)
    raise TypeError(f"unsupported cty type {t!r}")


def _decode_string(v: Any) -> Any:
    if v.__class__ is str or v is None or v.__class__ is Unknown:
        return v
    return _unexpected("string", v)


def _decode_json_string(v: Any) -> Any:
    # go-cty's JSON decoder accepts numbers and bools for strings (old states stored them so)
    if v.__class__ is str or v is None:
        return v
    if v is True or v is False:
        return "true" if v else "false"
    if v.__class__ is int or v.__class__ is Decimal:
        return number_to_json_text(v)
    return _unexpected("string", v)


def _decode_number(v: Any) -> Any:
    cls = v.__class__
    if cls is int or v is None or cls is Unknown:
        return v
    try:
        if cls is float:
            return float_to_number(v)
        if cls is str:
            return parse_number(v)
        if cls is Decimal:
            if v.is_nan():
                raise NumberError("NaN is not a valid number")
            return v
    except NumberError as exc:
        raise ValueDecodeError(f"number required: {exc}") from None
    return _unexpected("number", v)


def _decode_bool(v: Any) -> Any:
    if v is True or v is False or v is None or v.__class__ is Unknown:
        return v
    return _unexpected("bool", v)


def _decode_json_bool(v: Any) -> Any:
    if v is True or v is False or v is None:
        return v
    if v == "true" or v == "false":
        return v == "true"
    return _unexpected("bool", v)


def _dynamic_decoder(dialect: Dialect) -> Decoder:
    def decode_dynamic(v: Any) -> Any:
        if v is None:
            return None
        if v.__class__ is Unknown or v.__class__ is msgpack.Timestamp:
            return UNKNOWN  # refinements never apply to a value of unknown type
        try:
            if dialect.is_json:
                if v.__class__ is not dict or set(v) != {"type", "value"}:
                    raise _mismatch('a {"type": ..., "value": ...} object', v)
                concrete = type_from_obj(v["type"])
            else:
                if v.__class__ is not list or len(v) != 2 or not isinstance(v[0], bytes | str):
                    raise _mismatch("a [type JSON, value] pair", v)
                concrete = type_from_json(v[0])
        except TypeJsonError as exc:
            raise ValueDecodeError(f"dynamic value has an invalid type: {exc}") from None
        if isinstance(concrete, DynamicPseudoType):
            raise ValueDecodeError("a dynamic value needs a concrete type, not dynamic")
        inner = v["value"] if dialect.is_json else v[1]
        return Dynamic(concrete, get_decoder(concrete, dialect)(inner))

    return decode_dynamic


def _list_decoder(t: List | Set, dialect: Dialect) -> Decoder:
    element_decoder = get_decoder(t.element, dialect)
    expected = t.friendly_name()

    def decode_list(v: Any) -> Any:
        if v.__class__ is list:
            try:
                return [element_decoder(e) for e in v]
            except ValueDecodeError as exc:
                for i, e in enumerate(v):
                    try:
                        element_decoder(e)
                    except ValueDecodeError:
                        exc.add_step(Index(i))
                        break
                raise
        if v is None or v.__class__ is Unknown:
            return v
        return _unexpected(expected, v)

    return decode_list


def _tuple_decoder(t: Tuple, dialect: Dialect) -> Decoder:
    decoders = tuple(get_decoder(e, dialect) for e in t.elements)
    size = len(decoders)

    def decode_tuple(v: Any) -> Any:
        if v.__class__ is list:
            if len(v) != size:
                raise ValueDecodeError(f"a tuple of {size} elements required, got {len(v)}")
            out = []
            for i, (decode, e) in enumerate(zip(decoders, v, strict=True)):
                try:
                    out.append(decode(e))
                except ValueDecodeError as exc:
                    exc.add_step(Index(i))
                    raise
            return out
        if v is None or v.__class__ is Unknown:
            return v
        return _unexpected("tuple", v)

    return decode_tuple


def _map_decoder(t: Map, dialect: Dialect) -> Decoder:
    element_decoder = get_decoder(t.element, dialect)
    expected = t.friendly_name()

    def decode_map(v: Any) -> Any:
        if v.__class__ is dict:
            out: dict[str, Any] = {}
            for key, e in v.items():
                if key.__class__ is not str:
                    raise ValueDecodeError(f"map keys must be strings, got {describe(key)}")
                try:
                    out[key] = element_decoder(e)
                except ValueDecodeError as exc:
                    exc.add_step(Index(key))
                    raise
            return out
        if v is None or v.__class__ is Unknown:
            return v
        return _unexpected(expected, v)

    return decode_map


def _object_decoder(t: Object, dialect: Dialect) -> Decoder:
    fields = tuple((name, get_decoder(at, dialect)) for name, at in t.attributes.items())
    size = len(fields)
    names = frozenset(t.attributes)
    # msgpack objects must carry every attribute that is not optional; JSON ones may omit any (-> null)
    may_omit = names if dialect.is_json else t.optional
    ignore_extra = dialect.ignore_extra_attributes

    def decode_object(v: Any) -> Any:
        if v.__class__ is dict:
            if len(v) == size:
                try:
                    return {name: decode(v[name]) for name, decode in fields}
                except (KeyError, ValueDecodeError):
                    pass  # the careful path below reports it with its attribute path
            return _decode_object_carefully(v, fields, may_omit, names, ignore_extra)
        if v is None or v.__class__ is Unknown:
            return v
        return _unexpected("object", v)

    return decode_object


def _decode_object_carefully(
    v: dict[str, Any],
    fields: tuple[tuple[str, Decoder], ...],
    may_omit: frozenset[str],
    names: frozenset[str],
    ignore_extra: bool,
) -> dict[str, Any]:
    if not ignore_extra:
        extra = sorted(str(k) for k in v if k not in names)
        if extra:
            raise ValueDecodeError(f"unsupported attribute {extra[0]!r}")
    out: dict[str, Any] = {}
    for name, decode in fields:
        if name not in v:
            if name in may_omit:
                out[name] = None
                continue
            raise ValueDecodeError(f"attribute {name!r} is missing (objects carry every attribute)")
        try:
            out[name] = decode(v[name])
        except ValueDecodeError as exc:
            exc.add_step(GetAttr(name))
            raise
    return out
