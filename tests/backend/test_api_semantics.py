"""API semantics: idempotency keys, ETags with If-Match, keyset pages, rate limits and the audit log."""

from __future__ import annotations

from datetime import timedelta

from fastapi.testclient import TestClient
from sqlalchemy import select

from backend.app import create_app
from backend.settings import Settings
from backend.store.db import make_engine, make_session_factory
from backend.store.models import IdempotencyRecord
from tests.backend.conftest import Tenant
from tests.backend.keys import ed25519_key


def _replica(settings: Settings, key: str, **overrides: object) -> TestClient:
    """A second app on the same database: another `serve` replica."""
    app = create_app(settings.model_copy(update=overrides))
    return TestClient(app, headers={"Authorization": f"Bearer {key}"})


def test_idempotency_same_key_and_body_replays_the_stored_response(
    admin: TestClient, settings: Settings, tenant: Tenant
) -> None:
    body = {"name": "k", "public_key": ed25519_key()}
    first = admin.post("/v1/ssh-keys", json=body, headers={"Idempotency-Key": "create-k-1"})
    replica = _replica(settings, tenant.admin_key)
    again = replica.post("/v1/ssh-keys", json=body, headers={"Idempotency-Key": "create-k-1"})
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json() and again.headers["etag"] == first.headers["etag"]
    assert again.headers["idempotent-replayed"] == "true"
    assert len(admin.get("/v1/ssh-keys").json()["items"]) == 1
    replica.app.state.gpucloud.engine.dispose()


def test_idempotency_same_key_different_body_is_422(admin: TestClient) -> None:
    admin.post(
        "/v1/volumes",
        json={"name": "a", "region": "us-east-1", "size_tib": 1},
        headers={"Idempotency-Key": "k-2"},
    )
    response = admin.post(
        "/v1/volumes",
        json={"name": "b", "region": "us-east-1", "size_tib": 1},
        headers={"Idempotency-Key": "k-2"},
    )
    assert response.status_code == 422 and response.json()["code"] == "idempotency_key_reused"
    assert response.json()["field"] == "Idempotency-Key"
    assert [v["name"] for v in admin.get("/v1/volumes").json()["items"]] == ["a"]


def test_idempotency_records_are_kept_24h_in_the_database(admin: TestClient, settings: Settings) -> None:
    admin.post(
        "/v1/volumes",
        json={"name": "a", "region": "us-east-1", "size_tib": 1},
        headers={"Idempotency-Key": "k-3"},
    )
    engine = make_engine(settings)
    with make_session_factory(engine)() as session:
        record = session.scalars(select(IdempotencyRecord)).one()
    engine.dispose()
    assert record.key == "k-3" and record.expires_at - record.created_at >= timedelta(hours=24)


def test_idempotency_failed_request_is_not_stored(admin: TestClient) -> None:
    bad = admin.post(
        "/v1/volumes",
        json={"name": "a", "region": "nowhere", "size_tib": 1},
        headers={"Idempotency-Key": "k-4"},
    )
    assert bad.status_code == 422
    good = admin.post(
        "/v1/volumes",
        json={"name": "a", "region": "us-east-1", "size_tib": 1},
        headers={"Idempotency-Key": "k-4"},
    )
    assert good.status_code == 201


def test_etag_and_if_match(admin: TestClient) -> None:
    volume = admin.post("/v1/volumes", json={"name": "a", "region": "us-east-1", "size_tib": 1})
    etag = volume.headers["etag"]
    path = f"/v1/volumes/{volume.json()['id']}"
    assert admin.get(path).headers["etag"] == etag
    ok = admin.patch(path, json={"size_tib": 2}, headers={"If-Match": etag})
    assert ok.status_code == 200 and ok.headers["etag"] != etag
    stale = admin.patch(path, json={"size_tib": 3}, headers={"If-Match": etag})
    assert stale.status_code == 412 and stale.json()["code"] == "etag_mismatch"
    assert admin.delete(path, headers={"If-Match": etag}).status_code == 412
    assert admin.get(path).json()["size_tib"] == 2
    assert admin.delete(path, headers={"If-Match": ok.headers["etag"]}).status_code == 204


def test_etag_if_match_on_clusters(admin: TestClient) -> None:
    created = admin.post("/v1/clusters", json={"name": "c", "region": "us-east-1", "instance_type": "1xH100"})
    path = f"/v1/clusters/{created.json()['id']}"
    assert admin.patch(path, json={"labels": {"a": "b"}}, headers={"If-Match": '"999"'}).status_code == 412
    assert (
        admin.patch(
            path, json={"labels": {"a": "b"}}, headers={"If-Match": created.headers["etag"]}
        ).status_code
        == 200
    )


def test_keyset_pagination_with_opaque_tokens(admin: TestClient) -> None:
    ids = [
        admin.post("/v1/volumes", json={"name": f"v{i}", "region": "us-east-1", "size_tib": 1}).json()["id"]
        for i in range(5)
    ]
    seen, token, pages = [], None, 0
    while True:
        params = {"page_size": 2, **({"page_token": token} if token else {})}
        page = admin.get("/v1/volumes", params=params).json()
        seen += [v["id"] for v in page["items"]]
        pages += 1
        token = page["next_page_token"]
        if token is None:
            break
        assert "vol_" not in token  # opaque
    assert seen == ids and pages == 3
    bad = admin.get("/v1/volumes", params={"page_token": "garbage"})
    assert bad.status_code == 400 and bad.json()["field"] == "page_token"
    other_kind = admin.get("/v1/ssh-keys", params={"page_token": token or _first_token(admin)})
    assert other_kind.status_code == 400


def _first_token(admin: TestClient) -> str:
    return str(admin.get("/v1/volumes", params={"page_size": 1}).json()["next_page_token"])


def test_rate_limit_429_with_retry_after_shared_across_replicas(settings: Settings, tenant: Tenant) -> None:
    first = _replica(settings, tenant.member_key, rate_limit_requests=4)
    second = _replica(settings, tenant.member_key, rate_limit_requests=4)
    statuses = [first.get("/v1/volumes").status_code for _ in range(2)]
    statuses += [second.get("/v1/volumes").status_code for _ in range(2)]
    limited = first.get("/v1/volumes")
    assert statuses == [200] * 4 and limited.status_code == 429
    assert int(limited.headers["retry-after"]) >= 1 and limited.json()["code"] == "rate_limited"
    assert second.get("/v1/volumes").status_code == 429
    for client in (first, second):
        client.app.state.gpucloud.engine.dispose()


def test_audit_log_records_every_write(admin: TestClient) -> None:
    key = admin.post(
        "/v1/ssh-keys",
        json={"name": "k", "public_key": ed25519_key()},
        headers={"X-Request-Id": "req-audit-1"},
    ).json()
    admin.patch(f"/v1/ssh-keys/{key['id']}", json={"name": "k2"})
    volume = admin.post("/v1/volumes", json={"name": "v", "region": "us-east-1", "size_tib": 1}).json()
    cluster = admin.post(
        "/v1/clusters", json={"name": "c", "region": "us-east-1", "instance_type": "1xH100"}
    ).json()
    admin.post(f"/v1/clusters/{cluster['id']}/volumes/{volume['id']}")
    admin.delete(f"/v1/clusters/{cluster['id']}/volumes/{volume['id']}")
    admin.patch(f"/v1/clusters/{cluster['id']}", json={"labels": {"x": "y"}})
    admin.delete(f"/v1/clusters/{cluster['id']}")
    admin.patch(f"/v1/volumes/{volume['id']}", json={"size_tib": 2})
    admin.delete(f"/v1/volumes/{volume['id']}")
    admin.delete(f"/v1/ssh-keys/{key['id']}")
    events = admin.get("/v1/audit-events", params={"page_size": 200}).json()["items"]
    actions = [e["action"] for e in events]
    assert actions == [
        "ssh_key.create",
        "ssh_key.update",
        "volume.create",
        "cluster.create",
        "cluster.attach_volume",
        "cluster.detach_volume",
        "cluster.update",
        "cluster.delete",
        "volume.update",
        "volume.delete",
        "ssh_key.delete",
    ]
    first = events[0]
    assert first["request_id"] == "req-audit-1" and first["resource_id"] == key["id"]
    assert first["actor"] == admin.headers["authorization"].split()[1][:12] and first["occurred_at"]
    only = admin.get("/v1/audit-events", params={"resource_id": key["id"]}).json()["items"]
    assert [e["action"] for e in only] == ["ssh_key.create", "ssh_key.update", "ssh_key.delete"]


def test_rate_limit_batched_counting_overshoots_by_at_most_the_batch_per_replica(
    settings: Settings, tenant: Tenant
) -> None:
    from backend.domain.errors import RateLimited
    from backend.services.auth import Authenticator
    from backend.services.rate_limit import RateLimiter

    engine = make_engine(settings)
    sessions = make_session_factory(engine, write=True)
    key_id = Authenticator(sessions=sessions, cache_seconds=0).authenticate(tenant.admin_key).api_key_id
    replicas = [RateLimiter(sessions=sessions, limit=30, window_seconds=3600, sync_every=5) for _ in range(2)]
    allowed = 0
    for attempt in range(100):
        try:
            replicas[attempt % 2].hit(key_id)
            allowed += 1
        except RateLimited:
            pass
    engine.dispose()
    assert 30 <= allowed <= 30 + 2 * 5


def test_idempotency_expired_records_are_purged_and_the_key_is_free_again(
    admin: TestClient, settings: Settings
) -> None:
    first = {"name": "a", "region": "us-east-1", "size_tib": 1}
    assert admin.post("/v1/volumes", json=first, headers={"Idempotency-Key": "k-old"}).status_code == 201
    engine = make_engine(settings)
    with make_session_factory(engine, write=True).begin() as session:
        record = session.scalars(select(IdempotencyRecord)).one()
        record.expires_at = record.created_at - timedelta(seconds=1)
    second = {"name": "b", "region": "us-east-1", "size_tib": 1}
    assert admin.post("/v1/volumes", json=second, headers={"Idempotency-Key": "k-old"}).status_code == 201
    with make_session_factory(engine)() as session:
        records = session.scalars(select(IdempotencyRecord)).all()
    engine.dispose()
    assert [r.key for r in records] == ["k-old"] and records[0].expires_at > records[0].created_at
