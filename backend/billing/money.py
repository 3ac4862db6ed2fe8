"""Money arithmetic: amounts are integer micro-dollars, prices are Decimal USD. Never float.

Rounding rules (the only places money is rounded):
- A line item's amount is computed exactly in Decimal (price x units x seconds / 3600) and rounded once,
  half-up, to a whole micro-dollar (`prorate_micros`). Totals are sums of rounded line items, so an
  invoice always equals the sum of its lines.
- Displayed USD values are micro-dollars divided by 10**6, exact (`micros_to_usd`), six decimals.
- Estimates (hourly rates) are exact Decimals, rounded half-up to six decimals for display only.
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Context, Decimal, InvalidOperation

MICROS_PER_USD = 1_000_000
SECONDS_PER_HOUR = 3600
USD_QUANTUM = Decimal("0.000001")

# Enough digits for any realistic price x quantity x seconds product without silent rounding.
_EXACT = Context(prec=60, rounding=ROUND_HALF_UP)


def to_decimal(value: Decimal | int | str) -> Decimal:
    """A Decimal from an int, a Decimal or a decimal string; floats are refused (binary rounding)."""
    if isinstance(value, float):  # pragma: no cover - guarded by the type hint, kept for runtime callers
        raise TypeError("money must not be a float; pass a Decimal or a string")
    try:
        result = Decimal(value)
    except InvalidOperation as exc:
        raise ValueError(f"not a decimal amount: {value!r}") from exc
    if not result.is_finite():
        raise ValueError(f"not a finite amount: {value!r}")
    return result


def round_micros(usd: Decimal) -> int:
    """USD (any precision) to whole micro-dollars, half-up."""
    return int((usd * MICROS_PER_USD).quantize(Decimal(1), rounding=ROUND_HALF_UP, context=_EXACT))


def usd_to_micros(usd: Decimal | int | str) -> int:
    """Exact conversion of a USD amount with at most six decimals; more precision is an error."""
    value = to_decimal(usd)
    micros = value * MICROS_PER_USD
    if micros != micros.to_integral_value():
        raise ValueError(f"{value} USD has more than six decimals")
    return int(micros)


def micros_to_usd(micros: int) -> Decimal:
    """Exact USD value of an amount in micro-dollars, with six decimals."""
    return (Decimal(micros) / MICROS_PER_USD).quantize(USD_QUANTUM, context=_EXACT)


def prorate_micros(price_per_unit_hour: Decimal, units: Decimal | int, seconds: int) -> int:
    """Amount for `units` (GPUs, TiB) used for `seconds` at `price_per_unit_hour` USD, rounded once."""
    if seconds < 0:
        raise ValueError("seconds must be >= 0")
    exact = _EXACT.divide(
        _EXACT.multiply(_EXACT.multiply(price_per_unit_hour, Decimal(units)), seconds), SECONDS_PER_HOUR
    )
    return round_micros(exact)


def quantize_usd(usd: Decimal) -> Decimal:
    """A USD figure rounded half-up to six decimals, for display."""
    return usd.quantize(USD_QUANTUM, rounding=ROUND_HALF_UP, context=_EXACT)


def usd_text(usd: Decimal) -> str:
    """A price or rate as the API writes it: exact (never rounded), trailing zeros dropped, never an
    exponent ("3.591", "100", not "3.59" or "1E+2")."""
    text = format(usd, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def money_text_pattern(*, decimal_places: int, signed: bool = False) -> str:
    """The regular expression of a money string: digits, an optional point with 1..`decimal_places`
    decimals, a leading minus only where negatives make sense; no exponent, sign "+" or blanks."""
    sign = "-?" if signed else ""
    return rf"^{sign}[0-9]+(\.[0-9]{{1,{decimal_places}}})?$"


def parse_money_text(text: str, *, decimal_places: int, signed: bool = False) -> Decimal:
    """A money string as Decimal; ValueError saying the expected form when it is not one."""
    if not re.fullmatch(money_text_pattern(decimal_places=decimal_places, signed=signed), text):
        example = "-12.5" if signed else "12.5"
        raise ValueError(
            f"expected a plain decimal string such as \"{example}\": digits with up to {decimal_places} "
            f"decimals, no exponent, no spaces{'' if signed else ', no sign'}; got {text!r}"
        )
    return Decimal(text)
