"""Container images on the simulated driver (issue 29): `container_images` imported once per cluster
(digest, size, state per name), a create whose image fails rolls back naming it, an update imports in
place (phase ImportingImages) and a failed update keeps the previous image until the declaration or the
credentials change; registry passwords are stored sealed and never returned."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from backend.provisioning.worker import EngineWorker
from tests.backend.engine.conftest import create, drain, get

TRAIN = "registry.internal:5000/team/train:v3"
PRIVATE = "registry.internal:5000/private/train:v1"


def _images(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {image["name"]: image for image in body["images"]}


def _patch(admin: TestClient, cluster_id: str, **changes: Any) -> dict[str, Any]:
    answer = admin.patch(f"/v1/clusters/{cluster_id}", json=changes)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_images_are_imported_once_with_digest_and_size_before_the_cluster_is_ready(
    admin: TestClient, make_worker: Callable[..., EngineWorker]
) -> None:
    cluster = create(admin, node_count=2, container_images={"train": TRAIN, "base": "ubuntu:22.04"})
    assert cluster["container_images"] == {"train": TRAIN, "base": "ubuntu:22.04"}  # echoed as written
    assert {i["name"]: i["state"] for i in cluster["images"]} == {"base": "pending", "train": "pending"}
    drain(make_worker())
    body = get(admin, cluster["id"])
    assert body["status"] == "RUNNING"
    images = _images(body)
    assert [i["name"] for i in body["images"]] == ["base", "train"]
    for image in images.values():
        assert image["state"] == "ready" and image["reason"] is None
        assert image["digest"].startswith("sha256:") and len(image["digest"]) == 71
        assert image["size_bytes"] > 0
    assert images["base"]["digest"] != images["train"]["digest"]
    assert body["image_storage_bytes"] == sum(i["size_bytes"] for i in images.values())
    # A second cluster declaring the same reference gets the same digest (content addressed).
    other = create(admin, name="other", node_count=2, container_images={"t": TRAIN})
    drain(make_worker())
    assert _images(get(admin, other["id"]))["t"]["digest"] == images["train"]["digest"]


def test_a_create_whose_image_does_not_exist_rolls_back_naming_the_image(
    admin: TestClient, make_worker: Callable[..., EngineWorker]
) -> None:
    cluster = create(admin, node_count=2,
                     container_images={"train": "registry.internal:5000/team/train:missing-tag"})
    drain(make_worker())
    body = get(admin, cluster["id"])
    assert body["status"] == "FAILED"
    assert 'container_images["train"]' in body["status_reason"]
    assert "no such repository or tag" in body["status_reason"]
    assert body["nodes"] == []  # nothing left behind


def test_an_update_imports_in_place_and_a_failed_one_keeps_the_old_image_until_fixed(
    admin: TestClient, make_worker: Callable[..., EngineWorker]
) -> None:
    worker = make_worker()
    cluster = create(admin, node_count=2, container_images={"train": TRAIN})
    drain(worker)
    old = _images(get(admin, cluster["id"]))["train"]

    changed = _patch(admin, cluster["id"], container_images={"train": "registry.internal:5000/team/train:v4"})
    assert _images(changed)["train"]["state"] == "pending"
    drain(make_worker(simulation_speed=1000.0))  # a pull that takes modelled time: the phase shows
    body = get(admin, cluster["id"])
    new = _images(body)["train"]
    assert new["state"] == "ready" and new["digest"] != old["digest"]
    assert "ImportingImages" in [p["phase"] for p in body["phase_history"]]
    assert body["status"] == "RUNNING" and len(body["nodes"]) == 2  # in place: the same nodes

    # A private image without credentials: refused, /images/train keeps v4, the cluster keeps running.
    _patch(admin, cluster["id"], container_images={"train": PRIVATE})
    drain(worker)
    failed = _images(get(admin, cluster["id"]))["train"]
    assert failed["state"] == "failed" and failed["digest"] == new["digest"]
    assert "needs credentials" in failed["reason"] and "still shows" in failed["reason"]
    assert get(admin, cluster["id"])["status"] == "RUNNING"
    drain(worker)  # not retried as long as nothing changes
    assert _images(get(admin, cluster["id"]))["train"]["state"] == "failed"

    # A wrong password is refused as such; the right one imports it.
    _patch(admin, cluster["id"],
           registry_credentials={"registry.internal:5000": {"username": "ci", "password": "wrong-one"}})
    drain(worker)
    assert "refused the credentials" in _images(get(admin, cluster["id"]))["train"]["reason"]
    fixed = _patch(admin, cluster["id"],
                   registry_credentials={"registry.internal:5000": {"username": "ci", "password": "s3cret"}})
    assert fixed["registry_credentials"] == {"registry.internal:5000": {"username": "ci"}}
    drain(worker)
    assert _images(get(admin, cluster["id"]))["train"]["state"] == "ready"

    # Removing a name removes its image.
    _patch(admin, cluster["id"], container_images={})
    drain(worker)
    body = get(admin, cluster["id"])
    assert body["images"] == [] and body["image_storage_bytes"] == 0


def test_registry_passwords_are_sealed_at_rest_and_never_returned(
    admin: TestClient, make_worker: Callable[..., EngineWorker], sessions: sessionmaker[Session]
) -> None:
    cluster = create(admin, node_count=2, container_images={"train": PRIVATE},
                     registry_credentials={"registry.internal:5000": {"username": "ci",
                                                                      "password": "s3cret"}})
    assert "s3cret" not in str(cluster)
    drain(make_worker())
    body = get(admin, cluster["id"])
    assert _images(body)["train"]["state"] == "ready"
    assert body["registry_credentials"] == {"registry.internal:5000": {"username": "ci"}}
    assert "s3cret" not in str(body)
    with sessions() as session:
        stored = session.execute(text("SELECT registry_credentials FROM clusters WHERE id = :id"),
                                 {"id": cluster["id"]}).scalar_one()
    # Sealed whole (the JSON's quotes never appear in the ciphertext's base64, which may well contain "ci").
    assert stored.startswith("gcs1:") and "s3cret" not in stored and '"' not in stored


def test_bad_names_references_registries_and_orchestrators_are_refused_at_their_key(
    admin: TestClient
) -> None:
    def errors(**spec: Any) -> dict[str, str]:
        answer = admin.post("/v1/clusters", json={"name": "bad", "region": "us-east-1",
                                                  "instance_type": "8xH100", "node_count": 2, **spec})
        assert answer.status_code == 422, answer.text
        return {e["field"]: e["message"] for e in answer.json()["errors"]}

    found = errors(container_images={"Train": "ubuntu:22.04", "ok": "HTTPS://x/y", "up": "Ubuntu:22.04"})
    assert "/images/<name>" in found["container_images.Train"]
    assert 'drop "HTTPS://"' in found["container_images.ok"]
    assert "lowercase" in found["container_images.up"]
    found = errors(container_images={"a": "ubuntu"},
                   registry_credentials={"https://r.io": {"username": "u", "password": "p"}})
    assert "host[:port]" in found["registry_credentials.https://r.io"]
    answer = admin.post("/v1/clusters", json={"name": "solo", "region": "us-east-1",
                                              "instance_type": "1xH100", "container_images": {"a": "ubuntu"}})
    assert answer.status_code == 422
    assert any(e["field"] == "container_images" and "orchestrator" in e["message"]
               for e in answer.json()["errors"])


def test_a_single_node_container_is_an_alias_or_a_reference_imported_as_the_container_image(
    admin: TestClient, make_worker: Callable[..., EngineWorker]
) -> None:
    by_alias = create(admin, name="solo", instance_type="1xH100", node_count=1, container="base")
    by_reference = create(admin, name="own", instance_type="1xH100", node_count=1, container=TRAIN)
    assert by_reference["container"] == TRAIN  # echoed as written
    drain(make_worker())
    alias_image = _images(get(admin, by_alias["id"]))["container"]
    assert alias_image["reference"] == "docker.io/library/ubuntu:22.04"  # the catalog's alias
    assert alias_image["state"] == "ready"
    assert _images(get(admin, by_reference["id"]))["container"]["reference"] == TRAIN
    answer = admin.post("/v1/clusters", json={"name": "bad", "region": "us-east-1",
                                              "instance_type": "1xH100", "container": "Ubuntu:22.04"})
    assert answer.status_code == 422 and answer.json()["field"] == "container", answer.text
    assert "lowercase" in answer.json()["detail"]
    clash = admin.post("/v1/clusters", json={
        "name": "clash", "region": "us-east-1", "instance_type": "1xH100", "orchestrator": "slurm",
        "container": "base", "container_images": {"container": TRAIN}})
    assert clash.status_code == 422
    assert [e["field"] for e in clash.json()["errors"]] == ["container_images.container"]
