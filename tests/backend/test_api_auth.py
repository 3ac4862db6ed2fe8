"""Auth and tenancy: bearer API keys with prefix and checksum, roles, 404 across projects, request ids."""

from __future__ import annotations

from fastapi.testclient import TestClient

from backend.domain import api_keys
from backend.services import auth
from backend.settings import Settings
from backend.store.db import make_engine, make_session_factory
from tests.backend.conftest import Tenant, make_tenant
from tests.backend.keys import ed25519_key


def test_api_key_format_has_prefix_checksum_and_only_digest_is_stored(settings: Settings) -> None:
    key = api_keys.generate_api_key()
    assert key.startswith("gpc_") and len(key) == api_keys.KEY_LENGTH and api_keys.is_well_formed(key)
    typo = key[:10] + ("A" if key[10] != "A" else "B") + key[11:]
    assert not api_keys.is_well_formed(typo)
    make_tenant(settings, "digest-check")
    engine = make_engine(settings)
    with make_session_factory(engine)() as session:
        from sqlalchemy import select

        from backend.store.models import ApiKey

        rows = session.scalars(select(ApiKey)).all()
    engine.dispose()
    assert rows and all(len(r.digest) == 64 and not r.digest.startswith("gpc_") for r in rows)


def test_auth_missing_malformed_and_unknown_keys_get_401_problem(client: TestClient) -> None:
    for headers in (
        {},
        {"Authorization": "Basic abc"},
        {"Authorization": "Bearer nope"},
        {"Authorization": f"Bearer {api_keys.generate_api_key()}"},
    ):
        response = client.get("/v1/ssh-keys", headers=headers)
        assert response.status_code == 401, headers
        assert response.headers["content-type"] == "application/problem+json"
        body = response.json()
        assert body["field"] == "Authorization" and body["code"] in ("missing_api_key", "invalid_api_key")
        assert response.headers["www-authenticate"] == "Bearer"


def test_auth_revoked_key_is_refused(admin: TestClient, tenant: Tenant, settings: Settings) -> None:
    assert admin.get("/v1/ssh-keys").status_code == 200
    engine = make_engine(settings)
    with make_session_factory(engine, write=True).begin() as session:
        auth.revoke_api_key(session=session, prefix=api_keys.display_prefix(tenant.admin_key))
    engine.dispose()
    response = admin.get("/v1/ssh-keys")
    assert response.status_code == 401 and response.json()["code"] == "invalid_api_key"


def test_auth_member_reads_but_every_write_is_403(admin: TestClient, member: TestClient) -> None:
    created = admin.post("/v1/ssh-keys", json={"name": "k", "public_key": ed25519_key()}).json()
    assert member.get(f"/v1/ssh-keys/{created['id']}").status_code == 200
    attempts = [
        member.post("/v1/ssh-keys", json={"name": "m", "public_key": ed25519_key()}),
        member.patch(f"/v1/ssh-keys/{created['id']}", json={"name": "x"}),
        member.delete(f"/v1/ssh-keys/{created['id']}"),
        member.post("/v1/volumes", json={"name": "v", "region": "us-east-1", "size_tib": 1}),
        member.post("/v1/clusters", json={"name": "c", "region": "us-east-1", "instance_type": "1xH100"}),
        member.get("/v1/audit-events"),
    ]
    for response in attempts:
        assert response.status_code == 403, response.text
        assert response.json()["code"] == "forbidden_role"
    assert len(admin.get("/v1/ssh-keys").json()["items"]) == 1


def test_auth_another_projects_ids_answer_404(admin: TestClient, settings: Settings) -> None:
    other = make_tenant(settings, "other")
    foreign = TestClient(admin.app, headers={"Authorization": f"Bearer {other.admin_key}"})
    key = admin.post("/v1/ssh-keys", json={"name": "k", "public_key": ed25519_key()}).json()
    volume = admin.post("/v1/volumes", json={"name": "v", "region": "us-east-1", "size_tib": 1}).json()
    for path in (f"/v1/ssh-keys/{key['id']}", f"/v1/volumes/{volume['id']}"):
        assert foreign.get(path).status_code == 404
        assert foreign.delete(path).status_code == 404
        assert foreign.patch(path, json={"name": "stolen"}).status_code == 404
    assert foreign.get("/v1/ssh-keys").json()["items"] == []
    reference = foreign.post(
        "/v1/clusters",
        json={"name": "c", "region": "us-east-1", "instance_type": "1xH100", "ssh_key_ids": [key["id"]]},
    )
    assert reference.status_code == 422 and reference.json()["field"] == "ssh_key_ids[0]"
    assert admin.get(f"/v1/ssh-keys/{key['id']}").json()["name"] == "k"


def test_request_id_is_echoed_or_generated(admin: TestClient) -> None:
    assert (
        admin.get("/v1/ssh-keys", headers={"X-Request-Id": "trace-123"}).headers["x-request-id"]
        == "trace-123"
    )
    generated = admin.get("/v1/ssh-keys").headers["x-request-id"]
    assert generated.startswith("req_")
    problem = admin.get("/v1/ssh-keys/ssh_nope", headers={"X-Request-Id": "abc"})
    assert problem.headers["x-request-id"] == "abc" and problem.json()["request_id"] == "abc"


def _stored_count(settings: Settings, key_id: str) -> int:
    from sqlalchemy import func, select

    from backend.store.models import RateLimitCounter

    engine = make_engine(settings)
    with make_session_factory(engine)() as session:
        total = session.scalar(
            select(func.coalesce(func.sum(RateLimitCounter.count), 0)).where(
                RateLimitCounter.api_key_id == key_id
            )
        )
    engine.dispose()
    return int(total or 0)


def test_rate_limit_periodic_sync_runs_in_the_background_not_in_the_request(
    settings: Settings, tenant: Tenant
) -> None:
    import time

    from backend.services.rate_limit import RateLimiter

    engine = make_engine(settings)
    sessions = make_session_factory(engine, write=True)
    key_id = auth.Authenticator(sessions=sessions, cache_seconds=0).authenticate(tenant.admin_key).api_key_id
    limiter = RateLimiter(sessions=sessions, limit=1000, window_seconds=3600, sync_every=20)
    # Far from the budget no request is asked to sync: a sync is due after the 10th (half the batch).
    assert [limiter.count(key_id) for _ in range(12)] == [False] * 12
    deadline = time.monotonic() + 30  # the background thread adds them; wait for it, however slow
    while _stored_count(settings, key_id) < 10 and time.monotonic() < deadline:
        time.sleep(0.05)
    engine.dispose()
    assert _stored_count(settings, key_id) >= 10


def test_rate_limit_near_the_budget_every_request_syncs_before_its_answer(
    settings: Settings, tenant: Tenant
) -> None:
    from backend.domain.errors import RateLimited
    from backend.services.rate_limit import RateLimiter

    engine = make_engine(settings)
    sessions = make_session_factory(engine, write=True)
    key_id = auth.Authenticator(sessions=sessions, cache_seconds=0).authenticate(tenant.admin_key).api_key_id
    limiter = RateLimiter(sessions=sessions, limit=10, window_seconds=3600, sync_every=5)
    # From the 5th request on (within sync_every of 10) each one syncs before its answer, whatever the
    # background thread has added by then; the 11th is refused and every request is in the database.
    for _ in range(10):
        limiter.hit(key_id)
    try:
        limiter.hit(key_id)
    except RateLimited as limited:
        assert limited.headers and int(limited.headers["Retry-After"]) >= 1
    else:
        raise AssertionError("the 11th request in the window was allowed")
    engine.dispose()
    assert _stored_count(settings, key_id) == 11


def test_rate_limit_batch_is_20_or_one_percent_of_the_limit_unless_set() -> None:
    # The default limit keeps the batch of 20 (so 60 requests of overshoot with three replicas); a high
    # limit gets a batch of 1 % of it (the same share of the budget), not a write every 10 requests.
    assert Settings().rate_limit_batch == 20
    assert Settings(rate_limit_requests=1_000_000).rate_limit_batch == 10_000
    assert Settings(rate_limit_requests=1_000_000, rate_limit_sync_every=1).rate_limit_batch == 1
    assert Settings(rate_limit_requests=100, rate_limit_sync_every=5).rate_limit_batch == 5
