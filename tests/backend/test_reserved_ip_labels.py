"""An IP reserved for a cluster (`POST /v1/clusters/{id}/reserve-ip`) takes the cluster's team label,
whoever reserves it: the cluster's team sees the address its cluster answers on."""

from __future__ import annotations

from fastapi.testclient import TestClient

from backend.domain.access import Scope
from backend.services import auth
from backend.settings import Settings
from backend.store.db import make_engine, make_session_factory
from tests.backend.conftest import Tenant


def _team_key(settings: Settings, team: str) -> str:
    engine = make_engine(settings)
    with make_session_factory(engine, write=True).begin() as session:
        _, key = auth.create_api_key(session=session, project_name="acme", role="admin",
                                     scope=Scope("team", team))
    engine.dispose()
    return key


def _team_cluster(admin: TestClient) -> str:
    response = admin.post("/v1/clusters", json={"name": "nlp-train", "region": "us-east-1",
                                                "instance_type": "8xH100", "node_count": 1,
                                                "labels": {"team": "nlp"}})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def test_reserve_ip_by_an_unscoped_admin_labels_the_ip_with_the_clusters_team(
    admin: TestClient, tenant: Tenant, settings: Settings
) -> None:
    nlp = TestClient(admin.app, headers={"Authorization": f"Bearer {_team_key(settings, 'nlp')}"})
    cluster_id = _team_cluster(admin)
    reserved = admin.post(f"/v1/clusters/{cluster_id}/reserve-ip", json={"labels": {"env": "prod"}})
    assert reserved.status_code == 201, reserved.text
    assert reserved.json()["labels"] == {"env": "prod", "team": "nlp"}
    ip_id = reserved.json()["id"]
    assert nlp.get(f"/v1/reserved-ips/{ip_id}").json()["cluster_id"] == cluster_id
    assert [ip["id"] for ip in nlp.get("/v1/reserved-ips").json()["items"]] == [ip_id]


def test_reserve_ip_with_another_team_label_than_the_clusters_is_422_naming_it(
    admin: TestClient, tenant: Tenant
) -> None:
    cluster_id = _team_cluster(admin)
    refused = admin.post(f"/v1/clusters/{cluster_id}/reserve-ip", json={"labels": {"team": "cv"}})
    assert refused.status_code == 422, refused.text
    assert refused.json()["field"] == "labels.team" and refused.json()["code"] == "label_mismatch"
    assert admin.get(f"/v1/clusters/{cluster_id}").json()["reserved_ip_id"] is None
