"""Retry policy: what is repeated, how long it waits, and that a POST never runs twice by accident."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest

from provider.client import (
    Cancelled,
    RateLimited,
    ServerError,
    TransportError,
)
from tests.provider.client.fakes import FakeClock, ScriptedApi, make_client, problem

OK = httpx.Response(200, json={"id": "ssh_1", "name": "a"})


def test_retries_get_on_503_honouring_retry_after() -> None:
    api = ScriptedApi(problem(503, "unavailable"), httpx.Response(503, headers={"Retry-After": "7"}), OK)
    clock = FakeClock()
    assert make_client(api, clock).get_ssh_key("ssh_1")["id"] == "ssh_1"
    assert len(api.requests) == 3
    assert clock.sleeps[1] == 7.0
    assert 0 <= clock.sleeps[0] <= 8.0  # exponential backoff with jitter when no Retry-After


def test_retry_after_as_http_date_and_capped() -> None:
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=20), usegmt=True)
    api = ScriptedApi(
        httpx.Response(429, headers={"Retry-After": later}),
        httpx.Response(429, headers={"Retry-After": "3600"}),
        OK,
    )
    clock = FakeClock()
    make_client(api, clock, max_retry_after=30).get_ssh_key("ssh_1")
    assert 15 <= clock.sleeps[0] <= 20
    assert clock.sleeps[1] == 30  # an hour is capped at max_retry_after


@pytest.mark.parametrize("status", [429, 502, 503, 504])
def test_retryable_statuses_are_retried_for_reads(status: int) -> None:
    api = ScriptedApi(httpx.Response(status), OK)
    make_client(api).get_volume("vol_1")
    assert len(api.requests) == 2


def test_500_is_not_retried() -> None:
    api = ScriptedApi(problem(500, "internal_error", "boom"))
    with pytest.raises(ServerError, match="boom"):
        make_client(api).get_cluster("clu_1")
    assert len(api.requests) == 1


def test_gives_up_after_max_retries_with_the_last_error() -> None:
    api = ScriptedApi(*[problem(429, "rate_limited", "slow down")] * 3)
    with pytest.raises(RateLimited) as error:
        make_client(api, max_retries=2).list_ssh_keys()
    assert len(api.requests) == 3
    assert error.value.status == 429 and error.value.code == "rate_limited"


def test_timeouts_on_reads_are_retried_then_reported_as_transport_error() -> None:
    api = ScriptedApi(httpx.ReadTimeout("slow"), OK)
    make_client(api).get_ssh_key("ssh_1")
    assert len(api.requests) == 2

    api = ScriptedApi(*[httpx.ConnectError("refused")] * 4)
    with pytest.raises(TransportError) as error:
        make_client(api).get_ssh_key("ssh_1")
    assert len(api.requests) == 4
    assert error.value.status == 0 and "api.test" in error.value.detail


def test_post_with_idempotency_key_is_retried_with_the_same_key() -> None:
    created = httpx.Response(201, json={"id": "clu_1", "status": "PENDING"})
    api = ScriptedApi(httpx.ReadTimeout("lost response"), problem(503, "unavailable"), created)
    cluster = make_client(api).create_cluster(
        {"name": "c", "region": "r", "instance_type": "t"}, idempotency_key="key-123"
    )
    assert cluster["id"] == "clu_1"
    assert [r.headers["Idempotency-Key"] for r in api.requests] == ["key-123"] * 3
    assert api.bodies[0] == api.bodies[2] == {"name": "c", "region": "r", "instance_type": "t"}


@pytest.mark.parametrize(
    "failure",
    [
        httpx.ReadTimeout("lost"),
        httpx.RemoteProtocolError("reset"),
        problem(503, "unavailable"),
        problem(429, "rate_limited"),
        httpx.Response(502),
    ],
)
def test_post_without_idempotency_key_is_never_repeated_once_sent(
    failure: httpx.Response | Exception,
) -> None:
    api = ScriptedApi(failure, OK)
    client = make_client(api)
    with pytest.raises((TransportError, ServerError, RateLimited)):
        client.request("POST", "/v1/things", json={"a": 1})
    assert len(api.requests) == 1


def test_post_without_key_is_retried_when_the_connection_was_never_made() -> None:
    api = ScriptedApi(httpx.ConnectError("refused"), OK)
    make_client(api).request("POST", "/v1/things", json={"a": 1})
    assert len(api.requests) == 2


def test_side_effect_free_post_is_retried() -> None:
    api = ScriptedApi(problem(503, "unavailable"), httpx.Response(200, json={"hourly_usd": 12.5}))
    estimate = make_client(api).estimate_price({"instance_type": "t", "node_count": 2})
    assert len(api.requests) == 2
    assert "Idempotency-Key" not in api.requests[0].headers
    assert str(estimate["hourly_usd"]) == "12.5"


def test_attach_volume_reuses_one_generated_key_across_retries() -> None:
    api = ScriptedApi(
        httpx.ReadTimeout("lost"), httpx.Response(200, json={"id": "clu_1", "volume_ids": ["vol_1"]})
    )
    make_client(api).attach_volume("clu_1", "vol_1")
    keys = [r.headers.get("Idempotency-Key") for r in api.requests]
    assert keys[0] and keys[0] == keys[1]


def test_cancellation_stops_retries_before_the_next_attempt() -> None:
    cancelled = threading.Event()

    def stopped_meanwhile(request: httpx.Request) -> httpx.Response:
        cancelled.set()  # StopProvider arrives while the first attempt is in flight
        return problem(503, "unavailable")

    api = ScriptedApi(stopped_meanwhile, OK)
    with pytest.raises(Cancelled):
        make_client(api, cancelled=cancelled).get_cluster("clu_1")
    assert len(api.requests) == 1


def test_cancellation_before_a_request_sends_nothing() -> None:
    cancelled = threading.Event()
    cancelled.set()
    api = ScriptedApi(OK)
    with pytest.raises(Cancelled):
        make_client(api).cancellable(cancelled).update_cluster("clu_1", {"name": "x"})
    assert api.requests == []


def test_cancellation_abandons_a_read_in_flight() -> None:
    cancelled, release = threading.Event(), threading.Event()

    def hangs(request: httpx.Request) -> httpx.Response:
        release.wait(120)  # an API that does not answer: unless abandoned, the read returns OK after 2 min
        return OK

    client = make_client(ScriptedApi(hangs)).cancellable(cancelled)
    threading.Timer(0.05, cancelled.set).start()
    try:
        with pytest.raises(Cancelled):
            client.get_cluster("clu_1")
    finally:
        release.set()


def test_cancellation_lets_a_write_in_flight_finish() -> None:
    cancelled = threading.Event()

    def slow_write(request: httpx.Request) -> httpx.Response:
        cancelled.set()  # StopProvider while the PATCH is on the wire: its outcome must still be known
        time.sleep(0.1)
        return httpx.Response(200, json={"id": "clu_1", "name": "x"})

    client = make_client(ScriptedApi(slow_write)).cancellable(cancelled)
    assert client.update_cluster("clu_1", {"name": "x"})["name"] == "x"


def test_cancellable_view_shares_the_pool_and_cache_key() -> None:
    client = make_client(ScriptedApi(OK))
    view = client.cancellable(threading.Event())
    assert view.cache_key == client.cache_key and view._http is client._http
    assert client._cancelled is None  # the original is untouched


def test_cancellation_event_interrupts_a_real_wait() -> None:
    cancelled = threading.Event()
    api = ScriptedApi(httpx.Response(503, headers={"Retry-After": "30"}), OK)
    client = make_client(api, cancelled=cancelled)
    client._sleep_impl = None  # use the event's wait, as in production
    threading.Timer(0.05, cancelled.set).start()
    with pytest.raises(Cancelled):
        client.get_cluster("clu_1")
