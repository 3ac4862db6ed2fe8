"""Arbitrary-precision numbers on the wire.

go-cty writes a number as an int64 when it is one, as a float64 when that is exact, and otherwise as a
decimal string. We do the same, and read all three back without loss: floats become the exact Decimal of
their binary value (so writing it back yields the same float64), strings become int or Decimal.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from provider.cty.values import Number

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
# Beyond this many digits an integral Decimal is written as text instead of being expanded to an int.
_MAX_EXPANDED_DIGITS = 400


class NumberError(ValueError):
    pass


def _int_to_wire(v: int) -> int | float | str:
    if _INT64_MIN <= v <= _INT64_MAX:
        return v
    try:
        f = float(v)
    except OverflowError:
        return str(v)
    return f if int(f) == v else str(v)


def number_to_msgpack(v: object) -> int | float | str:
    """int, exact float64, or decimal text; raises NumberError for anything that is not a cty number."""
    cls = v.__class__
    if cls is int:
        return _int_to_wire(v)  # type: ignore[arg-type]
    if cls is Decimal:
        d: Decimal = v  # type: ignore[assignment]
        if not d.is_finite():
            if d.is_nan():
                raise NumberError("NaN is not a valid number")
            return float(d)
        if d == d.to_integral_value() and d.adjusted() < _MAX_EXPANDED_DIGITS:
            return _int_to_wire(int(d))
        f = float(d)
        if Decimal(f) == d:
            return f
        return _decimal_text(d)
    if isinstance(v, int) and not isinstance(v, bool):  # int subclasses such as IntEnum
        return _int_to_wire(int(v))
    if isinstance(v, Decimal):
        return number_to_msgpack(Decimal(v))
    raise NumberError(f"a number (int or Decimal) is required, got {type(v).__name__}")


def _decimal_text(d: Decimal) -> str:
    """Positional digits like go-cty writes; scientific notation only for extreme exponents."""
    if -_MAX_EXPANDED_DIGITS < d.adjusted() < _MAX_EXPANDED_DIGITS:
        return format(d, "f")
    return str(d)


def number_to_json_text(v: object) -> str:
    """JSON number text: integers in full, other values in positional decimal notation."""
    if v.__class__ is int or (isinstance(v, int) and not isinstance(v, bool)):
        return str(int(v))
    if isinstance(v, Decimal):
        if not v.is_finite():
            raise NumberError(f"{v} cannot be written as JSON")
        if v == v.to_integral_value() and v.adjusted() < _MAX_EXPANDED_DIGITS:
            return str(int(v))
        return _decimal_text(v)
    raise NumberError(f"a number (int or Decimal) is required, got {type(v).__name__}")


def float_to_number(f: float) -> Number:
    if f != f:
        raise NumberError("NaN is not a valid number")
    if f.is_integer():  # also beyond int64: go-cty writes big integers as float64 when exact
        return int(f)
    return Decimal(f)


def parse_number(text: str) -> Number:
    """Decimal text (go-cty writes `%f`-style digits; exponents accepted) to int or Decimal."""
    stripped = text.strip()
    if not stripped or "_" in stripped:
        raise NumberError(f"{text!r} is not a number")
    body = stripped[1:] if stripped[0] in "+-" else stripped
    if body.isdigit() and body.isascii() and len(body) <= 4000:
        return int(stripped)
    try:
        d = Decimal(stripped)
    except InvalidOperation:
        raise NumberError(f"{text!r} is not a number") from None
    if d.is_nan():
        raise NumberError(f"{text!r} is not a number")
    return d


def number_from_wire(v: object) -> Number:
    """A number as msgpack or JSON hands it over: int, float, Decimal or decimal text."""
    cls = v.__class__
    if cls is int:
        return v  # type: ignore[return-value]
    if cls is float:
        return float_to_number(v)  # type: ignore[arg-type]
    if cls is str:
        return parse_number(v)  # type: ignore[arg-type]
    if cls is Decimal:
        if v.is_nan():  # type: ignore[attr-defined]
            raise NumberError("NaN is not a valid number")
        return v  # type: ignore[return-value]
    raise NumberError(f"a number is required, got {type(v).__name__}")
