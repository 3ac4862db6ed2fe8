"""The two 409s the backend's unit of work answers for a request it did not carry out (`conflict_retry`
after repeated deadlocks, `idempotency_key_in_flight` while the first request with the key still runs)
are retried like a 503, with the same Idempotency-Key; every other 409 is the answer."""

from __future__ import annotations

import httpx
import pytest

from provider.client import Conflict
from tests.provider.client.fakes import FakeClock, ScriptedApi, make_client, problem

SPEC = {"name": "c", "region": "r", "instance_type": "t"}
CREATED = httpx.Response(201, json={"id": "clu_1", "status": "PENDING"})


def _busy(code: str, retry_after: str = "1") -> httpx.Response:
    answer = problem(409, code, "retry it")
    answer.headers["Retry-After"] = retry_after
    return answer


@pytest.mark.parametrize("code", ["conflict_retry", "idempotency_key_in_flight"])
def test_retryable_409_is_retried_with_the_same_key_honouring_retry_after(code: str) -> None:
    api = ScriptedApi(_busy(code), _busy(code, "3"), CREATED)
    clock = FakeClock()
    cluster = make_client(api, clock).create_cluster(SPEC, idempotency_key="key-123")
    assert cluster["id"] == "clu_1"
    assert [r.headers["Idempotency-Key"] for r in api.requests] == ["key-123"] * 3
    assert api.bodies[0] == api.bodies[2] == SPEC
    assert clock.sleeps == [1.0, 3.0]


def test_retryable_409_stays_within_the_retry_budget_and_cap() -> None:
    api = ScriptedApi(*[_busy("idempotency_key_in_flight", "3600")] * 3)
    clock = FakeClock()
    with pytest.raises(Conflict) as error:
        make_client(api, clock, max_retries=2, max_retry_after=30).create_cluster(SPEC, idempotency_key="k")
    assert len(api.requests) == 3
    assert clock.sleeps == [30.0, 30.0]
    # The last answer is raised as it came: the resources keep an unconfirmed create for this code.
    assert (error.value.status, error.value.code) == (409, "idempotency_key_in_flight")


@pytest.mark.parametrize("code", ["conflict", "already_reserved", "reservation_exhausted", "name_taken"])
def test_other_409s_are_not_retried(code: str) -> None:
    api = ScriptedApi(problem(409, code, "no"), CREATED)
    with pytest.raises(Conflict) as error:
        make_client(api).create_cluster(SPEC, idempotency_key="key-123")
    assert len(api.requests) == 1 and error.value.code == code


def test_409_without_a_problem_document_is_not_retried() -> None:
    api = ScriptedApi(httpx.Response(409, text="conflict_retry"), CREATED)
    with pytest.raises(Conflict):
        make_client(api).get_cluster("clu_1")
    assert len(api.requests) == 1


def test_conflict_retry_on_a_post_without_key_is_not_repeated() -> None:
    """Without an Idempotency-Key a repeat could not be told from a second request: the caller decides."""
    api = ScriptedApi(_busy("conflict_retry"), httpx.Response(200, json={}))
    with pytest.raises(Conflict):
        make_client(api).request("POST", "/v1/things", json={"a": 1})
    assert len(api.requests) == 1


def test_conflict_retry_on_a_patch_is_retried() -> None:
    api = ScriptedApi(_busy("conflict_retry"), httpx.Response(200, json={"id": "clu_1"}))
    make_client(api).request("PATCH", "/v1/clusters/clu_1", json={"node_count": 2}, if_match='"g3"')
    assert len(api.requests) == 2
    assert [r.headers["If-Match"] for r in api.requests] == ['"g3"'] * 2
