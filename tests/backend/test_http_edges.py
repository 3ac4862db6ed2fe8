"""HTTP edges: HEAD on every GET route, `Allow` on 405 with the served methods, 404 for paths that are
not text, and 422 (naming the field) for dates whose arithmetic would leave the calendar."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route, Router
from starlette.types import Message

from backend.api.http_edges import HttpEdges
from tests.backend.test_openapi import COMMITTED

SPEC: dict[str, Any] = json.loads(COMMITTED.read_text())
HTTP_METHODS = {"get", "put", "post", "delete", "patch"}


def _concrete(path: str) -> str:
    """A spec path with every parameter filled (with an id that names nothing)."""
    return re.sub(r"\{[^}]+\}", "cls_00000000000000000000000000", path)


def test_http_edges_head_answers_every_get_route_like_get_without_a_body(admin: TestClient) -> None:
    paths = [path for path, operations in SPEC["paths"].items() if "get" in operations]
    paths += ["/healthz", "/console/", "/console/static/js/app.js", "/openapi.json"]
    for path in paths:
        url = _concrete(path)
        got, head = admin.get(url), admin.head(url)
        assert head.status_code == got.status_code, (path, head.status_code, got.status_code)
        assert head.content == b"", path
        for header in ("content-type", "content-length", "etag", "allow"):
            assert head.headers.get(header) == got.headers.get(header), (path, header)


def test_http_edges_405_allows_exactly_the_methods_served_at_the_path(admin: TestClient) -> None:
    assert admin.put("/v1/clusters").headers["allow"] == "GET, HEAD, POST"
    assert admin.delete("/v1/ssh-keys").headers["allow"] == "GET, HEAD, POST"
    for path, operations in SPEC["paths"].items():
        declared = {m.upper() for m in operations if m in HTTP_METHODS}
        expected = declared | ({"HEAD"} if "GET" in declared else set())
        response = admin.options(_concrete(path))
        assert response.status_code == 405, path
        assert set(response.headers["allow"].split(", ")) == expected, path
        assert response.headers["content-type"] == "application/problem+json"


def test_http_edges_head_on_a_post_only_path_is_405_with_allow(admin: TestClient) -> None:
    path = next(p for p, ops in SPEC["paths"].items() if set(ops) & HTTP_METHODS == {"post"})
    response = admin.head(_concrete(path))
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"


@pytest.mark.parametrize(
    "path",
    ["/console/static/js/app.js%00", "/v1/clusters/%00", "/v1/ssh-keys/abc%0a", "/v1/clusters/%ff",
     "/console/static/%c3%28.js"],
)
def test_http_edges_paths_with_control_characters_or_non_utf8_bytes_are_404(
    admin: TestClient, path: str
) -> None:
    response = admin.get(path)
    assert response.status_code == 404, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == "not_found"
    assert response.headers["x-request-id"] == response.json()["request_id"]
    assert admin.head(path).status_code == 404


def test_http_edges_a_utf8_path_is_still_routed(admin: TestClient) -> None:
    response = admin.get("/v1/clusters/%E2%82%AC")  # "€": text, just no such cluster
    assert response.status_code == 404
    assert response.json()["field"] == "cluster_id"


def test_http_edges_head_on_a_stream_ends_after_the_headers() -> None:
    produced: list[int] = []

    async def endless(_: Request) -> StreamingResponse:
        async def events() -> AsyncIterator[bytes]:
            for n in range(1_000_000):
                produced.append(n)
                yield b"data: tick\n\n"
                await asyncio.sleep(0)

        return StreamingResponse(events(), media_type="text/event-stream")

    app = HttpEdges(Router([Route("/stream", endless)]))
    sent: list[Message] = []

    async def receive() -> Message:
        await asyncio.sleep(3600)  # the client never disconnects: the stream must stop on its own
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "HEAD", "path": "/stream", "raw_path": b"/stream", "headers": [],
             "query_string": b"", "root_path": "", "asgi": {"version": "3.0", "spec_version": "2.4"}}
    asyncio.run(asyncio.wait_for(app(scope, receive, send), timeout=10))
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert sent[0]["status"] == 200 and sent[1]["body"] == b"" and not sent[1].get("more_body")
    assert len(produced) <= 2
    assert scope["method"] == "HEAD"  # the outer middleware logs what the client sent


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/reservations", {"name": "r", "region": "us-east-1", "instance_type": "8xH100", "node_count": 1,
                              "duration_days": 90, "starts_at": "9999-12-30T00:00:00Z"}, "starts_at"),
        ("/v1/clusters", {"name": "c", "region": "us-east-1", "instance_type": "8xH100",
                          "expires_at": "9999-12-31T23:00:00-05:00"}, "expires_at"),
        ("/v1/clusters", {"name": "c", "region": "us-east-1", "instance_type": "8xH100",
                          "expires_at": "9000-01-01T00:00:00Z"}, "expires_at"),
    ],
)
def test_http_edges_dates_past_the_calendar_bound_are_422_naming_the_field(
    admin: TestClient, path: str, body: dict[str, Any], field: str
) -> None:
    response = admin.post(path, json=body)
    assert response.status_code == 422, response.text
    assert (response.json()["field"], response.json()["code"]) == (field, "out_of_range")


def test_http_edges_cluster_update_with_a_far_expiry_is_422(admin: TestClient) -> None:
    created = admin.post("/v1/clusters", json={"name": "c", "region": "us-east-1", "instance_type": "8xH100"})
    assert created.status_code == 201, created.text
    response = admin.patch(f"/v1/clusters/{created.json()['id']}",
                           json={"expires_at": "9999-12-31T23:00:00-05:00"})
    assert response.status_code == 422, response.text
    assert response.json()["field"] == "expires_at"
    latest = admin.patch(f"/v1/clusters/{created.json()['id']}", json={"expires_at": "8999-12-31T23:59:59Z"})
    assert latest.status_code == 200, latest.text


def test_http_edges_billing_query_dates_out_of_range_are_422(admin: TestClient) -> None:
    for start in ("0001-01-01T00:00:00+05:00", "9999-12-31T23:00:00-05:00"):
        response = admin.get("/v1/billing/usage", params={"start": start})
        assert response.status_code == 422, (start, response.text)
        assert response.json()["field"] == "start"
