"""Roles: every role against every operation of the API, the matrix generated from the routes' declared
permissions (the same declaration docs/api.md's table is generated from), on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from backend.api.role_matrix import BEGIN, END, operations, render_matrix
from backend.app import create_app
from backend.domain.access import OPERATOR_CLUSTER_FIELDS, ROLES, Permission, allows
from backend.settings import Settings
from tests.backend.access_keys import client_for, make_key
from tests.backend.keys import ed25519_key
from tests.contract.private_keys import private_key

API_DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"
CLUSTER = {"name": "train", "region": "us-east-1", "instance_type": "1xH100", "node_count": 1}
RESERVATION = {"name": "block", "region": "us-east-1", "instance_type": "1xH100", "node_count": 1,
               "duration_days": 1}
HOST_POOL = {"name": "lab", "region": "lab", "ssh_private_key": private_key("ed25519", "openssh"),
             "hosts": [{"address": "10.0.0.5"}]}


def _bodies() -> dict[tuple[str, str], Any]:
    """A valid body for every operation that takes one (so an allowed role gets past validation)."""
    return {
        ("POST", "/v1/clusters"): {**CLUSTER, "name": "made"},
        ("PATCH", "/v1/clusters/{cluster_id}"): {"labels": {"team": "research"}},
        ("POST", "/v1/clusters/{cluster_id}/actions"): {"action": "restart_workers"},
        ("POST", "/v1/clusters/{cluster_id}/nodes/{name}/actions"): {"action": "drain"},
        ("POST", "/v1/volumes"): {"name": "made", "region": "us-east-1", "size_tib": 1},
        ("PATCH", "/v1/volumes/{volume_id}"): {"name": "renamed"},
        ("POST", "/v1/ssh-keys"): {"name": "made", "public_key": ed25519_key()},
        ("PATCH", "/v1/ssh-keys/{ssh_key_id}"): {"name": "renamed"},
        ("POST", "/v1/billing/credits"): {"amount_usd": "5"},
        ("POST", "/v1/pricing/estimate"): CLUSTER,
        ("POST", "/v1/budgets"): {"name": "made", "amount_usd": "100"},
        ("PATCH", "/v1/budgets/{budget_id}"): {"amount_usd": "200"},
        ("POST", "/v1/security-groups"): {"name": "made"},
        ("PATCH", "/v1/security-groups/{security_group_id}"): {"name": "renamed"},
        ("POST", "/v1/reservations"): RESERVATION,
        ("POST", "/v1/reserved-ips"): {"region": "us-east-1"},
        ("PATCH", "/v1/reserved-ips/{reserved_ip_id}"): {"name": "renamed"},
        ("POST", "/v1/clusters/{cluster_id}/reserve-ip"): {"name": "kept"},
        ("POST", "/v1/host-pools"): {**HOST_POOL, "name": "made"},
        ("PATCH", "/v1/host-pools/{host_pool_id}"): {"name": "renamed"},
    }


def _world(admin: TestClient) -> dict[str, str]:
    key = admin.post("/v1/ssh-keys", json={"name": "k", "public_key": ed25519_key()}).json()["id"]
    volume = admin.post("/v1/volumes", json={"name": "v", "region": "us-east-1", "size_tib": 1}).json()["id"]
    cluster = admin.post("/v1/clusters", json={**CLUSTER, "ssh_key_ids": [key]}).json()["id"]
    budget = admin.post("/v1/budgets", json={"name": "b", "amount_usd": "1000"}).json()["id"]
    group = admin.post("/v1/security-groups", json={"name": "g"}).json()["id"]
    reservation = admin.post("/v1/reservations", json=RESERVATION).json()["id"]
    reserved_ip = admin.post("/v1/reserved-ips", json={"region": "us-east-1"}).json()["id"]
    host_pool = admin.post("/v1/host-pools", json=HOST_POOL).json()["id"]
    return {"cluster_id": cluster, "volume_id": volume, "ssh_key_id": key, "budget_id": budget,
            "security_group_id": group, "reservation_id": reservation, "reserved_ip_id": reserved_ip,
            "host_pool_id": host_pool, "file": "hosts", "name": "train-0"}


def _declared(admin: TestClient, ids: dict[str, str]) -> list[str]:
    """The ETags of the declared resources: a refused call must change none of them."""
    paths = (
        f"/v1/clusters/{ids['cluster_id']}",
        f"/v1/volumes/{ids['volume_id']}",
        f"/v1/ssh-keys/{ids['ssh_key_id']}",
        f"/v1/budgets/{ids['budget_id']}",
        f"/v1/security-groups/{ids['security_group_id']}",
        f"/v1/reserved-ips/{ids['reserved_ip_id']}",
        f"/v1/host-pools/{ids['host_pool_id']}",
    )
    return [admin.get(path).headers["ETag"] for path in paths]


@pytest.mark.parametrize("role", ROLES)
def test_roles_every_role_x_operation_matches_the_declared_permission(
    role: str, app: FastAPI, admin: TestClient, settings: Settings
) -> None:
    ids = _world(admin)
    before = _declared(admin, ids)
    caller = client_for(admin, make_key(settings, "acme", role))
    bodies = _bodies()
    matrix = operations(app)
    assert len(matrix) >= 30  # every keyed route of the API, not a handful
    for method, path, permission, _ in matrix:
        body = bodies.get((method, path))
        response = caller.request(method, path.format_map(ids), json=body)
        refused = response.status_code == 403 and response.json().get("code") == "forbidden_role"
        where = f"{role} {method} {path}: {response.status_code} {response.text[:300]}"
        assert response.status_code < 500, where
        assert refused is not allows(role, permission), where
    if not allows(role, Permission.OPERATE):
        assert _declared(admin, ids) == before
        assert [c["name"] for c in admin.get("/v1/clusters").json()["items"]] == ["train"]


def test_roles_operator_patches_day2_fields_only(admin: TestClient, settings: Settings) -> None:
    ids = _world(admin)
    operator = client_for(admin, make_key(settings, "acme", "operator"))
    cluster = f"/v1/clusters/{ids['cluster_id']}"
    allowed = operator.patch(cluster, json={"labels": {"owner": "ops"}, "volume_ids": [ids["volume_id"]]})
    assert allowed.status_code == 200, allowed.text
    assert allowed.json()["labels"] == {"owner": "ops"} and allowed.json()["volume_ids"] == [ids["volume_id"]]
    for field, value in (("name", "renamed"), ("deletion_protection", True), ("ssh_key_ids", [])):
        refused = operator.patch(cluster, json={"node_count": 1, field: value})
        assert refused.status_code == 403, refused.text
        problem = refused.json()
        assert (problem["code"], problem["field"]) == ("forbidden_role", field)
        assert "operator role" in problem["detail"] and "admin key" in problem["detail"]
    assert admin.get(cluster).json()["name"] == "train"
    assert "ssh_key_ids" not in OPERATOR_CLUSTER_FIELDS


def test_roles_read_only_refusal_names_the_role_and_the_key_to_use(
    admin: TestClient, member: TestClient, settings: Settings
) -> None:
    viewer = client_for(admin, make_key(settings, "acme", "viewer"))
    for client, role in ((viewer, "viewer"), (member, "member")):
        detail = client.post("/v1/volumes", json={"name": "v", "region": "us-east-1", "size_tib": 1}).json()
        assert detail["detail"] == f"this API key has the {role} role, which is read-only; use an admin key"
        ids = _world(admin)
        scale = client.patch(f"/v1/clusters/{ids['cluster_id']}", json={"node_count": 1}).json()
        assert scale["detail"].endswith("use an operator or admin key")


def test_roles_matrix_in_the_api_doc_is_generated_from_the_routes(tmp_path: Path) -> None:
    application = create_app(Settings(database_url="sqlite://", embedded_worker=False, data_dir=tmp_path))
    try:
        expected = render_matrix(application)
    finally:
        application.state.gpucloud.engine.dispose()
    text = API_DOC.read_text()
    committed = text[text.index(BEGIN) : text.index(END) + len(END)]
    assert committed == expected, "docs/api.md's role matrix is stale: run `bash scripts/generate.sh roles`"
    assert "| `PATCH /v1/clusters/{cluster_id}` | operate | — | — | ✓ `labels`" in expected
