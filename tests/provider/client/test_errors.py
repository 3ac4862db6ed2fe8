"""Problem documents become typed errors; the API key never leaks."""

from __future__ import annotations

import logging

import httpx
import pytest

from provider.client import (
    ApiError,
    BadRequest,
    Conflict,
    Forbidden,
    GpuCloudClient,
    InsufficientCapacity,
    NotFound,
    PreconditionFailed,
    RateLimited,
    ServerError,
    Unauthorized,
    ValidationFailed,
)
from tests.provider.client.fakes import API_KEY, ScriptedApi, make_client, problem


@pytest.mark.parametrize(
    ("status", "code", "cls"),
    [
        (400, "bad_request", BadRequest),
        (401, "invalid_api_key", Unauthorized),
        (403, "forbidden_role", Forbidden),
        (404, "not_found", NotFound),
        (409, "duplicate_ssh_key", Conflict),
        (409, "insufficient_capacity", InsufficientCapacity),
        (412, "etag_mismatch", PreconditionFailed),
        (422, "invalid_format", ValidationFailed),
        (429, "rate_limited", RateLimited),
        (500, "internal_error", ServerError),
        (418, "teapot", ApiError),
    ],
)
def test_problem_documents_map_to_error_classes(status: int, code: str, cls: type[ApiError]) -> None:
    api = ScriptedApi(problem(status, code, "it went wrong", field="name"))
    with pytest.raises(cls) as error:
        make_client(api, max_retries=0).get_ssh_key("ssh_1")
    assert type(error.value) is cls
    assert (error.value.status, error.value.code, error.value.detail, error.value.field) == (
        status,
        code,
        "it went wrong",
        "name",
    )
    assert error.value.request_id == "req-1"
    assert str(error.value) == f"GET /v1/ssh-keys/ssh_1: {status} {code}: it went wrong (field name)"


def test_validation_error_keeps_every_field_error_and_extra_members() -> None:
    response = httpx.Response(
        422,
        json={
            "title": "Unprocessable Content",
            "status": 422,
            "code": "out_of_range",
            "detail": "bad",
            "field": "node_count",
            "errors": [{"field": "node_count", "code": "out_of_range", "message": "m"}],
            "available_nodes": 3,
        },
        headers={"content-type": "application/problem+json"},
    )
    with pytest.raises(ValidationFailed) as error:
        make_client(ScriptedApi(response)).create_cluster({"node_count": 9}, idempotency_key="k")
    assert error.value.errors == [{"field": "node_count", "code": "out_of_range", "message": "m"}]
    assert error.value.extra == {"available_nodes": 3}


def test_capacity_error_carries_what_is_available() -> None:
    api = ScriptedApi(
        problem(409, "insufficient_capacity", "only 2 nodes free", field="node_count", available=2)
    )
    with pytest.raises(InsufficientCapacity) as error:
        make_client(api).update_cluster("clu_1", {"node_count": 8})
    assert isinstance(error.value, Conflict)
    assert error.value.extra["available"] == 2


def test_non_json_error_bodies_still_give_a_typed_error() -> None:
    api = ScriptedApi(httpx.Response(502, text="<html>bad gateway</html>"))
    with pytest.raises(ServerError) as error:
        make_client(api, max_retries=0).get_volume("vol_1")
    assert error.value.status == 502 and "bad gateway" in error.value.detail


def test_malformed_success_body_is_a_server_error() -> None:
    api = ScriptedApi(httpx.Response(200, text="not json"))
    with pytest.raises(ServerError, match="not JSON"):
        make_client(api).get_volume("vol_1")
    api = ScriptedApi(httpx.Response(200, json=["a"]))
    with pytest.raises(ServerError, match="expected JSON object"):
        make_client(api).get_volume("vol_1")


def test_api_key_is_sent_as_bearer_and_never_shown(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    api = ScriptedApi(problem(503, "unavailable"), problem(401, "invalid_api_key", "API key rejected"))
    client = make_client(api)
    with pytest.raises(Unauthorized) as error:
        client.verify_credentials()
    assert api.requests[0].headers["Authorization"] == f"Bearer {API_KEY}"
    assert api.requests[0].headers["User-Agent"] == "terraform-provider-gpucloud/test"
    shown = [
        repr(client),
        str(client),
        str(error.value),
        repr(error.value),
        caplog.text,
        repr(api.requests[0].headers),
    ]
    assert all(API_KEY not in text for text in shown)
    assert "redacted" in repr(client)
    assert "retrying GET /v1/ssh-keys" in caplog.text


def test_missing_api_key_sends_no_authorization_header() -> None:
    api = ScriptedApi(problem(401, "missing_api_key", "no key"))
    client = GpuCloudClient("http://api.test", "", transport=httpx.MockTransport(api))
    with pytest.raises(Unauthorized):
        client.verify_credentials()
    assert "Authorization" not in api.requests[0].headers
    assert "<unset>" in repr(client)


@pytest.mark.parametrize("endpoint", ["api.test:8080", "ftp://api.test", "http://", ""])
def test_bad_endpoint_is_refused_up_front(endpoint: str) -> None:
    with pytest.raises(ValueError, match="endpoint"):
        GpuCloudClient(endpoint, API_KEY)
