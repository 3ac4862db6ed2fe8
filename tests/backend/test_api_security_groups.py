"""/v1/security-groups: rules echoed, validated (422 naming the field), the lazy default group, attaching
to clusters, tenancy, delete refused while used."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from backend.settings import Settings
from tests.backend.conftest import Tenant, make_tenant

SSH_FROM_OFFICE = {"protocol": "tcp", "from_port": 22, "to_port": None, "cidr_blocks": ["203.0.113.0/24"],
                   "description": "office"}


def _group(admin: TestClient, **overrides: Any) -> dict[str, Any]:
    body = {"name": "web", "ingress": [SSH_FROM_OFFICE], **overrides}
    response = admin.post("/v1/security-groups", json=body)
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


def _cluster(admin: TestClient, **overrides: Any) -> dict[str, Any]:
    body = {"name": "c", "region": "us-east-1", "instance_type": "1xH100", **overrides}
    response = admin.post("/v1/clusters", json=body)
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


def test_security_group_create_echoes_rules_and_updates_in_place(admin: TestClient) -> None:
    group = _group(admin, egress=[{"protocol": "all", "cidr_blocks": ["0.0.0.0/0"]}])
    assert group["ingress"] == [SSH_FROM_OFFICE] and group["is_default"] is False
    assert group["egress"] == [{"protocol": "all", "from_port": None, "to_port": None,
                                "cidr_blocks": ["0.0.0.0/0"], "description": None}]
    assert admin.get(f"/v1/security-groups/{group['id']}").json() == group
    web = {"protocol": "tcp", "from_port": 8000, "to_port": 8100, "cidr_blocks": ["10.0.0.0/8"],
           "description": None}
    updated = admin.patch(f"/v1/security-groups/{group['id']}", json={"ingress": [web]})
    assert updated.status_code == 200 and updated.json()["ingress"] == [web]
    assert updated.json()["egress"] == group["egress"]


def test_security_group_bad_rules_are_422_naming_the_field(admin: TestClient) -> None:
    cases = [
        ({"protocol": "tcp", "from_port": 22, "cidr_blocks": ["10.0.0.1/8"]}, "ingress[0].cidr_blocks[0]",
         "invalid_security_rule"),
        ({"protocol": "tcp", "from_port": 22, "cidr_blocks": ["not-a-cidr"]}, "ingress[0].cidr_blocks[0]",
         None),
        ({"protocol": "tcp", "from_port": 90, "to_port": 80, "cidr_blocks": ["0.0.0.0/0"]},
         "ingress[0].to_port", "invalid_security_rule"),
        ({"protocol": "icmp", "from_port": 8, "cidr_blocks": ["0.0.0.0/0"]}, "ingress[0].from_port",
         "invalid_security_rule"),
        ({"protocol": "udp", "cidr_blocks": ["0.0.0.0/0"]}, "ingress[0].from_port", "invalid_security_rule"),
        ({"protocol": "tcp", "from_port": 70000, "cidr_blocks": ["0.0.0.0/0"]}, "ingress[0].from_port", None),
        ({"protocol": "gre", "cidr_blocks": ["0.0.0.0/0"]}, "ingress[0].protocol", None),
    ]
    for rule, field, code in cases:
        response = admin.post("/v1/security-groups", json={"name": "bad", "ingress": [rule]})
        assert response.status_code == 422, (rule, response.text)
        fields = [e.get("field") for e in response.json().get("errors", [])] + [response.json().get("field")]
        assert field in fields, (rule, response.json())
        if code is not None:
            assert code in [e.get("code") for e in response.json()["errors"]], response.json()
    too_many = [SSH_FROM_OFFICE] * 51
    response = admin.post("/v1/security-groups", json={"name": "bad", "ingress": too_many})
    assert response.status_code == 422 and "ingress" in response.text
    assert admin.get("/v1/security-groups").json()["items"] == []


def test_security_group_default_is_created_for_a_cluster_without_groups(admin: TestClient) -> None:
    assert admin.get("/v1/security-groups").json()["items"] == []
    cluster = _cluster(admin)
    assert cluster["security_group_ids"] == []
    (default,) = admin.get("/v1/security-groups").json()["items"]
    assert default["is_default"] is True and default["cluster_ids"] == [cluster["id"]]
    assert [(r["protocol"], r["from_port"]) for r in default["ingress"]] == [("tcp", 22)]
    assert [r["protocol"] for r in default["egress"]] == ["all"]
    _cluster(admin, name="d")
    assert len(admin.get("/v1/security-groups").json()["items"]) == 1  # one per project


def test_security_group_attach_in_place_and_delete_refused_while_used(admin: TestClient) -> None:
    group = _group(admin)
    cluster = _cluster(admin, security_group_ids=[group["id"]])
    assert cluster["security_group_ids"] == [group["id"]]
    refused = admin.delete(f"/v1/security-groups/{group['id']}")
    assert refused.status_code == 409 and refused.json()["code"] == "security_group_in_use"
    assert refused.json()["cluster_ids"] == [cluster["id"]] and cluster["id"] in refused.json()["detail"]
    detached = admin.patch(f"/v1/clusters/{cluster['id']}", json={"security_group_ids": []})
    assert detached.status_code == 200 and detached.json()["security_group_ids"] == []
    assert detached.json()["id"] == cluster["id"]  # in place
    assert admin.get(f"/v1/security-groups/{group['id']}").json()["cluster_ids"] == []
    assert admin.delete(f"/v1/security-groups/{group['id']}").status_code == 204
    default = next(g for g in admin.get("/v1/security-groups").json()["items"] if g["is_default"])
    assert default["cluster_ids"] == [cluster["id"]]
    assert admin.delete(f"/v1/security-groups/{default['id']}").status_code == 409


def test_security_group_of_another_project_is_404_and_cannot_be_attached(
    admin: TestClient, settings: Settings
) -> None:
    other: Tenant = make_tenant(settings, "rival")
    rival = TestClient(admin.app, headers={"Authorization": f"Bearer {other.admin_key}"},
                       raise_server_exceptions=False)
    theirs = _group(rival)
    assert admin.get(f"/v1/security-groups/{theirs['id']}").status_code == 404
    assert admin.patch(f"/v1/security-groups/{theirs['id']}", json={"name": "x"}).status_code == 404
    assert admin.delete(f"/v1/security-groups/{theirs['id']}").status_code == 404
    response = admin.post("/v1/clusters", json={"name": "c", "region": "us-east-1", "instance_type": "1xH100",
                                                "security_group_ids": [theirs["id"]]})
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "security_group_ids[0]"
    assert response.json()["errors"][0]["code"] == "not_found"
