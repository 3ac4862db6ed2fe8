"""GET /v1/clusters/{id} answered in front of the router from the route's last answer while the database
is unchanged (backend/api/cluster_reads.py): never stale, even after another process's commit, and
guarded as the route is (project, team scope, rate limit). SQLite and PostgreSQL."""

from __future__ import annotations

import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import text

from backend.api import clusters
from backend.app import create_app
from backend.services import rate_limit
from backend.settings import Settings
from backend.store.db import make_engine
from tests.backend.access_keys import client_for, make_key
from tests.backend.conftest import Tenant, make_tenant
from tests.backend.keys import ed25519_key

CLUSTER = {"region": "us-east-1", "instance_type": "1xH100", "node_count": 1}


@pytest.fixture
def cached_settings(settings: Settings) -> Settings:
    """The test settings with key lookups cached, as served (the suite's default of 0 never caches a key,
    so every request would go to the route), and no rate limit: its counts, written to the database in
    the background, are commits like any other and would make the next GET go to the route."""
    return settings.model_copy(update={"auth_cache_seconds": 60.0, "rate_limit_requests": 0})


@pytest.fixture
def cached_app(cached_settings: Settings) -> Iterator[FastAPI]:
    application = create_app(cached_settings)
    with TestClient(application):  # runs the lifespan
        yield application
    application.state.gpucloud.engine.dispose()


@pytest.fixture
def route_answers(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ids of the clusters the route itself rendered (a GET served in front of it adds none)."""
    rendered: list[str] = []
    original = clusters.to_out

    def counting(session: Any, row: Any, *args: Any, **kwargs: Any) -> Any:
        rendered.append(row.id)
        return original(session, row, *args, **kwargs)

    monkeypatch.setattr(clusters, "to_out", counting)
    return rendered


def _cluster(client: TestClient, name: str = "train") -> str:
    key = client.post("/v1/ssh-keys", json={"name": f"{name}-key", "public_key": ed25519_key()})
    assert key.status_code == 201, key.text
    created = client.post("/v1/clusters", json={**CLUSTER, "name": name, "ssh_key_ids": [key.json()["id"]]})
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


def _rename_elsewhere(settings: Settings, cluster_id: str, name: str) -> None:
    """Change the cluster from another connection, as another replica or an engine worker would."""
    engine = make_engine(settings)
    try:
        with engine.begin() as connection:
            rename = text("UPDATE clusters SET name = :name WHERE id = :id")
            connection.execute(rename, {"name": name, "id": cluster_id})
    finally:
        engine.dispose()


def test_a_repeated_get_is_served_unchanged_until_anything_commits(
    cached_app: FastAPI, cached_settings: Settings, tenant: Tenant, route_answers: list[str]
) -> None:
    admin = client_for(TestClient(cached_app), tenant.admin_key)
    cluster_id = _cluster(admin)
    route_answers.clear()  # the create's answer
    first, second = admin.get(f"/v1/clusters/{cluster_id}"), admin.get(f"/v1/clusters/{cluster_id}")
    assert first.status_code == second.status_code == 200
    assert second.content == first.content and second.headers["ETag"] == first.headers["ETag"]
    assert second.headers["content-type"] == "application/json" and "x-request-id" in second.headers
    assert route_answers == [cluster_id], "the second GET was rendered by the route again"
    head = admin.head(f"/v1/clusters/{cluster_id}")
    assert head.status_code == 200 and head.content == b"" and head.headers["ETag"] == first.headers["ETag"]
    assert route_answers == [cluster_id]

    # A change committed by another connection (another replica, the engine worker) shows at once.
    _rename_elsewhere(cached_settings, cluster_id, "renamed-elsewhere")
    assert admin.get(f"/v1/clusters/{cluster_id}").json()["name"] == "renamed-elsewhere"
    # So does one made through this replica's API.
    patched = admin.patch(f"/v1/clusters/{cluster_id}", json={"name": "renamed-here"})
    assert patched.status_code == 200, patched.text
    again = admin.get(f"/v1/clusters/{cluster_id}")
    assert again.json()["name"] == "renamed-here" and again.headers["ETag"] == patched.headers["ETag"]
    assert len(route_answers) == 4  # the GET after the other commit, the PATCH's answer, the last GET
    # The request is measured under the route's template, as the route's own answers are.
    metrics = admin.get("/metrics").text
    assert 'route="/v1/clusters/{cluster_id}"' in metrics


def test_a_served_answer_keeps_the_route_s_project_and_team_scope(
    cached_app: FastAPI, cached_settings: Settings, tenant: Tenant, route_answers: list[str]
) -> None:
    nlp = client_for(TestClient(cached_app), make_key(cached_settings, "acme", "admin", "team=nlp"))
    cluster_id = _cluster(nlp)
    route_answers.clear()
    assert nlp.get(f"/v1/clusters/{cluster_id}").status_code == 200  # the route fills the cache
    assert nlp.get(f"/v1/clusters/{cluster_id}").status_code == 200
    assert route_answers == [cluster_id]

    vision = client_for(nlp, make_key(cached_settings, "acme", "viewer", "team=vision"))
    other_project = client_for(nlp, make_tenant(cached_settings, "other").admin_key)
    for outsider in (vision, other_project):
        outsider.get("/v1/ssh-keys")  # its key is in the lookup cache, so the GET below meets the entry
        refused = outsider.get(f"/v1/clusters/{cluster_id}")
        assert refused.status_code == 404 and refused.json()["code"] == "not_found", refused.text
    nlp_viewer = client_for(nlp, make_key(cached_settings, "acme", "viewer", "team=nlp"))
    assert nlp_viewer.get(f"/v1/clusters/{cluster_id}").json()["id"] == cluster_id
    assert client_for(nlp, "gpc_not-a-key").get(f"/v1/clusters/{cluster_id}").status_code == 401
    assert TestClient(cached_app).get(f"/v1/clusters/{cluster_id}").status_code == 401


def test_every_get_counts_once_against_the_key_s_rate_limit(
    settings: Settings, tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Near its budget a key's count is written to the database on every request, which makes each GET
    # go to the route as well: a request admitted in front of the router must not be counted again there.
    # The key's window follows the wall clock: held mid-window, so the requests cannot straddle two.
    mid_window = SimpleNamespace(time=lambda: 1_800_000_030.0, monotonic=time.monotonic)
    monkeypatch.setattr(rate_limit, "time", mid_window)
    limited = settings.model_copy(update={"auth_cache_seconds": 60.0, "rate_limit_requests": 30})
    application = create_app(limited)
    try:
        with TestClient(application) as client:
            admin = client_for(client, tenant.admin_key)
            cluster_id = _cluster(admin)  # two requests of the budget
            statuses = [admin.get(f"/v1/clusters/{cluster_id}").status_code for _ in range(29)]
            assert statuses == [200] * 28 + [429]
            refused = admin.get(f"/v1/clusters/{cluster_id}")
            assert refused.json()["code"] == "rate_limited" and int(refused.headers["Retry-After"]) >= 1
    finally:
        application.state.gpucloud.engine.dispose()


def test_with_the_cache_off_every_get_goes_to_the_route(
    settings: Settings, tenant: Tenant, route_answers: list[str]
) -> None:
    off = settings.model_copy(update={"auth_cache_seconds": 60.0, "cluster_read_cache_entries": 0})
    application = create_app(off)
    try:
        with TestClient(application) as client:
            admin = client_for(client, tenant.admin_key)
            cluster_id = _cluster(admin)
            route_answers.clear()
            assert [admin.get(f"/v1/clusters/{cluster_id}").status_code for _ in range(2)] == [200, 200]
            assert route_answers == [cluster_id, cluster_id]
    finally:
        application.state.gpucloud.engine.dispose()
