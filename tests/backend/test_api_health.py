"""Health, readiness, Prometheus metrics and the one-JSON-line-per-request log."""

from __future__ import annotations

import json

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient


def test_healthz_and_readyz(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json() == {"status": "ready"}


def test_readyz_is_503_when_the_database_is_unreachable(client: TestClient) -> None:
    state = client.app.state.gpucloud  # type: ignore[attr-defined]
    original = state.read_sessions

    def broken() -> object:
        raise ConnectionError("database down")

    state.read_sessions = broken
    try:
        response = client.get("/readyz")
    finally:
        state.read_sessions = original
    assert response.status_code == 503 and response.headers["retry-after"] == "5"
    assert response.json()["code"] == "database_unavailable"


def test_metrics_count_requests_by_route_template(admin: TestClient) -> None:
    admin.get("/v1/volumes")
    admin.get("/v1/volumes/vol_missing")
    text = admin.get("/metrics").text
    assert 'gpucloud_http_requests_total{method="GET",route="/v1/volumes",status="200"} 1.0' in text
    assert 'route="/v1/volumes/{volume_id}",status="404"' in text
    assert "gpucloud_http_request_duration_seconds_bucket" in text


def test_one_json_log_line_per_request(admin: TestClient, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    admin.get("/v1/volumes", headers={"X-Request-Id": "log-check"})
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    requests = [line for line in lines if line.get("event") == "request"]
    assert len(requests) == 1
    line = requests[0]
    assert line["request_id"] == "log-check" and line["status"] == 200 and line["route"] == "/v1/volumes"
    assert line["method"] == "GET" and line["project_id"].startswith("prj_") and "duration_ms" in line


def test_unexpected_errors_are_a_logged_500_problem_with_the_request_id(
    app: FastAPI, client: TestClient, capsys: pytest.CaptureFixture[str]
) -> None:
    def boom() -> None:
        raise RuntimeError("bug")

    app.add_api_route("/boom", boom)
    response = client.get("/boom", headers={"X-Request-Id": "boom-1"})
    assert response.status_code == 500 and response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == "internal_error" and response.json()["request_id"] == "boom-1"
    assert response.headers["x-request-id"] == "boom-1" and "bug" not in response.text
    logged = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert any(
        line["event"] == "request.unhandled_error" and "RuntimeError" in line["exception"] for line in logged
    )
    assert any(line["event"] == "request" and line["status"] == 500 for line in logged)
