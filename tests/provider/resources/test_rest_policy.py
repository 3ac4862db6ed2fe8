"""The one create-failure policy (`provider.resources.rest`), on every resource built on RestResource: a
create whose outcome is unknown is kept as an unconfirmed, tainted object naming its Idempotency-Key;
a refresh leaves it alone; the replacing apply's delete replays the create with that key and deletes
what it answers. A create that never reached the API, or that the API refused, keeps nothing."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import httpx
import pytest

from provider.framework import Resource
from provider.resources.budget import BudgetResource
from provider.resources.reservation import ReservationResource
from provider.resources.reserved_ip import ReservedIpResource
from provider.resources.rest import (
    IDEMPOTENCY_KEY,
    UNCONFIRMED_ID_PREFIX,
    is_unconfirmed,
    own_labels,
)
from provider.resources.security_group import SecurityGroupResource
from provider.resources.shared_volume import SharedVolumeResource
from provider.resources.ssh_key import SshKeyResource
from tests.provider.resources.fakes import context, plan, problem

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBpXb0qE3m8q2hJm8mZ3n6i0Jtq2yR7mH3q1z2x3y4z5 me@laptop"
WHEN = "2026-11-26T01:00:00Z"


class Case:
    def __init__(self, resource: Resource, collection: str, config: dict[str, Any], body: dict[str, Any]):
        self.resource, self.collection, self.config, self.body = resource, collection, config, body

    def __repr__(self) -> str:
        return self.resource.type_name


CASES = [
    Case(SshKeyResource(), "/v1/ssh-keys", {"name": "laptop", "public_key": KEY},
         {"id": "ssh_1", "name": "laptop", "public_key": KEY, "fingerprint": "SHA256:x",
          "key_type": "ssh-ed25519", "created_at": WHEN}),
    Case(SharedVolumeResource(), "/v1/volumes", {"name": "data", "region": "us-east-1", "size_tib": 4},
         {"id": "vol_1", "name": "data", "region": "us-east-1", "size_tib": 4, "status": "available",
          "mount_path": "/mnt/shared/vol_1", "attached_cluster_ids": [], "created_at": WHEN,
          "estimated_hourly_cost_usd": "0.4488"}),
    Case(ReservedIpResource(), "/v1/reserved-ips", {"region": "us-east-1", "name": "edge"},
         {"id": "rip_1", "name": "edge", "region": "us-east-1", "labels": {}, "address": "198.18.0.7",
          "cluster_id": None, "status": "reserved", "hourly_cost_usd": "0.005", "created_at": WHEN}),
    Case(BudgetResource(), "/v1/budgets", {"name": "nlp", "amount_usd": Decimal("1000.50")},
         {"id": "bud_1", "name": "nlp", "amount_usd": "1000.50", "label_filter": None,
          "thresholds": [50, 80, 100], "action": "notify", "created_at": WHEN}),
    Case(SecurityGroupResource(), "/v1/security-groups", {"name": "lab"},
         {"id": "sgr_1", "name": "lab", "description": None, "ingress": [], "egress": [],
          "is_default": False, "created_at": WHEN}),
    Case(ReservationResource(), "/v1/reservations",
         {"name": "q4", "region": "us-east-1", "instance_type": "8xH100", "node_count": 2,
          "duration_days": 7},
         {"id": "rsv_1", "name": "q4", "region": "us-east-1", "instance_type": "8xH100", "node_count": 2,
          "duration_days": 7, "starts_at": WHEN, "ends_at": "2026-12-03T01:00:00Z", "fabric": "ib-a",
          "upfront_usd": "4558.176", "labels": {}, "created_at": WHEN}),
]


def planned(case: Case) -> tuple[dict[str, Any], str]:
    """The create plan, and the Idempotency-Key it chose."""
    ctx = context()
    values, _ = plan(case.resource, ctx, case.config, None)
    assert values is not None
    return values, ctx.private[IDEMPOTENCY_KEY]


@pytest.mark.parametrize("case", CASES, ids=repr)
@pytest.mark.parametrize("failure", ["500", "read timeout", "dropped connection"])
def test_rest_create_with_unknown_outcome_keeps_an_unconfirmed_tainted_object(case, failure):
    values, key = planned(case)
    seen: list[tuple[str, str | None]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, request.headers.get("idempotency-key")))
        if failure == "500":
            return problem(500, "internal", "boom")
        if failure == "read timeout":
            raise httpx.ReadTimeout("no answer", request=request)
        raise httpx.RemoteProtocolError("server disconnected", request=request)

    ctx = context(handler, private={IDEMPOTENCY_KEY: key})
    state = case.resource.create(ctx, values)
    assert state is not None and state["id"] == UNCONFIRMED_ID_PREFIX + key and is_unconfirmed(state)
    assert set(state) == set(case.resource.schema.attributes)
    (error,) = ctx.diagnostics  # an error with a state: Terraform taints it
    assert error.severity == "error" and "may have happened" in error.detail
    assert seen and all(m == "POST" and k == key for m, k in seen)  # every retry replays one create


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_rest_unconfirmed_object_is_left_alone_by_refresh_and_adopted_by_the_replacing_delete(case):
    values, key = planned(case)
    state = case.resource.create(context(lambda r: problem(503, "unavailable", "down"),
                                         private={IDEMPOTENCY_KEY: key}), values)
    assert state is not None and is_unconfirmed(state)

    def no_call(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"a refresh sent {request.method} {request.url.path}")

    assert case.resource.read(context(no_call), state) == state  # plans never send a create
    seen: list[tuple[str, str, str | None, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        seen.append((request.method, request.url.path, request.headers.get("idempotency-key"), body))
        return httpx.Response(201, json=case.body) if request.method == "POST" else httpx.Response(204)

    ctx = context(handler)
    case.resource.delete(ctx, state)
    assert not ctx.diagnostics
    (post, delete) = seen
    assert post[:3] == ("POST", case.collection, key)
    assert post[3] == case.resource.create_body(values)  # the same request, so the API replays it
    assert delete[:2] == ("DELETE", f"{case.collection}/{case.body['id']}")


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_rest_create_that_never_reached_the_api_keeps_nothing(case):
    values, key = planned(case)

    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    ctx = context(refused, private={IDEMPOTENCY_KEY: key})
    assert case.resource.create(ctx, values) is None
    (error,) = ctx.diagnostics
    assert "may have happened" not in error.detail and "endpoint" in error.detail


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_rest_create_refused_keeps_nothing_and_confirmed_create_drops_the_key(case):
    values, key = planned(case)
    ctx = context(lambda r: problem(422, "validation_failed", "name is taken", field="name"),
                  private={IDEMPOTENCY_KEY: key})
    assert case.resource.create(ctx, values) is None and ctx.diagnostics.has_errors
    ok = context(lambda r: httpx.Response(201, json=case.body, headers={"etag": '"e1"'}),
                 private={IDEMPOTENCY_KEY: key})
    state = case.resource.create(ok, values)
    assert state is not None and state["id"] == case.body["id"] and not ok.diagnostics
    assert IDEMPOTENCY_KEY not in ok.private


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_rest_ids_are_escaped_into_one_path_segment(case):
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.raw_path.decode())
        return problem(404, "not_found", "gone")

    state = {**dict.fromkeys(case.resource.schema.attributes), "id": "../clusters/cls_1?x=1"}
    assert case.resource.read(context(handler), state) is None
    case.resource.delete(context(handler), state)
    assert seen == [f"{case.collection}/..%2Fclusters%2Fcls_1%3Fx%3D1"] * 2


@pytest.mark.parametrize("case", CASES, ids=repr)
@pytest.mark.parametrize(
    ("status", "code"), [(409, "idempotency_key_in_flight"), (422, "idempotency_key_reused")]
)
def test_rest_replay_that_cannot_tell_is_an_error_not_a_forgotten_object(case, status, code):
    values, key = planned(case)
    state = case.resource.create(context(lambda r: problem(500, "internal", "boom"),
                                         private={IDEMPOTENCY_KEY: key}), values)
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.method)
        return problem(status, code, "the key is busy or was used for another request")

    ctx = context(handler)
    case.resource.delete(ctx, state)
    # Only the replayed create is sent (a key still in flight is retried by the client); no DELETE follows.
    assert set(seen) == {"POST"} and ctx.diagnostics.has_errors  # kept in state: the next apply tries again


def test_a_team_label_the_api_adds_at_create_is_the_keys_not_the_configurations() -> None:
    """A team-scoped key creates a volume without labels: the API labels it `team=nlp`. The state keeps the
    configuration's labels (null), remembers the added key privately, and later reads and updates leave it
    out, unless the configuration writes that label itself."""
    ctx = context()
    assert own_labels(ctx, None, {"team": "nlp"}, created=True) is None
    assert ctx.private["api_labels"] == ["team"]
    assert own_labels(ctx, None, {"team": "nlp"}, created=False) is None  # a refresh
    answered = {"owner": "ana", "team": "nlp"}
    assert own_labels(ctx, {"owner": "ana"}, answered, created=False) == {"owner": "ana"}
    assert own_labels(ctx, {"team": "nlp"}, {"team": "nlp"}, created=False) == {"team": "nlp"}
    # Drift in labels the configuration owns still shows.
    assert own_labels(ctx, None, {"team": "nlp", "extra": "x"}, created=False) == {"extra": "x"}
    # An unscoped key: nothing added, nothing remembered.
    plain = context()
    assert own_labels(plain, {"a": "b"}, {"a": "b"}, created=True) == {"a": "b"}
    assert "api_labels" not in plain.private
