"""Request bodies are JSON of the documented types: no coercion, no other media types, no odd bytes."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.backend.test_api_bad_input import _nothing_stored

VOLUME = {"name": "v", "region": "us-east-1", "size_tib": 10}
CLUSTER = {"name": "c", "region": "us-east-1", "instance_type": "8xH100", "node_count": 2}


@pytest.mark.parametrize(
    "path, body, field",
    [
        ("/v1/volumes", {**VOLUME, "size_tib": "10"}, "size_tib"),
        ("/v1/volumes", {**VOLUME, "size_tib": True}, "size_tib"),
        ("/v1/volumes", {**VOLUME, "size_tib": 10.0}, "size_tib"),
        ("/v1/clusters", {**CLUSTER, "node_count": "2"}, "node_count"),
        ("/v1/clusters", {**CLUSTER, "node_count": 1.0}, "node_count"),
        ("/v1/clusters", {**CLUSTER, "deletion_protection": "yes"}, "deletion_protection"),
        ("/v1/clusters", {**CLUSTER, "deletion_protection": 1}, "deletion_protection"),
        ("/v1/clusters", {**CLUSTER, "max_hourly_cost_usd": True}, "max_hourly_cost_usd"),
        (
            "/v1/clusters",
            {**CLUSTER, "billing": {"type": "reserved", "duration_days": "30"}},
            "billing.duration_days",
        ),
        ("/v1/clusters", {**CLUSTER, "labels": {"team": 5}}, "labels.team"),
        ("/v1/ssh-keys", {"name": 5, "public_key": "ssh-ed25519 AAAA"}, "name"),
    ],
)
def test_strict_input_values_of_another_json_type_are_422_not_coerced(
    admin: TestClient, path: str, body: dict[str, object], field: str
) -> None:
    response = admin.post(path, json=body)
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field and response.json()["code"] == "invalid_type", response.json()
    _nothing_stored(admin)


def test_strict_input_documented_types_are_accepted(admin: TestClient) -> None:
    volume = admin.post("/v1/volumes", json=VOLUME)
    assert volume.status_code == 201 and volume.json()["size_tib"] == 10
    grown = admin.patch(f"/v1/volumes/{volume.json()['id']}", json={"size_tib": 12})
    assert grown.status_code == 200 and grown.json()["size_tib"] == 12
    # Money is a JSON number (integral or not) or a decimal string, as documented.
    for ceiling in (1000, 999.5, "1000.25"):
        estimate = admin.post("/v1/pricing/estimate", json={**CLUSTER, "max_hourly_cost_usd": ceiling})
        assert estimate.status_code == 200, estimate.text
    cluster = admin.post(
        "/v1/clusters", json={**CLUSTER, "deletion_protection": True, "max_hourly_cost_usd": 500}
    )
    assert cluster.status_code == 201, cluster.text
    assert cluster.json()["deletion_protection"] is True and cluster.json()["node_count"] == 2


@pytest.mark.parametrize(
    "content_type", [None, "text/plain", "application/x-www-form-urlencoded", "text/json"]
)
def test_strict_input_body_without_json_content_type_is_415(
    admin: TestClient, content_type: str | None
) -> None:
    headers = {"Content-Type": content_type} if content_type else {}
    response = admin.post(
        "/v1/volumes", content=b'{"name": "v", "region": "us-east-1", "size_tib": 1}', headers=headers
    )
    assert response.status_code == 415, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == "unsupported_media_type" and response.json()["field"] == "Content-Type"
    assert response.json()["request_id"] == response.headers["x-request-id"]
    _nothing_stored(admin)


def test_strict_input_json_media_types_with_parameters_are_accepted(admin: TestClient) -> None:
    response = admin.post(
        "/v1/volumes",
        content=b'{"name": "v", "region": "us-east-1", "size_tib": 1}',
        headers={"Content-Type": "application/json; charset=utf-8"},
    )
    assert response.status_code == 201, response.text


@pytest.mark.parametrize(
    "content, reason",
    [
        (b'{"name": "v\xff\xfe", "region": "us-east-1", "size_tib": 1}', "UTF-8"),
        (b'{"labels": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "deeply"),
    ],
)
def test_strict_input_invalid_utf8_and_over_deep_json_are_malformed_json(
    admin: TestClient, content: bytes, reason: str
) -> None:
    response = admin.post("/v1/volumes", content=content, headers={"Content-Type": "application/json"})
    assert response.status_code == 400, response.text
    problem = response.json()
    assert problem["code"] == "malformed_json" and problem["field"] == "body" and reason in problem["detail"]
    assert problem["errors"] == [{"field": "body", "code": "malformed_json", "message": problem["detail"]}]
    _nothing_stored(admin)


def test_strict_input_error_fields_never_echo_control_characters(admin: TestClient) -> None:
    response = admin.post(
        "/v1/clusters", json={**CLUSTER, "\x1b[31mred\x00": 1, "labels": {"k\x07" + "x" * 500: "v"}}
    )
    assert response.status_code == 422, response.text
    fields = [error["field"] for error in response.json()["errors"]]
    assert "\\u001b[31mred\\u0000" in fields, fields
    for text in [*fields, *(error["message"] for error in response.json()["errors"])]:
        assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in text), repr(text)
        assert len(text) < 300
    for path in ("/v1/volumes/vol_%1b%5b31m", "/no/such%07path"):  # ids and paths quoted in a detail
        problem = admin.get(path).json()
        assert problem["status"] == 404, problem
        assert not any(ord(c) < 0x20 for c in problem["detail"]), repr(problem["detail"])


def test_strict_input_both_content_length_and_transfer_encoding_is_400(admin: TestClient) -> None:
    response = admin.post(
        "/v1/volumes",
        content=b'{"name": "v", "region": "us-east-1", "size_tib": 1}',
        headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked", "Content-Length": "51"},
    )
    assert response.status_code == 400 and response.headers["connection"] == "close"
    assert response.json()["code"] == "ambiguous_framing" and response.json()["field"] == "Transfer-Encoding"
    _nothing_stored(admin)


def test_strict_input_a_query_parameter_given_twice_is_400_not_last_wins(admin: TestClient) -> None:
    response = admin.get("/v1/clusters", params=[("page_size", "abc"), ("page_size", "5")])
    assert response.status_code == 400, response.text
    body = response.json()
    assert (body["code"], body["field"]) == ("repeated_query_parameter", "page_size")
    assert admin.get("/v1/clusters", params={"page_size": "5"}).status_code == 200
