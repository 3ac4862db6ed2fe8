"""Server-Sent Events through the one client: the parser, a followed log (retried until it starts, its
errors typed, its connection closed) and the day-2 calls' requests."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from provider.client import NotFound, TransportError
from provider.client._wire import event_data
from tests.provider.client.fakes import ScriptedApi, make_client, problem


def test_event_data_joins_data_lines_and_skips_comments_and_unfinished_events() -> None:
    lines = [": keep-alive", "", "data: one", "", "data: two", "data:three", "id: 7", "", "data: cut"]
    assert list(event_data(lines)) == ["one", "two\nthree"]


class Stream(httpx.SyncByteStream):
    """A response body sent in chunks, that may break after them; records whether it was closed."""

    def __init__(self, *chunks: bytes, error: Exception | None = None) -> None:
        self.chunks, self.error, self.closed = chunks, error, False

    def __iter__(self) -> Iterator[bytes]:
        yield from self.chunks
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        self.closed = True


def _events(stream: Stream) -> httpx.Response:
    return httpx.Response(200, stream=stream, headers={"content-type": "text/event-stream"})


def test_follow_cluster_logs_streams_lines_as_they_come_and_closes_the_connection() -> None:
    body = Stream(b"data: [t1] first\n\n: keep-alive\n\n", b"data: [t2] sec", b"ond\n\n")
    api = ScriptedApi(problem(503, "unavailable"), _events(body))
    with make_client(api) as client:
        lines = client.follow_cluster_logs("cls_1", source="train-1", tail=5)
        assert next(lines) == "[t1] first"
        assert list(lines) == ["[t2] second"]
    assert body.closed
    sent = api.requests[-1]
    assert sent.url.path == "/v1/clusters/cls_1/logs" and sent.headers["accept"] == "text/event-stream"
    assert dict(sent.url.params) == {"source": "train-1", "tail": "5", "follow": "true"}
    assert len(api.requests) == 2  # the 503 was retried like any GET


def test_follow_cluster_logs_raises_the_apis_error_before_any_line() -> None:
    api = ScriptedApi(problem(404, "no_such_log", "cluster cls_1 has no node 'x'", "source"))
    with make_client(api) as client, pytest.raises(NotFound) as raised:
        next(client.follow_cluster_logs("cls_1", source="x"))
    assert raised.value.field == "source" and raised.value.request_id == "req-1"


def test_follow_cluster_logs_broken_stream_is_a_transport_error() -> None:
    body = Stream(b"data: [t1] first\n\n", error=httpx.ReadError("connection reset"))
    with make_client(ScriptedApi(_events(body))) as client:
        lines = client.follow_cluster_logs("cls_1")
        assert next(lines) == "[t1] first"
        with pytest.raises(TransportError, match=r"the stream from http://api\.test:8080 broke"):
            next(lines)
    assert body.closed


def test_day2_calls_send_filters_and_idempotent_actions() -> None:
    listing = httpx.Response(200, json={"items": [], "counts": {}})
    api = ScriptedApi(listing, listing, httpx.Response(200, json={"source": "controller", "lines": []}),
                      problem(503, "unavailable"), httpx.Response(202, json={"action": "drain"}),
                      httpx.Response(202, json={"action": "restart_workers", "nodes": []}))
    with make_client(api) as client:
        client.list_cluster_nodes("cls_1", health="xid")
        client.list_cluster_jobs("cls_1", state="running")
        client.get_cluster_logs("cls_1", tail=20)
        client.node_action("cls_1", "train-1", "drain", idempotency_key="key-1")
        client.cluster_action("cls_1", "restart_workers", idempotency_key="key-2")
    queries = [(r.method, r.url.path, dict(r.url.params)) for r in api.requests[:3]]
    assert queries == [
        ("GET", "/v1/clusters/cls_1/nodes", {"health": "xid"}),
        ("GET", "/v1/clusters/cls_1/jobs", {"state": "running"}),
        ("GET", "/v1/clusters/cls_1/logs", {"source": "controller", "tail": "20"}),
    ]
    posts = [(r.url.path, r.headers["idempotency-key"], json.loads(r.content)) for r in api.requests[3:]]
    assert posts == [  # the 503 was retried with the same key: the server replays the first outcome
        ("/v1/clusters/cls_1/nodes/train-1/actions", "key-1", {"action": "drain"}),
        ("/v1/clusters/cls_1/nodes/train-1/actions", "key-1", {"action": "drain"}),
        ("/v1/clusters/cls_1/actions", "key-2", {"action": "restart_workers"}),
    ]
