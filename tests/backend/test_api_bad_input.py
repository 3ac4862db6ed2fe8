"""Bad input gets a 4xx problem document naming the field, never a 500, and nothing is stored."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tests.backend.keys import ed25519_key


def _nothing_stored(admin: TestClient) -> None:
    for path in ("/v1/ssh-keys", "/v1/volumes", "/v1/clusters"):
        assert admin.get(path).json()["items"] == [], path


def test_malformed_json_is_400_naming_the_body(admin: TestClient) -> None:
    response = admin.post(
        "/v1/volumes", content=b'{"name": "a",', headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json()["code"] == "malformed_json" and response.json()["field"] == "body"
    _nothing_stored(admin)


@pytest.mark.parametrize(
    "body, field, code",
    [
        ({"name": "a", "region": "us-east-1", "size_tib": "big"}, "size_tib", "invalid_type"),
        ({"name": "a", "region": "us-east-1", "size_tib": 1, "colour": "red"}, "colour", "unknown_field"),
        ({"name": "a", "region": "us-east-1"}, "size_tib", "required"),
        ({"name": "a", "region": "us-east-1", "size_tib": 0}, "size_tib", "out_of_range"),
        ({"name": "a", "region": "us-east-1", "size_tib": 10**30}, "size_tib", "out_of_range"),
        ({"name": "", "region": "us-east-1", "size_tib": 1}, "name", "invalid_format"),
        ({"name": "a\u0000b", "region": "us-east-1", "size_tib": 1}, "name", "invalid_format"),
        ([1, 2], "body", "invalid_type"),
    ],
)
def test_wrong_types_and_unknown_fields_are_422_naming_the_field(
    admin: TestClient, body: object, field: str, code: str
) -> None:
    response = admin.post("/v1/volumes", json=body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["field"] == field and response.json()["code"] == code, response.json()
    _nothing_stored(admin)


def test_nested_fields_are_named_with_their_path(admin: TestClient) -> None:
    response = admin.post(
        "/v1/clusters",
        json={
            "name": "c",
            "region": "us-east-1",
            "instance_type": "8xH100",
            "billing": {"type": "monthly", "extra": 1},
        },
    )
    fields = {e["field"]: e["code"] for e in response.json()["errors"]}
    assert response.status_code == 422 and fields == {
        "billing.type": "invalid_choice",
        "billing.extra": "unknown_field",
    }
    typed = admin.post(
        "/v1/clusters",
        json={"name": "c", "region": "us-east-1", "instance_type": "8xH100", "ssh_key_ids": ["ssh_ok", 5]},
    )
    assert typed.status_code == 422 and typed.json()["field"] == "ssh_key_ids[1]"


def test_oversized_body_is_413(admin: TestClient) -> None:
    huge = {"name": "k", "public_key": "ssh-ed25519 " + "A" * 2_000_000}
    response = admin.post("/v1/ssh-keys", json=huge)
    assert response.status_code == 413 and response.json()["code"] == "payload_too_large"

    def chunks() -> Iterator[bytes]:
        yield b'{"name": "k", "public_key": "'
        for _ in range(40):
            yield b"A" * 65536
        yield b'"}'

    streamed = admin.post("/v1/ssh-keys", content=chunks(), headers={"Content-Type": "application/json"})
    assert streamed.status_code == 413 and streamed.json()["field"] == "body"
    _nothing_stored(admin)


def test_bad_ids_are_404_naming_the_parameter(admin: TestClient) -> None:
    for path, field in (
        ("/v1/ssh-keys/nope", "ssh_key_id"),
        ("/v1/volumes/vol_%00", "path"),  # a control character: refused before routing (api/http_edges.py)
        ("/v1/clusters/cls_0000000000000000000000000z", "cluster_id"),
        ("/v1/clusters/" + "x" * 500, "cluster_id"),
    ):
        response = admin.get(path)
        assert response.status_code == 404 and response.json()["field"] == field, path


def test_bad_query_and_header_values_are_4xx(admin: TestClient) -> None:
    assert admin.get("/v1/volumes", params={"page_size": 0}).json()["field"] == "page_size"
    assert admin.get("/v1/volumes", params={"page_size": "ten"}).status_code == 422
    bad_key = admin.post(
        "/v1/ssh-keys",
        json={"name": "k", "public_key": ed25519_key()},
        headers={"Idempotency-Key": "has space"},
    )
    assert bad_key.status_code == 400 and bad_key.json()["field"] == "Idempotency-Key"
    _nothing_stored(admin)


def test_unknown_routes_and_methods_are_problem_documents(admin: TestClient) -> None:
    missing = admin.get("/v1/nothing-here")
    assert missing.status_code == 404 and missing.headers["content-type"] == "application/problem+json"
    method = admin.put("/v1/volumes")
    assert method.status_code == 405 and method.json()["code"] == "method_not_allowed"
