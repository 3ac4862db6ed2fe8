"""msgpack codec: the DynamicValue encoding Terraform speaks (go-cty's `cty/msgpack`).

Encoding compiles, once per type, a function turning our Python value into a structure msgpack can pack
(unknowns become extension values, big numbers become text, dynamic values become `[type JSON, value]`)
while checking the value against the type; decoding unpacks with msgpack's C code and then runs the
per-type decoder from `_decoders`. Errors carry the attribute path of the offending value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import msgpack

from provider.cty._decoders import MAX_CACHED_CODECS, MSGPACK_DIALECT, describe, get_decoder
from provider.cty._numbers import NumberError, number_from_wire, number_to_msgpack
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
from provider.cty.values import UNKNOWN, Dynamic, Unknown

Encoder = Callable[[Any], Any]

# ---- unknown values ------------------------------------------------------------------------------------

_PLAIN_UNKNOWN_EXT: Final = msgpack.ExtType(0, b"\x00")
_REFINED_UNKNOWN_CODE: Final = 12
_NULLNESS, _STRING_PREFIX, _NUMBER_MIN, _NUMBER_MAX, _LENGTH_MIN, _LENGTH_MAX = 1, 2, 3, 4, 5, 6
# Terraform rejects refinement payloads over 1 KiB; a shorter prefix is a weaker but still true refinement.
_MAX_PREFIX_BYTES: Final = 256

# Which refinements apply to a type (others are dropped on encode, as go-cty does).
_KIND_DYNAMIC, _KIND_STRING, _KIND_NUMBER, _KIND_COLLECTION, _KIND_OTHER = range(5)


def _unknown_ext(u: Unknown, kind: int) -> msgpack.ExtType:
    if u is UNKNOWN or kind == _KIND_DYNAMIC or not u.refined:
        return _PLAIN_UNKNOWN_EXT
    payload: dict[int, Any] = {}
    if u.not_null:
        payload[_NULLNESS] = False  # the key holds "is null"; false means definitely not null
    if kind == _KIND_STRING and u.string_prefix:
        payload[_STRING_PREFIX] = _truncate_utf8(u.string_prefix, _MAX_PREFIX_BYTES)
    elif kind == _KIND_NUMBER:
        for key, bound in ((_NUMBER_MIN, u.number_lower), (_NUMBER_MAX, u.number_upper)):
            if bound is not None:
                payload[key] = [number_to_msgpack(bound[0]), bool(bound[1])]
    elif kind == _KIND_COLLECTION:
        if u.length_lower is not None:
            payload[_LENGTH_MIN] = u.length_lower
        if u.length_upper is not None:
            payload[_LENGTH_MAX] = u.length_upper
    if not payload:
        return _PLAIN_UNKNOWN_EXT
    return msgpack.ExtType(_REFINED_UNKNOWN_CODE, msgpack.packb(payload))


def _truncate_utf8(text: str, limit: int) -> str:
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[:limit].decode(errors="ignore")


def _ext_hook(code: int, data: bytes) -> Unknown | None:
    """Every extension value is an unknown (go-cty has no other); code 12 carries refinements.

    Refinements only narrow what the value may become, so a payload we cannot make sense of is dropped
    (leaving a plain unknown) rather than failing the whole request.
    """
    if code != _REFINED_UNKNOWN_CODE or len(data) <= 1:
        return UNKNOWN
    unpacker = msgpack.Unpacker(strict_map_key=False, raw=False)
    unpacker.feed(data)
    try:
        refinements = next(unpacker)  # go-cty ignores bytes after the map: so do we
    except Exception:
        return UNKNOWN
    if not isinstance(refinements, dict):
        return UNKNOWN
    try:
        return _unknown_from_refinements(refinements)
    except (_MalformedRefinement, NumberError):
        return UNKNOWN


class _MalformedRefinement(Exception):
    pass


def _unknown_from_refinements(refinements: dict[Any, Any]) -> Unknown | None:
    fields: dict[str, Any] = {}
    for key, value in refinements.items():
        if key == _NULLNESS:
            if value is True:
                return None  # "definitely null" collapses to a known null
            if value is not False:
                raise _MalformedRefinement("nullness is not a bool")
            fields["not_null"] = True
        elif key == _STRING_PREFIX:
            if not isinstance(value, str):
                raise _MalformedRefinement("string prefix is not a string")
            fields["string_prefix"] = value
        elif key in (_NUMBER_MIN, _NUMBER_MAX):
            if not (isinstance(value, list) and len(value) == 2 and isinstance(value[1], bool)):
                raise _MalformedRefinement("a number bound is [number, bool]")
            bound = (number_from_wire(value[0]), value[1])
            fields["number_lower" if key == _NUMBER_MIN else "number_upper"] = bound
        elif key in (_LENGTH_MIN, _LENGTH_MAX):
            if value.__class__ is not int:
                raise _MalformedRefinement("a length bound is an integer")
            fields["length_lower" if key == _LENGTH_MIN else "length_upper"] = value
        # unknown keys are ignored: future Terraform versions may add refinements
    return Unknown(**fields) if fields else UNKNOWN


# ---- encoding ------------------------------------------------------------------------------------------

_ENCODERS: dict[CtyType, Encoder] = {}


def encode_msgpack(value: Any, t: CtyType) -> bytes:
    """Encode `value` of type `t` as Terraform's msgpack DynamicValue bytes."""
    encoder = _ENCODERS.get(t) or _encoder(t)
    packable = encoder(value)
    try:
        return msgpack.packb(packable, use_bin_type=True)  # type: ignore[no-any-return]
    except (TypeError, ValueError, OverflowError) as exc:  # a malformed value slipped past the checks
        raise ValueEncodeError(f"cannot encode value: {exc}") from None


def _encoder(t: CtyType) -> Encoder:
    encoder = _ENCODERS.get(t)
    if encoder is None:
        encoder = _compile_encoder(t)
        if len(_ENCODERS) >= MAX_CACHED_CODECS:  # dynamic values can bring endless new types
            _ENCODERS.clear()
        _ENCODERS[t] = encoder
    return encoder


def _mismatch(expected: str, v: Any) -> ValueEncodeError:
    return ValueEncodeError(f"{expected} required, got {describe(v)}")


def _compile_encoder(t: CtyType) -> Encoder:
    if t == STRING:
        return _encode_string
    if t == NUMBER:
        return _encode_number
    if t == BOOL:
        return _encode_bool
    if isinstance(t, DynamicPseudoType):
        return _encode_dynamic
    if isinstance(t, List | Set):
        return _list_encoder(t)
    if isinstance(t, Map):
        return _map_encoder(t)
    if isinstance(t, Tuple):
        return _tuple_encoder(t)
    if isinstance(t, Object):
        return _object_encoder(t)
    raise TypeError(f"unsupported cty type {t!r}")


def _encode_string(v: Any) -> Any:
    if v.__class__ is str or v is None:
        return v
    if isinstance(v, Unknown):
        return _unknown_ext(v, _KIND_STRING)
    if isinstance(v, str):
        return str(v)
    raise _mismatch("string", v)


def _encode_number(v: Any) -> Any:
    if v is None:
        return None
    if isinstance(v, Unknown):
        return _unknown_ext(v, _KIND_NUMBER)
    try:
        return number_to_msgpack(v)
    except NumberError as exc:
        raise ValueEncodeError(str(exc)) from None


def _encode_bool(v: Any) -> Any:
    if v is True or v is False or v is None:
        return v
    if isinstance(v, Unknown):
        return _unknown_ext(v, _KIND_OTHER)
    raise _mismatch("bool", v)


def _encode_dynamic(v: Any) -> Any:
    if v.__class__ is Dynamic:
        if isinstance(v.type, DynamicPseudoType):
            raise ValueEncodeError("a Dynamic value needs a concrete type, not dynamic")
        return [type_to_json(v.type), _encoder(v.type)(v.value)]
    if v is None:
        return None
    if isinstance(v, Unknown):
        return _PLAIN_UNKNOWN_EXT
    raise _mismatch("Dynamic(type, value)", v)


def _list_encoder(t: List | Set) -> Encoder:
    element_encoder = _encoder(t.element)
    expected = t.friendly_name()
    accepted: tuple[type[Any], ...] = (list, tuple, set, frozenset) if isinstance(t, Set) else (list, tuple)

    def encode_list(v: Any) -> Any:
        if v.__class__ is list or isinstance(v, accepted):
            try:
                return [element_encoder(e) for e in v]
            except ValueEncodeError as exc:
                _locate_element_error(v, element_encoder, exc)
                raise
        if v is None:
            return None
        if isinstance(v, Unknown):
            return _unknown_ext(v, _KIND_COLLECTION)
        raise _mismatch(expected, v)

    return encode_list


def _locate_element_error(v: Any, element_encoder: Encoder, exc: ValueEncodeError) -> None:
    """Error path only: find which element failed (encoders are pure, so re-running is safe)."""
    for i, e in enumerate(v):
        try:
            element_encoder(e)
        except ValueEncodeError:
            exc.add_step(Index(i))
            return


def _tuple_encoder(t: Tuple) -> Encoder:
    encoders = tuple(_encoder(e) for e in t.elements)
    size = len(encoders)

    def encode_tuple(v: Any) -> Any:
        if v.__class__ is list or isinstance(v, list | tuple):
            if len(v) != size:
                raise ValueEncodeError(f"a tuple of {size} elements required, got {len(v)}")
            out = []
            for i, (encode, e) in enumerate(zip(encoders, v, strict=True)):
                try:
                    out.append(encode(e))
                except ValueEncodeError as exc:
                    exc.add_step(Index(i))
                    raise
            return out
        if v is None:
            return None
        if isinstance(v, Unknown):
            return _unknown_ext(v, _KIND_OTHER)
        raise _mismatch("tuple", v)

    return encode_tuple


def _map_encoder(t: Map) -> Encoder:
    element_encoder = _encoder(t.element)
    expected = t.friendly_name()

    def encode_map(v: Any) -> Any:
        if v.__class__ is dict:
            out: dict[str, Any] = {}
            for key, e in v.items():
                if key.__class__ is not str:
                    raise ValueEncodeError(f"map keys must be strings, got {describe(key)}")
                try:
                    out[key] = element_encoder(e)
                except ValueEncodeError as exc:
                    exc.add_step(Index(key))
                    raise
            return out
        if v is None:
            return None
        if isinstance(v, Unknown):
            return _unknown_ext(v, _KIND_COLLECTION)
        raise _mismatch(expected, v)

    return encode_map


def _object_encoder(t: Object) -> Encoder:
    fields = tuple((name, _encoder(at)) for name, at in t.attributes.items())
    optional = t.optional
    size = len(fields)
    names = frozenset(t.attributes)

    def encode_object(v: Any) -> Any:
        if v.__class__ is dict:
            if len(v) == size:
                try:
                    return {name: encode(v[name]) for name, encode in fields}
                except (KeyError, ValueEncodeError):
                    pass  # the careful path below reports it with its attribute path
            return _encode_object_carefully(v, fields, optional, names)
        if v is None:
            return None
        if isinstance(v, Unknown):
            return _unknown_ext(v, _KIND_OTHER)
        raise _mismatch("object", v)

    return encode_object


def _encode_object_carefully(
    v: dict[str, Any],
    fields: tuple[tuple[str, Encoder], ...],
    optional: frozenset[str],
    names: frozenset[str],
) -> dict[str, Any]:
    extra = sorted(k for k in v if k not in names)
    if extra:
        raise ValueEncodeError(f"unsupported attribute {extra[0]!r}")
    out: dict[str, Any] = {}
    for name, encode in fields:
        if name not in v:
            if name in optional:
                out[name] = None
                continue
            raise ValueEncodeError(f"attribute {name!r} is required (objects carry every attribute)")
        try:
            out[name] = encode(v[name])
        except ValueEncodeError as exc:
            exc.add_step(GetAttr(name))
            raise
    return out


# ---- decoding ------------------------------------------------------------------------------------------


def decode_msgpack(data: bytes, t: CtyType) -> Any:
    """Decode Terraform's msgpack DynamicValue bytes as a value of type `t`."""
    try:
        raw = msgpack.unpackb(data, raw=False, ext_hook=_ext_hook, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated classes for malformed input
        raise ValueDecodeError(f"malformed msgpack: {exc}") from None
    return get_decoder(t, MSGPACK_DIALECT)(raw)


__all__ = ["decode_msgpack", "encode_msgpack"]
