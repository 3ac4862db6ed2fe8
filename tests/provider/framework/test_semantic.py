"""Custom types with semantic equality (`provider.framework.semantic`) and the one duration grammar."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest

from provider._proto import tfplugin6_pb2 as pb
from provider.cty import UNKNOWN, decode_msgpack, encode_msgpack
from provider.framework import (
    DAY_DURATION,
    GO_DURATION,
    NUMBER_VALUE,
    RFC3339,
    Context,
    DurationType,
    NormalizedStringType,
    NumberAttribute,
    Provider,
    Resource,
    Schema,
    State,
    StringAttribute,
    collapse_whitespace,
    keep_semantic_equals,
    rfc3339_utc,
    use_state_for_unknown,
)
from provider.framework.server import ProviderServer
from tests.provider.resources.fakes import context, plan

TTL = DurationType(DAY_DURATION)


def test_rfc3339_utc_has_one_spelling_for_every_offset_form():
    for text in (
        "2026-01-01T10:00:00Z",
        "2026-01-01T10:00:00+00:00",
        "2026-01-01T10:00:00",  # no zone: UTC
        "2026-01-01T11:00:00+01:00",
    ):
        assert rfc3339_utc(text) == "2026-01-01T10:00:00Z"
    assert rfc3339_utc("soon") == "soon"


def test_semantic_types_compare_by_meaning():
    assert RFC3339.equal("2026-12-01T08:00:00Z", "2026-12-01T09:00:00+01:00")
    assert not RFC3339.equal("2026-12-01T08:00:00Z", "2026-12-01T08:00:01Z")
    assert not RFC3339.equal("soon", "soon-ish")
    assert TTL.equal("90m", "1h30m") and TTL.equal("1d", "24h") and not TTL.equal("1d", "1h")
    assert not TTL.equal("90m", "ninety minutes")
    assert NUMBER_VALUE.equal(100, Decimal("100.0")) and NUMBER_VALUE.equal("1000.50", Decimal("1000.5"))
    assert not NUMBER_VALUE.equal(100, Decimal("100.01")) and not NUMBER_VALUE.equal(True, 1)
    same_key = NormalizedStringType(collapse_whitespace, "whitespace")
    assert same_key.equal("ssh-ed25519 AAAA me\n", "  ssh-ed25519   AAAA me") and not same_key.equal("a", "b")


def test_duration_grammar_is_one_for_go_timeouts_and_day_based_ttls():
    assert GO_DURATION.parse("1h30m") == dt.timedelta(minutes=90) == DAY_DURATION.parse("90m")
    assert GO_DURATION.parse("1.5h") == dt.timedelta(minutes=90)
    assert GO_DURATION.parse("-2m").total_seconds() == -120
    assert DAY_DURATION.parse("1d12h") == dt.timedelta(hours=36)
    for text in ("1.5h", "-2m", "0", "1w", "h", "", "1d 2h", "1hx"):
        with pytest.raises(ValueError, match="expected numbers each followed by a unit"):
            DAY_DURATION.parse(text)
    for text in ("1d", "1hx", ""):
        with pytest.raises(ValueError):
            GO_DURATION.parse(text)


def test_ttl_seconds_reads_the_same_grammar():
    from provider.resources.cluster_lifetime import ttl_seconds

    assert ttl_seconds("1d12h") == 129_600 and ttl_seconds("90m") == 5_400
    assert ttl_seconds("1.5h") is None and ttl_seconds("later") is None


SCHEMA = Schema(attributes={
    "id": StringAttribute(computed=True, plan_modifiers=[use_state_for_unknown()]),
    "starts_at": StringAttribute(optional=True, computed=True, semantic=RFC3339),
    "ttl": StringAttribute(optional=True, semantic=TTL),
    "amount": NumberAttribute(optional=True, semantic=NUMBER_VALUE),
    "name": StringAttribute(optional=True),
})
PRIOR = {"id": "x", "starts_at": "2026-12-01T09:00:00+01:00", "ttl": "90m", "amount": Decimal("10.50"),
         "name": "a"}


def test_keep_semantic_equals_keeps_the_prior_spelling_of_equal_values_only():
    api = {"id": "x", "starts_at": "2026-12-01T08:00:00Z", "ttl": "1h30m", "amount": 10.5, "name": "A"}
    assert keep_semantic_equals(SCHEMA, PRIOR, api) == {**PRIOR, "name": "A"}
    changed = {**api, "starts_at": "2026-12-02T08:00:00Z", "ttl": "2h", "amount": 11}
    assert keep_semantic_equals(SCHEMA, PRIOR, changed) == {**changed, "name": "A"}
    assert keep_semantic_equals(SCHEMA, {**PRIOR, "ttl": UNKNOWN}, api)["ttl"] == "1h30m"
    assert keep_semantic_equals(SCHEMA, None, api) is api


class _Thing(Resource):
    type_name = "sem_thing"
    schema = SCHEMA

    def create(self, ctx: Context, plan: State) -> State | None:
        return {**plan, "id": "x", "starts_at": "2026-12-01T08:00:00Z", "ttl": "1h30m"}

    def read(self, ctx: Context, state: State) -> State | None:
        return {**state, "starts_at": "2026-12-01T08:00:00.000000Z", "amount": Decimal("10.5000")}

    def update(self, ctx: Context, plan: State, state: State) -> State | None:
        return plan

    def delete(self, ctx: Context, state: State) -> None:
        return None


class _Provider(Provider):
    type_name = "sem"
    schema = Schema(attributes={})

    def configure(self, ctx: Context, config: dict[str, Any]) -> Any:
        return None

    def resources(self) -> list[Resource]:
        return [_Thing()]


def test_server_keeps_prior_spellings_after_create_and_read():
    server, t = ProviderServer(_Provider()), SCHEMA.cty_type

    def dv(value: Any) -> pb.DynamicValue:
        return pb.DynamicValue(msgpack=encode_msgpack(value, t))

    planned = {**PRIOR, "id": UNKNOWN}
    applied = server.apply_resource_change(pb.ApplyResourceChange.Request(
        type_name="sem_thing", prior_state=dv(None), planned_state=dv(planned), config=dv(planned)))
    assert not applied.diagnostics and decode_msgpack(applied.new_state.msgpack, t) == PRIOR
    read = server.read_resource(
        pb.ReadResource.Request(type_name="sem_thing", current_state=applied.new_state)
    )
    assert not read.diagnostics and decode_msgpack(read.new_state.msgpack, t) == PRIOR


def test_semantic_attribute_plans_the_prior_value_for_a_respelled_configuration():
    resource = _Thing()
    config = {"starts_at": "2026-12-01T08:00:00Z", "ttl": "1h30m", "amount": Decimal("10.5"), "name": "a"}
    planned, replace = plan(resource, context(), config, PRIOR)
    assert planned == PRIOR and replace == []
    planned, _ = plan(resource, context(), {**config, "ttl": "2h"}, PRIOR)
    assert planned is not None and planned["ttl"] == "2h"
