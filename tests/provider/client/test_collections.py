"""Typed collections: ids escaped into one path segment, full responses (ETags) returned, and whether a
failed request may have reached the API."""

from __future__ import annotations

import httpx
import pytest

from provider.client import TransportError
from tests.provider.client.fakes import ScriptedApi, make_client

OBJECT = {"id": "rsv_1", "name": "q4"}


def test_collection_calls_escape_ids_and_keep_the_etag() -> None:
    api = ScriptedApi(*(httpx.Response(200, json=OBJECT, headers={"etag": '"e3"'}) for _ in range(4)))
    client = make_client(api)
    assert client.reservations.get("a/../b?c#d").etag == '"e3"'
    client.budgets.update("bud 1", {"name": "x"}, if_match='"e2"')
    client.security_groups.delete("sgr_1/..", if_match='"e2"')
    assert client.get_reservation("../clusters/cls_1") == OBJECT
    assert [r.url.raw_path.decode() for r in api.requests] == [
        "/v1/reservations/a%2F..%2Fb%3Fc%23d",
        "/v1/budgets/bud%201",
        "/v1/security-groups/sgr_1%2F..",
        "/v1/reservations/..%2Fclusters%2Fcls_1",
    ]
    assert [r.headers.get("if-match") for r in api.requests[1:3]] == ['"e2"', '"e2"']


def test_collection_create_sends_the_idempotency_key_on_every_retry() -> None:
    api = ScriptedApi(httpx.ReadTimeout("slow"), httpx.Response(201, json=OBJECT))
    assert make_client(api).reservations.create({"name": "q4"}, idempotency_key="k1").body == OBJECT
    assert [r.headers["idempotency-key"] for r in api.requests] == ["k1", "k1"]


@pytest.mark.parametrize(
    ("failures", "may_have_arrived"),
    [
        ([httpx.ConnectError("refused")] * 3, False),  # never left this process
        ([httpx.ReadTimeout("slow")] + [httpx.ConnectError("refused")] * 2, True),  # the first may have
        ([httpx.ConnectError("refused")] * 2 + [httpx.RemoteProtocolError("cut")], True),
    ],
)
def test_transport_error_says_whether_any_attempt_may_have_arrived(failures, may_have_arrived) -> None:
    client = make_client(ScriptedApi(*failures), max_retries=2)
    with pytest.raises(TransportError) as raised:
        client.ssh_keys.create({"name": "a"}, idempotency_key="k")
    assert raised.value.may_have_arrived is may_have_arrived
