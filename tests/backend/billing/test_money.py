from decimal import Decimal

import pytest

from backend.billing.money import (
    micros_to_usd,
    prorate_micros,
    quantize_usd,
    round_micros,
    to_decimal,
    usd_to_micros,
)


def test_usd_to_micros_is_exact_and_refuses_sub_micro_amounts() -> None:
    assert usd_to_micros("1866.24") == 1_866_240_000
    assert usd_to_micros(Decimal("0.000001")) == 1
    with pytest.raises(ValueError, match="six decimals"):
        usd_to_micros("0.0000001")


def test_to_decimal_refuses_floats_and_garbage() -> None:
    with pytest.raises(TypeError):
        to_decimal(0.1)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        to_decimal("abc")
    with pytest.raises(ValueError):
        to_decimal("NaN")


def test_micros_to_usd_has_six_decimals() -> None:
    assert micros_to_usd(74_613_000) == Decimal("74.613000")
    assert str(micros_to_usd(1)) == "0.000001"
    assert micros_to_usd(-5) == Decimal("-0.000005")


def test_round_micros_rounds_half_up_once() -> None:
    assert round_micros(Decimal("0.0000005")) == 1
    assert round_micros(Decimal("0.00000049999")) == 0


def test_prorate_micros_per_second() -> None:
    # One 8-GPU node at 3.99 per GPU-hour for 8415 s: 31.92 * 8415 / 3600 = 74.613 exactly.
    assert prorate_micros(Decimal("3.99"), 8, 8415) == 74_613_000
    # One second of a 1-GPU node at 4.29: 0.0011916... rounds to 1192 micro-dollars.
    assert prorate_micros(Decimal("4.29"), 1, 1) == 1192
    assert prorate_micros(Decimal("4.29"), 1, 0) == 0
    with pytest.raises(ValueError):
        prorate_micros(Decimal("1"), 1, -1)


def test_sum_of_rounded_seconds_can_differ_from_rounded_total_so_lines_are_rounded_once() -> None:
    # Summing 3600 one-second items would accumulate rounding; the meter charges whole slices instead.
    assert prorate_micros(Decimal("4.29"), 1, 3600) == 4_290_000
    assert 3600 * prorate_micros(Decimal("4.29"), 1, 1) != 4_290_000


def test_quantize_usd() -> None:
    assert quantize_usd(Decimal("1.2345675")) == Decimal("1.234568")
