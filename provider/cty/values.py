"""Values are plain Python; the type travels separately.

null -> None; unknown -> `Unknown`; string -> str; bool -> bool; number -> int | Decimal (never float);
list/set/tuple -> list (a set is a list without duplicates, order not significant); map/object -> dict
(objects carry every attribute); a known dynamic value -> `Dynamic(type, value)`.
"""

from __future__ import annotations

from collections import Counter
from decimal import Decimal
from typing import Any, Final

from provider.cty.types import (
    CtyType,
    DynamicPseudoType,
    Map,
    Object,
    Set,
    Tuple,
    _CollectionType,
)

Number = int | Decimal
NumberBound = tuple[Number, bool]  # (bound, inclusive)


class Unknown:
    """A value not known yet, optionally refined (what Terraform 1.6+ knows about its eventual value).

    Refinements only ever narrow the possibilities, so dropping them is always safe; keeping them lets a
    provider pass Terraform's knowledge through a plan unchanged.
    """

    __slots__ = ("length_lower", "length_upper", "not_null", "number_lower", "number_upper", "string_prefix")
    not_null: bool
    string_prefix: str | None
    number_lower: NumberBound | None
    number_upper: NumberBound | None
    length_lower: int | None
    length_upper: int | None

    def __init__(
        self,
        *,
        not_null: bool = False,
        string_prefix: str | None = None,
        number_lower: NumberBound | None = None,
        number_upper: NumberBound | None = None,
        length_lower: int | None = None,
        length_upper: int | None = None,
    ) -> None:
        set_ = object.__setattr__
        set_(self, "not_null", not_null)
        set_(self, "string_prefix", string_prefix or None)
        set_(self, "number_lower", number_lower)
        set_(self, "number_upper", number_upper)
        set_(self, "length_lower", length_lower)
        set_(self, "length_upper", length_upper)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Unknown is immutable")

    @property
    def refined(self) -> bool:
        """True when any refinement is present."""
        return bool(
            self.not_null
            or self.string_prefix
            or self.number_lower is not None
            or self.number_upper is not None
            or self.length_lower is not None
            or self.length_upper is not None
        )

    def _key(self) -> tuple[Any, ...]:
        return (
            self.not_null,
            self.string_prefix,
            self.number_lower,
            self.number_upper,
            self.length_lower,
            self.length_upper,
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Unknown) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        if not self.refined:
            return "UNKNOWN"
        fields = ", ".join(
            f"{name}={value!r}"
            for name, value in zip(self.__slots__, (getattr(self, n) for n in self.__slots__), strict=True)
            if value is not None and value is not False
        )
        return f"Unknown({fields})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_make_unknown, self._key())


def _make_unknown(*key: Any) -> Unknown:
    not_null, prefix, lower, upper, len_lower, len_upper = key
    return Unknown(
        not_null=not_null,
        string_prefix=prefix,
        number_lower=lower,
        number_upper=upper,
        length_lower=len_lower,
        length_upper=len_upper,
    )


UNKNOWN: Final = Unknown()


class Dynamic:
    """A known value of a `dynamic` attribute: its concrete type travels with it."""

    __slots__ = ("type", "value")
    type: CtyType
    value: Any

    def __init__(self, type: CtyType, value: Any) -> None:
        if not isinstance(type, CtyType):
            raise TypeError(f"Dynamic type must be a CtyType, got {type!r}")
        object.__setattr__(self, "type", type)
        object.__setattr__(self, "value", value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Dynamic is immutable")

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Dynamic)
            and self.type == other.type
            and values_equal(self.value, other.value, self.type)
        )

    def __hash__(self) -> int:
        return hash((self.type, _freeze(self.value, self.type)))

    def __repr__(self) -> str:
        return f"Dynamic({self.type!r}, {self.value!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Dynamic, (self.type, self.value))


def is_unknown(v: object) -> bool:
    return isinstance(v, Unknown)


def is_null(v: object) -> bool:
    return v is None


def is_wholly_known(v: object) -> bool:
    """True when neither the value nor anything nested inside it is unknown."""
    cls = v.__class__
    if cls is list:
        return all(is_wholly_known(e) for e in v)  # type: ignore[attr-defined]
    if cls is dict:
        return all(is_wholly_known(e) for e in v.values())  # type: ignore[attr-defined]
    if cls is Dynamic:
        return is_wholly_known(v.value)  # type: ignore[attr-defined]
    return not isinstance(v, Unknown)


def values_equal(a: Any, b: Any, t: CtyType) -> bool:
    """Structural equality under type `t`.

    Sets compare without regard to order; numbers compare by value (1 == Decimal("1.0")); null equals only
    null; an unknown equals any unknown (refinements are ignored: they say nothing about identity).
    """
    if a is b:
        return True
    return bool(_freeze(a, t) == _freeze(b, t))


class _UnknownMarker:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<unknown>"


_UNKNOWN_MARKER: Final = _UnknownMarker()


def _freeze(v: Any, t: CtyType) -> Any:
    """A hashable canonical form whose equality is cty equality (under the rules of `values_equal`)."""
    if v is None:
        return None
    if isinstance(v, Unknown):
        return _UNKNOWN_MARKER
    if t.__class__ is DynamicPseudoType:
        if isinstance(v, Dynamic):
            return ("dynamic", v.type, _freeze(v.value, v.type))
        return ("raw", _freeze_untyped(v))
    if isinstance(t, Object):
        if v.__class__ is not dict:
            return ("invalid", _freeze_untyped(v))
        return tuple((name, _freeze(v.get(name), at)) for name, at in t.attributes.items())
    if isinstance(t, Tuple):
        if v.__class__ is not list:
            return ("invalid", _freeze_untyped(v))
        return (*(_freeze(e, et) for e, et in zip(v, t.elements, strict=False)), len(v))
    if isinstance(t, _CollectionType):
        et = t.element
        if isinstance(t, Map):
            if v.__class__ is not dict:
                return ("invalid", _freeze_untyped(v))
            return frozenset((k, _freeze(e, et)) for k, e in v.items())
        if v.__class__ is not list:
            return ("invalid", _freeze_untyped(v))
        if isinstance(t, Set):
            return frozenset(Counter(_freeze(e, et) for e in v).items())
        return tuple(_freeze(e, et) for e in v)
    if v.__class__ is bool:
        # keep True distinct from the number 1 should a malformed value mix them
        return ("bool", v)
    return v


def _freeze_untyped(v: Any) -> Any:
    if v.__class__ is list:
        return tuple(_freeze_untyped(e) for e in v)
    if v.__class__ is dict:
        return frozenset((k, _freeze_untyped(e)) for k, e in v.items())
    if isinstance(v, Unknown):
        return _UNKNOWN_MARKER
    if isinstance(v, Dynamic):
        return ("dynamic", v.type, _freeze(v.value, v.type))
    return v


__all__ = [
    "UNKNOWN",
    "Dynamic",
    "Number",
    "NumberBound",
    "Unknown",
    "is_null",
    "is_unknown",
    "is_wholly_known",
    "values_equal",
]
