"""Requests without a valid key cannot grow memory without bound, and are rate limited per address."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from backend.app import create_app
from backend.domain import api_keys
from backend.domain.clock import ManualClock
from backend.runtime import build_runtime
from backend.settings import Settings
from tests.backend.conftest import Tenant


@pytest.fixture
def limited_app(settings: Settings) -> Iterator[FastAPI]:
    """An app allowing 5 unauthenticated requests per address per minute, caching at most 3 key lookups. Its
    clock stands still mid-minute: a test's requests never straddle two rate-limit windows (on the wall
    clock, one that did saw the counts reset between its requests)."""
    limited = settings.model_copy(update={
        "unauthenticated_rate_limit_requests": 5, "auth_cache_seconds": 60.0, "auth_cache_max_keys": 3,
    })
    mid_minute = datetime.now(UTC).replace(second=30, microsecond=0)
    app = create_app(build_runtime(limited, clock=ManualClock(mid_minute)))
    yield app
    app.state.gpucloud.engine.dispose()


def test_metrics_invented_methods_and_paths_share_one_label_each(client: TestClient) -> None:
    for i in range(30):
        client.request(f"INVENTED{i}", "/v1/volumes")
        client.get(f"/no/such/path/{i}")
    text = client.get("/metrics").text
    assert "INVENTED" not in text and "/no/such/path" not in text
    assert 'method="other",route="/v1/volumes"' in text
    assert 'gpucloud_http_requests_total{method="GET",route="unmatched",status="404"} 30.0' in text


def test_auth_cache_keeps_at_most_the_configured_number_of_keys(limited_app: FastAPI, tenant: Tenant) -> None:
    for host in range(4):  # from several addresses: the address limit is not what this test is about
        client = TestClient(limited_app, client=(f"10.0.0.{host}", 1000))
        for _ in range(3):
            response = client.get(
                "/v1/volumes", headers={"Authorization": f"Bearer {api_keys.generate_api_key()}"}
            )
            assert response.status_code == 401
    authenticator = limited_app.state.gpucloud.authenticator
    assert authenticator.cached_keys == 3
    valid = client.get("/v1/volumes", headers={"Authorization": f"Bearer {tenant.admin_key}"})
    assert valid.status_code == 200 and authenticator.cached_keys == 3


def test_unauthenticated_requests_are_rate_limited_per_client_address(
    limited_app: FastAPI, tenant: Tenant
) -> None:
    flooder = TestClient(limited_app, client=("192.0.2.7", 4000), raise_server_exceptions=False)
    for _ in range(3):
        assert flooder.get("/healthz").status_code == 200
    for _ in range(2):
        invented = flooder.get(
            "/v1/volumes", headers={"Authorization": f"Bearer {api_keys.generate_api_key()}"}
        )
        assert invented.status_code == 401
    # Budget spent: with no key, a wrong key or on routes that need none, the answer is 429.
    for response in (
        flooder.get("/healthz"),
        flooder.get("/v1/volumes", headers={"Authorization": f"Bearer {api_keys.generate_api_key()}"}),
        flooder.get("/v1/volumes", headers={"Authorization": "Bearer not-a-key"}),
        flooder.get("/healthz", headers={"Authorization": "Bearer not-a-key"}),
        flooder.request("INVENTED", "/anything"),
    ):
        assert response.status_code == 429, response.text
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["code"] == "rate_limited" and response.json()["field"] == "Authorization"
        assert 1 <= int(response.headers["retry-after"]) <= 60 and response.headers["x-request-id"]
    # A valid key is still served from that address (it has its own limit), and others are unaffected.
    valid = flooder.get("/v1/volumes", headers={"Authorization": f"Bearer {tenant.admin_key}"})
    assert valid.status_code == 200
    neighbour = TestClient(limited_app, client=("192.0.2.8", 4000))
    assert neighbour.get("/healthz").status_code == 200
    assert limited_app.state.gpucloud.address_limiter.tracked_addresses == 2
