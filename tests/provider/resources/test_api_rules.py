"""The plan-time rule table: generated from the OpenAPI contract, and its checks."""

from __future__ import annotations

import json
import threading
from decimal import Decimal
from pathlib import Path

from provider.cty import UNKNOWN, format_path
from provider.framework import Context
from provider.framework.diagnostics import Diagnostics
from provider.resources import api_rules

CONTRACT = Path(__file__).resolve().parents[3] / "proto" / "openapi.json"


def test_api_rules_table_is_generated_from_the_committed_contract():
    assert api_rules.extract(json.loads(CONTRACT.read_text())) == api_rules.table(), (
        "provider/resources/api_rules.json is stale: run `bash scripts/generate.sh rules`"
    )


def _between_fields(config: dict) -> dict[str, str]:
    ctx = Context(stop=threading.Event())
    api_rules.check_field_rules(ctx, "ClusterCreate", config, {"volume_ids": "shared_volume_ids"})
    return {format_path(d.path): d.summary for d in ctx.diagnostics}


def test_api_rules_between_fields_use_defaults_and_skip_unknown_values():
    billing = {"type": None, "duration_days": 7, "on_expiry": None}
    assert _between_fields({"billing": billing}) == {
        "billing.duration_days": "Reserved Term Without Reserved Billing"
    }
    assert _between_fields({"billing": {**billing, "type": UNKNOWN}}) == {}
    assert _between_fields({"billing": UNKNOWN}) == {}
    assert _between_fields({"node_count": UNKNOWN, "orchestrator": "none"}) == {}
    assert _between_fields({"node_count": 3, "orchestrator": "none", "container": "base"}) == {
        "orchestrator": "Orchestrator Required", "container": "Container Needs A Single Node"
    }
    assert _between_fields({"node_count": 1, "orchestrator": "none", "container": "base"}) == {}


def test_api_rules_decimal_places_ignore_trailing_zeros():
    (validator,) = [v for v in api_rules.schema_validators(
        api_rules.constraints("ClusterCreate", "max_hourly_cost_usd"), {}) if "decimal" in v.description]
    assert validator.description == "must have at most 4 decimal places and 14 digits in all"
    for ok in (Decimal("12.3456"), Decimal("12.34560000"), 100, Decimal("1E+3")):
        diags = Diagnostics()
        validator.validate(ok, api_rules.attribute_path("max_hourly_cost_usd"), diags)
        assert not diags, ok
    diags = Diagnostics()
    validator.validate(Decimal("12.3456789"), api_rules.attribute_path("max_hourly_cost_usd"), diags)
    assert diags and "4 decimal places" in diags[0].detail
