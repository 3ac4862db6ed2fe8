"""Attribute validators. Each one skips null and unknown values (Terraform validates configurations that
are not fully known yet) and reports an error diagnostic carrying the attribute path.

Usage: `StringAttribute(required=True, validators=[string_length(min=1, max=63)])`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from decimal import Decimal
from typing import Any, Protocol

from provider.cty import AttributePath, GetAttr, format_path, is_unknown
from provider.framework.diagnostics import Diagnostics


class Validator(Protocol):
    description: str

    def validate(self, value: Any, path: AttributePath, diags: Diagnostics) -> None: ...


class ValueValidator:
    """Base for validators that look at one known, non-null value."""

    summary = "Invalid Attribute Value"

    def __init__(self, description: str, check: Callable[[Any], bool]) -> None:
        self.description = description
        self._check = check

    def validate(self, value: Any, path: AttributePath, diags: Diagnostics) -> None:
        if value is None or is_unknown(value):
            return
        if not self._check(value):
            diags.error(
                self.summary, f"Attribute {format_path(path)} {self.description}, got: {_show(value)}", path
            )


def _show(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list):
        return f"{len(value)} elements"
    if isinstance(value, dict):
        return f"{len(value)} elements"
    return str(value)


def _between_text(noun: str, min: Any, max: Any) -> str:
    if min is not None and max is not None:
        return f"{noun} must be between {min} and {max}"
    if min is not None:
        return f"{noun} must be at least {min}"
    return f"{noun} must be at most {max}"


def _in_range(v: Any, min: Any, max: Any) -> bool:
    return (min is None or v >= min) and (max is None or v <= max)


# -- strings -----------------------------------------------------------------------------------------


def string_length(*, min: int | None = None, max: int | None = None) -> ValueValidator:
    v = ValueValidator(_between_text("string length", min, max), lambda s: _in_range(len(s), min, max))
    v.summary = "Invalid Attribute Value Length"
    return v


def string_one_of(*values: str) -> ValueValidator:
    shown = ", ".join(f'"{x}"' for x in values)
    v = ValueValidator(f"value must be one of: [{shown}]", lambda s: s in values)
    v.summary = "Invalid Attribute Value Match"
    return v


def string_none_of(*values: str) -> ValueValidator:
    shown = ", ".join(f'"{x}"' for x in values)
    v = ValueValidator(f"value must be none of: [{shown}]", lambda s: s not in values)
    v.summary = "Invalid Attribute Value Match"
    return v


def string_matches(pattern: str, message: str = "") -> ValueValidator:
    rx = re.compile(pattern)
    v = ValueValidator(
        message or f"value must match the regular expression '{pattern}'",
        lambda s: rx.fullmatch(s) is not None,
    )
    v.summary = "Invalid Attribute Value Match"
    return v


# -- numbers -----------------------------------------------------------------------------------------


def int_between(min: int | None = None, max: int | None = None) -> ValueValidator:
    return ValueValidator(_between_text("value", min, max), lambda n: _in_range(n, min, max))


def int_at_least(min: int) -> ValueValidator:
    return int_between(min=min)


def int_at_most(max: int) -> ValueValidator:
    return int_between(max=max)


def int_one_of(*values: int) -> ValueValidator:
    return ValueValidator(f"value must be one of: {list(values)}", lambda n: n in values)


def number_between(min: float | Decimal | None = None, max: float | Decimal | None = None) -> ValueValidator:
    lo = None if min is None else Decimal(str(min))
    hi = None if max is None else Decimal(str(max))
    return ValueValidator(_between_text("value", min, max), lambda n: _in_range(Decimal(n), lo, hi))


def number_greater_than(min: Decimal | int) -> ValueValidator:
    bound = Decimal(str(min))
    return ValueValidator(f"value must be greater than {min}", lambda n: Decimal(n) > bound)


def decimal_digits(*, max_digits: int | None = None, decimal_places: int | None = None) -> ValueValidator:
    """At most `decimal_places` digits after the point and `max_digits` in all, trailing zeros ignored
    (how Python's Decimal and pydantic count them)."""
    parts = [f"{decimal_places} decimal places"] if decimal_places is not None else []
    parts += [f"{max_digits} digits in all"] if max_digits is not None else []
    return ValueValidator(
        f"must have at most {' and '.join(parts)}",
        lambda n: _digits_fit(Decimal(str(n)), max_digits, decimal_places),
    )


def _digits_fit(value: Decimal, max_digits: int | None, decimal_places: int | None) -> bool:
    if not value.is_finite():
        return False
    _sign, digits, exponent = value.normalize().as_tuple()
    assert isinstance(exponent, int)
    if exponent >= 0:
        places, total = 0, len(digits) + exponent
    else:
        places = -exponent
        total = max(len(digits), places)
    places_fit = decimal_places is None or places <= decimal_places
    return places_fit and (max_digits is None or total <= max_digits)


# -- collections -------------------------------------------------------------------------------------


def size_between(min: int | None = None, max: int | None = None) -> ValueValidator:
    """Number of elements of a list, set or map (also a list/set block)."""
    return ValueValidator(_size_text(min, max), lambda c: _in_range(len(c), min, max))


def _size_text(min: int | None, max: int | None) -> str:
    if min is not None and max is not None:
        return f"must contain at least {min} and at most {max} elements"
    if min is not None:
        return f"must contain at least {min} elements"
    return f"must contain at most {max} elements"


def size_at_least(min: int) -> ValueValidator:
    return size_between(min=min)


def size_at_most(max: int) -> ValueValidator:
    return size_between(max=max)


class EachElement:
    """Applies validators to every known element of a list, set or map."""

    def __init__(self, validators: Sequence[Validator]) -> None:
        self.validators = tuple(validators)
        self.description = "every element: " + "; ".join(v.description for v in validators)

    def validate(self, value: Any, path: AttributePath, diags: Diagnostics) -> None:
        if value is None or is_unknown(value):
            return
        items: Iterable[tuple[Any, Any]] = value.items() if isinstance(value, dict) else enumerate(value)
        for key, element in items:
            for v in self.validators:
                v.validate(element, path.element(key), diags)


def each_element(*validators: Validator) -> EachElement:
    return EachElement(validators)


class EachKey:
    """Applies string validators to every key of a map; errors name the map element."""

    def __init__(self, validators: Sequence[Validator]) -> None:
        self.validators = tuple(validators)
        self.description = "every key: " + "; ".join(v.description for v in validators)

    def validate(self, value: Any, path: AttributePath, diags: Diagnostics) -> None:
        if not isinstance(value, dict):
            return
        for key in value:
            for v in self.validators:
                v.validate(key, path.element(key), diags)


def each_key(*validators: Validator) -> EachKey:
    return EachKey(validators)


class FirstFailure:
    """Runs validators in order and stops at the first that reports an error: a value that breaks an
    early rule (a secret pasted in the wrong place) is not described again, or echoed, by later ones."""

    def __init__(self, validators: Sequence[Validator]) -> None:
        self.validators = tuple(validators)
        self.description = "; ".join(v.description for v in validators)

    def validate(self, value: Any, path: AttributePath, diags: Diagnostics) -> None:
        for v in self.validators:
            found = Diagnostics()
            v.validate(value, path, found)
            diags.extend(found)
            if any(d.severity == "error" for d in found):
                return


def first_failure(*validators: Validator) -> FirstFailure:
    return FirstFailure(validators)


def custom(
    description: str, check: Callable[[Any], bool], summary: str = "Invalid Attribute Value"
) -> ValueValidator:
    """A one-off validator: `check(value)` is called only for known, non-null values."""
    v = ValueValidator(description, check)
    v.summary = summary
    return v


# -- whole-configuration validators (Resource/DataSource/EphemeralResource/Provider.config_validators) --


class ConfigValidator(Protocol):
    description: str

    def validate(self, config: dict[str, Any], diags: Diagnostics) -> None: ...


class _AttributeSet:
    """Checks how many of some top-level attributes are set; unknown values count as "maybe"."""

    def __init__(self, names: Sequence[str], rule: str, description: str) -> None:
        self.names = tuple(names)
        self.rule = rule
        self.description = description

    def validate(self, config: dict[str, Any], diags: Diagnostics) -> None:
        values = [config.get(n) for n in self.names]
        if any(is_unknown(v) for v in values):
            return
        present = [n for n, v in zip(self.names, values, strict=True) if v is not None and v != []]
        shown = ", ".join(self.names)
        if self.rule == "conflicting" and len(present) > 1:
            diags.error(
                "Invalid Attribute Combination",
                f"Only one of these attributes may be set: {shown} (got {', '.join(present)}).",
                AttributePath((GetAttr(present[1]),)),
            )
        elif self.rule == "exactly_one_of" and len(present) != 1:
            diags.error(
                "Invalid Attribute Combination",
                f"Exactly one of these attributes must be set: {shown}.",
                AttributePath((GetAttr(present[1]),)) if len(present) > 1 else None,
            )
        elif self.rule == "at_least_one_of" and not present:
            diags.error(
                "Missing Attribute Configuration", f"At least one of these attributes must be set: {shown}."
            )
        elif self.rule == "required_together" and 0 < len(present) < len(self.names):
            missing = [n for n in self.names if n not in present]
            diags.error(
                "Invalid Attribute Combination",
                f"These attributes must be set together: {shown} ({', '.join(missing)} missing).",
                AttributePath((GetAttr(missing[0]),)),
            )


def conflicting(*names: str) -> ConfigValidator:
    return _AttributeSet(names, "conflicting", f"at most one of {', '.join(names)}")


def exactly_one_of(*names: str) -> ConfigValidator:
    return _AttributeSet(names, "exactly_one_of", f"exactly one of {', '.join(names)}")


def at_least_one_of(*names: str) -> ConfigValidator:
    return _AttributeSet(names, "at_least_one_of", f"at least one of {', '.join(names)}")


def required_together(*names: str) -> ConfigValidator:
    return _AttributeSet(names, "required_together", f"all or none of {', '.join(names)}")
