"""The audit view per API key: `GET /v1/audit-events?api_key=PREFIX` lists the writes one key made
(admins only); a team-scoped admin sees its team's keys' writes only. SQLite and PostgreSQL."""

from __future__ import annotations

from fastapi.testclient import TestClient

from backend.domain.api_keys import display_prefix
from backend.settings import Settings
from tests.backend.access_keys import client_for, make_key
from tests.backend.conftest import Tenant

VOLUME = {"region": "us-east-1", "size_tib": 1}


def _actors(client: TestClient, **params: str) -> list[tuple[str, str]]:
    response = client.get("/v1/audit-events", params={"page_size": 200, **params})
    assert response.status_code == 200, response.text
    return [(e["actor"], e["action"]) for e in response.json()["items"]]


def test_audit_events_filtered_by_api_key_prefix(
    admin: TestClient, tenant: Tenant, settings: Settings
) -> None:
    operator_key = make_key(settings, "acme", "operator")
    operator = client_for(admin, operator_key)
    volume = admin.post("/v1/volumes", json={"name": "v", **VOLUME}).json()["id"]
    cluster = admin.post(
        "/v1/clusters", json={"name": "c", "region": "us-east-1", "instance_type": "1xH100", "node_count": 1}
    ).json()["id"]
    assert operator.post(f"/v1/clusters/{cluster}/volumes/{volume}").status_code == 200
    admin_prefix, operator_prefix = display_prefix(tenant.admin_key), display_prefix(operator_key)
    assert _actors(admin, api_key=operator_prefix) == [(operator_prefix, "cluster.attach_volume")]
    assert _actors(admin, api_key=admin_prefix) == [
        (admin_prefix, "volume.create"),
        (admin_prefix, "cluster.create"),
    ]
    assert _actors(admin, api_key="gpc_00000000") == []
    # The audit log is the admins': the operator whose writes it lists cannot read it.
    refused = operator.get("/v1/audit-events", params={"api_key": operator_prefix})
    assert refused.status_code == 403 and refused.json()["code"] == "forbidden_role"
    bad = admin.get("/v1/audit-events", params={"api_key": "not-a-key"})
    assert bad.status_code == 422 and bad.json()["field"] == "api_key"


def test_audit_events_of_a_scoped_admin_are_its_teams_keys_only(
    admin: TestClient, settings: Settings
) -> None:
    nlp_key, nlp_other = (
        make_key(settings, "acme", "admin", "team=nlp"),
        make_key(settings, "acme", "admin", "team=nlp"),
    )
    vision_key = make_key(settings, "acme", "admin", "team=vision")
    for key, name in ((nlp_key, "a"), (nlp_other, "b"), (vision_key, "c")):
        assert client_for(admin, key).post("/v1/volumes", json={"name": name, **VOLUME}).status_code == 201
    admin.post("/v1/volumes", json={"name": "d", **VOLUME})
    nlp = client_for(admin, nlp_key)
    nlp_prefixes = {display_prefix(nlp_key), display_prefix(nlp_other)}
    assert {actor for actor, _ in _actors(nlp)} == nlp_prefixes
    assert _actors(nlp, api_key=display_prefix(vision_key)) == []
    assert len(_actors(admin)) == 4
