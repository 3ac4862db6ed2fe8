"""/v1/clusters: the full spec echoed exactly, defaults, cross-field rules, PATCH, delete, attach/detach."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from backend.settings import Settings
from backend.store.billing_models import BillingAccount
from backend.store.db import make_engine, make_session_factory
from tests.backend.conftest import Tenant
from tests.backend.keys import ed25519_key

SPEC_FIELDS = (
    "name",
    "region",
    "instance_type",
    "node_count",
    "orchestrator",
    "interconnect",
    "container",
    "ssh_key_ids",
    "volume_ids",
    "billing",
    "labels",
    "deletion_protection",
    "max_hourly_cost_usd",
)


def _key(admin: TestClient) -> str:
    return str(admin.post("/v1/ssh-keys", json={"name": "k", "public_key": ed25519_key()}).json()["id"])


def _volume(admin: TestClient, region: str = "us-east-1") -> str:
    return str(admin.post("/v1/volumes", json={"name": "v", "region": region, "size_tib": 1}).json()["id"])


def _create(admin: TestClient, **spec: Any) -> dict[str, Any]:
    body = {"name": "train", "region": "us-east-1", "instance_type": "8xH100", "node_count": 2, **spec}
    response = admin.post("/v1/clusters", json=body)
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


def test_cluster_create_returns_exactly_what_was_written(admin: TestClient) -> None:
    keys, volume = [_key(admin), _key(admin)], _volume(admin)
    spec = {
        "name": "train",
        "region": "us-east-1",
        "instance_type": "8xH100",
        "node_count": 2,
        "orchestrator": "kubernetes",
        "interconnect": "infiniband",
        "container": None,
        "ssh_key_ids": list(reversed(keys)),
        "volume_ids": [volume],
        "billing": {"type": "reserved", "duration_days": 30, "on_expiry": "convert_to_on_demand"},
        "labels": {"team": "research", "cost-center": "42"},
        "deletion_protection": True,
        "max_hourly_cost_usd": 500.5,
    }
    response = admin.post("/v1/clusters", json=spec)
    assert response.status_code == 201, response.text
    created = response.json()
    assert {f: created[f] for f in SPEC_FIELDS} == spec
    assert created["status"] == "PENDING" and created["num_gpus"] == 16 and created["gpu_type"]
    assert created["estimated_hourly_cost_usd"] > 0
    fetched = admin.get(f"/v1/clusters/{created['id']}")
    assert {f: fetched.json()[f] for f in SPEC_FIELDS} == spec
    assert fetched.headers["etag"] == response.headers["etag"]


def test_cluster_create_fills_defaults(admin: TestClient) -> None:
    single = admin.post(
        "/v1/clusters", json={"name": "one", "region": "us-east-1", "instance_type": "1xH100"}
    )
    body = single.json()
    assert (body["node_count"], body["orchestrator"], body["interconnect"]) == (1, "none", "ethernet")
    assert (
        body["billing"]["type"] == "on_demand"
        and body["labels"] == {}
        and body["deletion_protection"] is False
    )
    multi = _create(admin, name="multi")
    assert (multi["orchestrator"], multi["interconnect"]) == ("slurm", "infiniband")


@pytest.mark.parametrize(
    "spec, field",
    [
        ({"instance_type": "1xH100", "node_count": 2}, "node_count"),
        ({"orchestrator": "none"}, "orchestrator"),
        ({"container": "pytorch"}, "container"),
        ({"billing": {"type": "reserved"}}, "billing.duration_days"),
        ({"billing": {"type": "on_demand", "duration_days": 7}}, "billing.duration_days"),
        ({"billing": {"type": "reserved", "duration_days": 91}}, "billing.duration_days"),
        ({"interconnect": "efa"}, "interconnect"),
        ({"region": "mars-1"}, "region"),
        ({"instance_type": "9xZ900"}, "instance_type"),
        ({"name": "Bad_Name"}, "name"),
        ({"node_count": 0}, "node_count"),
        ({"max_hourly_cost_usd": 1}, "max_hourly_cost_usd"),
        ({"ssh_key_ids": ["ssh_01m8aqqnz83wz659tqfs8ywtqx"]}, "ssh_key_ids[0]"),
        ({"labels": {"Bad Key": "x"}}, "labels"),
    ],
)
def test_cluster_create_rule_violations_are_422_naming_the_field(
    admin: TestClient, spec: dict[str, Any], field: str
) -> None:
    body = {"name": "train", "region": "us-east-1", "instance_type": "8xH100", "node_count": 2, **spec}
    response = admin.post("/v1/clusters", json=body)
    assert response.status_code == 422, response.text
    problem = response.json()
    assert response.headers["content-type"] == "application/problem+json"
    assert field in [e["field"] for e in problem["errors"]] or problem["field"].startswith(field), problem
    assert admin.get("/v1/clusters").json()["items"] == []


def test_cluster_create_reports_every_violation_at_once(admin: TestClient) -> None:
    response = admin.post(
        "/v1/clusters",
        json={
            "name": "x",
            "region": "mars-1",
            "instance_type": "1xH100",
            "node_count": 3,
        },
    )
    fields = {e["field"] for e in response.json()["errors"]}
    assert response.status_code == 422 and {"region", "node_count"} <= fields


def test_cluster_cost_ceiling_names_the_computed_cost(admin: TestClient) -> None:
    response = admin.post(
        "/v1/clusters",
        json={
            "name": "x",
            "region": "us-east-1",
            "instance_type": "8xH100",
            "node_count": 4,
            "max_hourly_cost_usd": 10,
        },
    )
    assert response.status_code == 422 and response.json()["code"] == "cost_limit_exceeded"
    assert "USD per hour" in response.json()["detail"]


def test_cluster_volume_in_another_region_is_422(admin: TestClient) -> None:
    volume = _volume(admin, region="us-west-2")
    response = admin.post(
        "/v1/clusters",
        json={"name": "x", "region": "us-east-1", "instance_type": "1xH100", "volume_ids": [volume]},
    )
    assert response.status_code == 422 and response.json()["field"] == "volume_ids[0]"
    assert response.json()["code"] == "region_mismatch"


def test_cluster_patch_is_partial_and_echoes_the_result(admin: TestClient) -> None:
    created = _create(admin, labels={"a": "1"})
    response = admin.patch(f"/v1/clusters/{created['id']}", json={"node_count": 4, "labels": {"b": "2"}})
    assert response.status_code == 200, response.text
    updated = response.json()
    assert updated["node_count"] == 4 and updated["labels"] == {"b": "2"} and updated["name"] == "train"
    assert updated["orchestrator"] == created["orchestrator"] and updated["num_gpus"] == 32
    assert response.headers["etag"] == '"2"'
    same = admin.patch(f"/v1/clusters/{created['id']}", json={"region": "us-east-1", "node_count": 4})
    assert same.status_code == 200 and same.headers["etag"] == '"2"'


def test_cluster_patch_of_immutable_fields_is_422(admin: TestClient) -> None:
    created = _create(admin)
    for body, field in (
        ({"region": "eu-north-1"}, "region"),
        ({"instance_type": "8xH200"}, "instance_type"),
        ({"orchestrator": "kubernetes"}, "orchestrator"),
        ({"billing": {"type": "reserved", "duration_days": 7}}, "billing.type"),
    ):
        response = admin.patch(f"/v1/clusters/{created['id']}", json=body)
        assert response.status_code == 422 and response.json()["field"] == field, response.text
        assert response.json()["code"] == "immutable_field"
    nope = admin.patch(f"/v1/clusters/{created['id']}", json={"container": "base"})
    assert nope.status_code == 422 and nope.json()["field"] == "container"
    assert admin.get(f"/v1/clusters/{created['id']}").json()["node_count"] == 2


def test_cluster_patch_null_clears_nullable_fields(admin: TestClient) -> None:
    created = admin.post(
        "/v1/clusters",
        json={
            "name": "one",
            "region": "us-east-1",
            "instance_type": "1xH100",
            "container": "pytorch",
            "max_hourly_cost_usd": 100,
        },
    ).json()
    cleared = admin.patch(
        f"/v1/clusters/{created['id']}", json={"container": None, "max_hourly_cost_usd": None}
    )
    assert cleared.json()["container"] is None and cleared.json()["max_hourly_cost_usd"] is None


def test_cluster_delete_protection_then_delete(admin: TestClient) -> None:
    created = _create(admin, deletion_protection=True)
    refused = admin.delete(f"/v1/clusters/{created['id']}")
    assert refused.status_code == 409 and refused.json()["code"] == "deletion_protected"
    assert (
        admin.patch(f"/v1/clusters/{created['id']}", json={"deletion_protection": False}).status_code == 200
    )
    accepted = admin.delete(f"/v1/clusters/{created['id']}")
    assert accepted.status_code == 202 and accepted.json()["deletion_requested_at"] is not None


def test_cluster_attach_and_detach_volume(admin: TestClient) -> None:
    created, volume = _create(admin), _volume(admin)
    attached = admin.post(f"/v1/clusters/{created['id']}/volumes/{volume}")
    assert attached.status_code == 200 and attached.json()["volume_ids"] == [volume]
    again = admin.post(f"/v1/clusters/{created['id']}/volumes/{volume}")
    assert again.status_code == 200 and again.headers["etag"] == attached.headers["etag"]
    detached = admin.delete(f"/v1/clusters/{created['id']}/volumes/{volume}")
    assert detached.status_code == 200 and detached.json()["volume_ids"] == []
    missing = admin.delete(f"/v1/clusters/{created['id']}/volumes/{volume}")
    assert missing.status_code == 404 and missing.json()["code"] == "volume_not_attached"
    unknown = admin.post(f"/v1/clusters/{created['id']}/volumes/vol_missing")
    assert unknown.status_code == 404 and unknown.json()["field"] == "volume_id"


def test_cluster_list_by_name(admin: TestClient) -> None:
    first, second = _create(admin, name="alpha"), _create(admin, name="beta")
    assert [c["id"] for c in admin.get("/v1/clusters").json()["items"]] == [first["id"], second["id"]]
    assert [c["id"] for c in admin.get("/v1/clusters", params={"name": "beta"}).json()["items"]] == [
        second["id"]
    ]


def test_cluster_reservation_field_is_null_until_a_reserved_term_starts(admin: TestClient) -> None:
    created = _create(admin, billing={"type": "reserved", "duration_days": 7})
    assert created["reservation"] is None and created["billing"]["on_expiry"] == "decommission"


def test_cluster_new_volume_attachment_is_refused_when_billing_says_credits_ran_out(
    admin: TestClient, tenant: Tenant, settings: Settings
) -> None:
    created, volume = _create(admin), _volume(admin)
    engine = make_engine(settings)
    with make_session_factory(engine, write=True).begin() as session:
        long_ago = datetime.now(UTC) - timedelta(days=30)
        session.add(
            BillingAccount(
                project_id=tenant.project_id, prepaid=True, exhausted_since=long_ago, updated_at=long_ago
            )
        )
    engine.dispose()
    refused = admin.post(f"/v1/clusters/{created['id']}/volumes/{volume}")
    assert refused.status_code == 402 and refused.json()["code"] == "credits_exhausted"
    assert refused.json()["field"] == "volume_id"
    assert admin.get(f"/v1/clusters/{created['id']}").json()["volume_ids"] == []
    assert (
        admin.patch(f"/v1/clusters/{created['id']}", json={"labels": {"still": "editable"}}).status_code
        == 200
    )
