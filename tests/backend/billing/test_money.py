from decimal import Decimal

import pytest
from fastapi.testclient import TestClient

from backend.billing.money import (
    micros_to_usd,
    parse_money_text,
    prorate_micros,
    quantize_usd,
    round_micros,
    to_decimal,
    usd_text,
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


def test_usd_text_is_exact_without_exponent() -> None:
    assert [usd_text(Decimal(v)) for v in ("3.591", "100.000000", "12.7680", "0", "0.000001")] == [
        "3.591", "100", "12.768", "0", "0.000001"]


@pytest.mark.parametrize("text", ["1e3", "1E3", " 5", "5 ", "+5", "-5", ".5", "5.", "5.12345", "0x10", "NaN",
                                  "Infinity", "1_000", "\uff15"])  # a fullwidth 5
def test_parse_money_text_refuses_anything_but_plain_decimals(text: str) -> None:
    with pytest.raises(ValueError, match="plain decimal string"):
        parse_money_text(text, decimal_places=4)


def test_parse_money_text_reads_plain_decimals_and_signs_only_where_allowed() -> None:
    assert parse_money_text("1000.25", decimal_places=4) == Decimal("1000.25")
    assert parse_money_text("7", decimal_places=2) == Decimal(7)
    assert parse_money_text("-2.5", decimal_places=2, signed=True) == Decimal("-2.5")


# (method, path, body without the amount, the money field, its decimals)
MONEY_FIELDS: tuple[tuple[str, str, dict[str, object], str, int], ...] = (
    ("POST", "/v1/clusters", {"name": "c", "region": "us-east-1", "instance_type": "8xH100"},
     "max_hourly_cost_usd", 4),
    ("POST", "/v1/pricing/estimate", {"region": "us-east-1", "instance_type": "8xH100"},
     "max_hourly_cost_usd", 4),
    ("POST", "/v1/billing/credits", {}, "amount_usd", 6),
    ("POST", "/v1/budgets", {"name": "b", "thresholds": [50], "action": "notify"}, "amount_usd", 2),
)


@pytest.mark.parametrize(("method", "path", "body", "field", "places"), MONEY_FIELDS)
def test_money_fields_refuse_exponents_and_padding_naming_the_field(
    admin: TestClient, method: str, path: str, body: dict[str, object], field: str, places: int
) -> None:
    for bad in ("1e3", " 5", "5 ", "+5", "1" + "." + "1" * (places + 1)):
        response = admin.request(method, path, json={**body, field: bad})
        assert response.status_code == 422, (field, bad, response.text)
        problem = response.json()
        assert problem["field"] == field, problem
        assert "plain decimal string" in problem["detail"] and f"up to {places} decimals" in problem["detail"]
    # The documented forms still pass: a plain decimal string and a JSON number.
    for good in ("100.5", 100):
        response = admin.request(method, path, json={**body, field: good})
        assert response.status_code in (200, 201), (field, good, response.text)
        if path == "/v1/clusters":
            admin.delete(f"/v1/clusters/{response.json()['id']}")
            body = {**body, "name": f"c{good}".replace(".", "-")}
        if path == "/v1/budgets":
            body = {**body, "name": f"b{good}"}
