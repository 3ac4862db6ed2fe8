"""Hypothesis strategies: cty types, and values of a given type (optionally with unknowns nested inside)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from hypothesis import strategies as st

from provider.cty import (
    BOOL,
    DYNAMIC,
    NUMBER,
    STRING,
    UNKNOWN,
    CtyType,
    Dynamic,
    DynamicPseudoType,
    List,
    Map,
    Object,
    Set,
    Tuple,
    Unknown,
)
from provider.cty.values import _freeze

attribute_names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_0123456789", min_size=1, max_size=8)


def _object_types(inner: st.SearchStrategy[CtyType]) -> st.SearchStrategy[CtyType]:
    def with_optional(attrs: dict[str, CtyType]) -> st.SearchStrategy[CtyType]:
        if not attrs:
            return st.just(Object({}))
        return st.frozensets(st.sampled_from(sorted(attrs))).map(lambda optional: Object(attrs, optional))

    return st.dictionaries(attribute_names, inner, max_size=4).flatmap(with_optional)


def cty_types(*, dynamic: bool = True) -> st.SearchStrategy[CtyType]:
    leaves: list[CtyType] = [STRING, NUMBER, BOOL, *([DYNAMIC] if dynamic else [])]
    return st.recursive(
        st.sampled_from(leaves),
        lambda inner: st.one_of(
            inner.map(List),
            inner.map(Set),
            inner.map(Map),
            st.lists(inner, max_size=3).map(Tuple),
            _object_types(inner),
        ),
        max_leaves=8,
    )


def numbers(*, infinities: bool) -> st.SearchStrategy[Any]:
    choices = [
        st.integers(min_value=-(2**63), max_value=2**63 - 1),
        st.integers(min_value=-(2**200), max_value=2**200),  # well beyond int64 and uint64
        st.decimals(allow_nan=False, allow_infinity=False),
        st.decimals(allow_nan=False, allow_infinity=False, places=30),
        st.floats(allow_nan=False, allow_infinity=False).map(Decimal),  # exactly representable as float64
        st.sampled_from(
            [
                Decimal("0.1"),
                Decimal("1e-30"),
                Decimal("123456789012345678901234567890.5"),
                2**64,
                -(2**64) - 1,
            ]
        ),
    ]
    if infinities:
        choices.append(st.sampled_from([Decimal("Infinity"), Decimal("-Infinity")]))
    return st.one_of(*choices)


def _is_collection(t: CtyType) -> bool:
    return isinstance(t, List | Set | Map)


def unknowns_for(t: CtyType) -> st.SearchStrategy[Unknown]:
    """Plain and refined unknowns, with only the refinements that apply to `t` (what go-cty writes)."""
    if isinstance(t, DynamicPseudoType):
        return st.just(UNKNOWN)
    bound = st.none() | st.tuples(numbers(infinities=False), st.booleans())
    length = st.none() | st.integers(min_value=0, max_value=1000)
    prefix = st.none() | st.text(min_size=1, max_size=16)
    return st.builds(
        Unknown,
        not_null=st.booleans(),
        string_prefix=prefix if t == STRING else st.none(),
        number_lower=bound if t == NUMBER else st.none(),
        number_upper=bound if t == NUMBER else st.none(),
        length_lower=length if _is_collection(t) else st.none(),
        length_upper=length if _is_collection(t) else st.none(),
    )


def values_of(t: CtyType, *, unknowns: bool, infinities: bool = False) -> st.SearchStrategy[Any]:
    """Values of type `t`: null, unknown (if allowed) or known with values of the element types inside."""
    known = _known_values_of(t, unknowns=unknowns, infinities=infinities)
    options = [st.none(), known]
    if unknowns:
        options.append(unknowns_for(t))
    return st.one_of(*options)


def _known_values_of(t: CtyType, *, unknowns: bool, infinities: bool) -> st.SearchStrategy[Any]:
    def inner(et: CtyType) -> st.SearchStrategy[Any]:
        return values_of(et, unknowns=unknowns, infinities=infinities)

    if t == STRING:
        return st.text(max_size=20)
    if t == NUMBER:
        return numbers(infinities=infinities)
    if t == BOOL:
        return st.booleans()
    if isinstance(t, DynamicPseudoType):
        concrete = cty_types(dynamic=False)
        return concrete.flatmap(lambda ct: inner(ct).map(lambda v: Dynamic(ct, v)))
    if isinstance(t, List):
        return st.lists(inner(t.element), max_size=4)
    if isinstance(t, Set):
        element = t.element
        return st.lists(inner(element), max_size=4, unique_by=lambda v: _freeze(v, element))
    if isinstance(t, Map):
        return st.dictionaries(st.text(max_size=6), inner(t.element), max_size=4)
    if isinstance(t, Tuple):
        return st.tuples(*(inner(e) for e in t.elements)).map(list)
    if isinstance(t, Object):
        required = {n: inner(at) for n, at in t.attributes.items() if n not in t.optional}
        optional = {n: inner(at) for n, at in t.attributes.items() if n in t.optional}
        return st.fixed_dictionaries(required, optional=optional)
    raise AssertionError(f"no strategy for {t!r}")


def typed_values(*, unknowns: bool, infinities: bool = False) -> st.SearchStrategy[tuple[CtyType, Any]]:
    return cty_types().flatmap(
        lambda t: st.tuples(st.just(t), values_of(t, unknowns=unknowns, infinities=infinities))
    )


def fill_optional(v: Any, t: CtyType) -> Any:
    """What a decoder returns for `v`: omitted optional attributes present as null, recursively."""
    if v is None or isinstance(v, Unknown):
        return v
    if isinstance(t, Object):
        return {n: fill_optional(v.get(n), at) for n, at in t.attributes.items()}
    if isinstance(t, List | Set):
        return [fill_optional(e, t.element) for e in v]
    if isinstance(t, Map):
        return {k: fill_optional(e, t.element) for k, e in v.items()}
    if isinstance(t, Tuple):
        return [fill_optional(e, et) for e, et in zip(v, t.elements, strict=True)]
    if isinstance(t, DynamicPseudoType):
        return Dynamic(v.type, fill_optional(v.value, v.type))
    return v
