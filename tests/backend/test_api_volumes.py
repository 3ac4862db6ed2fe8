"""/v1/volumes: create, list, get, rename, grow, shrink refused, delete refused while attached."""

from __future__ import annotations

from fastapi.testclient import TestClient


def _create(admin: TestClient, **overrides: object) -> dict:  # type: ignore[type-arg]
    body = {"name": "data", "region": "us-east-1", "size_tib": 4, **overrides}
    response = admin.post("/v1/volumes", json=body)
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


def test_volume_create_echoes_input_with_computed_fields(admin: TestClient) -> None:
    volume = _create(admin)
    assert (volume["name"], volume["region"], volume["size_tib"]) == ("data", "us-east-1", 4)
    assert volume["status"] == "available" and volume["attached_cluster_ids"] == []
    assert volume["mount_path"] == f"/mnt/shared/{volume['id']}" and volume["estimated_hourly_cost_usd"] > 0
    assert admin.get(f"/v1/volumes/{volume['id']}").json() == volume


def test_volume_unknown_region_is_422_naming_region(admin: TestClient) -> None:
    response = admin.post("/v1/volumes", json={"name": "x", "region": "mars-1", "size_tib": 1})
    assert response.status_code == 422 and response.json()["field"] == "region"
    assert response.json()["code"] == "unknown_region"


def test_volume_rename_and_grow_in_place_shrink_is_422(admin: TestClient) -> None:
    volume = _create(admin)
    grown = admin.patch(f"/v1/volumes/{volume['id']}", json={"name": "bigger", "size_tib": 10})
    assert grown.status_code == 200 and grown.json()["size_tib"] == 10 and grown.json()["name"] == "bigger"
    assert grown.json()["created_at"] == volume["created_at"]
    shrink = admin.patch(f"/v1/volumes/{volume['id']}", json={"size_tib": 2})
    assert shrink.status_code == 422
    assert shrink.json()["field"] == "size_tib" and shrink.json()["code"] == "shrink_not_supported"
    assert admin.get(f"/v1/volumes/{volume['id']}").json()["size_tib"] == 10


def test_volume_list_and_delete(admin: TestClient) -> None:
    first, second = _create(admin, name="a"), _create(admin, name="b")
    assert [v["id"] for v in admin.get("/v1/volumes").json()["items"]] == [first["id"], second["id"]]
    assert admin.delete(f"/v1/volumes/{first['id']}").status_code == 204
    assert admin.get(f"/v1/volumes/{first['id']}").status_code == 404
    assert [v["id"] for v in admin.get("/v1/volumes").json()["items"]] == [second["id"]]


def test_volume_delete_is_409_while_attached(admin: TestClient) -> None:
    volume = _create(admin)
    cluster = admin.post(
        "/v1/clusters",
        json={"name": "c", "region": "us-east-1", "instance_type": "1xH100", "volume_ids": [volume["id"]]},
    ).json()
    assert admin.get(f"/v1/volumes/{volume['id']}").json()["attached_cluster_ids"] == [cluster["id"]]
    refused = admin.delete(f"/v1/volumes/{volume['id']}")
    assert refused.status_code == 409 and refused.json()["code"] == "volume_attached"
    assert refused.json()["cluster_ids"] == [cluster["id"]]
    assert admin.delete(f"/v1/clusters/{cluster['id']}/volumes/{volume['id']}").status_code == 200
    assert admin.delete(f"/v1/volumes/{volume['id']}").status_code == 204
