"""/v1/ssh-keys: validation of OpenSSH keys, fingerprints, exact storage, duplicates, rename and delete."""

from __future__ import annotations

import base64
import hashlib

import pytest
from fastapi.testclient import TestClient

from tests.backend.keys import ecdsa_key, ed25519_key, rsa_key
from tests.contract.private_keys import FORMS, private_key, secret_lines


def _fingerprint(line: str) -> str:
    blob = base64.b64decode(line.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


@pytest.mark.parametrize(
    "make_key, key_type",
    [(ed25519_key, "ssh-ed25519"), (ecdsa_key, "ecdsa-sha2-nistp256"), (lambda: rsa_key(2048), "ssh-rsa")],
)
def test_ssh_key_create_accepts_supported_types_with_sha256_fingerprint(
    admin: TestClient, make_key, key_type
) -> None:  # type: ignore[no-untyped-def]
    line = make_key()
    response = admin.post("/v1/ssh-keys", json={"name": "laptop", "public_key": line})
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["key_type"] == key_type and body["fingerprint"] == _fingerprint(line)
    assert body["public_key"] == line and body["id"].startswith("ssh_")
    assert response.headers["location"] == f"/v1/ssh-keys/{body['id']}" and response.headers["etag"] == '"1"'


def test_ssh_key_is_stored_exactly_as_given(admin: TestClient) -> None:
    line = ed25519_key("bob@desk with spaces") + "\n"
    created = admin.post("/v1/ssh-keys", json={"name": "exact", "public_key": line}).json()
    assert created["public_key"] == line
    assert admin.get(f"/v1/ssh-keys/{created['id']}").json()["public_key"] == line


def test_ssh_key_create_names_a_private_key_without_echoing_it(
    admin: TestClient, capsys: pytest.CaptureFixture[str]
) -> None:
    for kind, form in FORMS:
        text = private_key(kind, form)
        response = admin.post("/v1/ssh-keys", json={"name": "oops", "public_key": text})
        assert response.status_code == 422, (kind, form)
        problem = response.json()
        assert problem["field"] == "public_key" and problem["code"] == "private_key"
        assert ".pub" in problem["detail"]
        shown = response.text + "".join(capsys.readouterr())  # the body and the API's log lines
        assert "BEGIN" not in shown and not [line for line in secret_lines(text) if line[:16] in shown]
    assert admin.get("/v1/ssh-keys").json()["items"] == []


@pytest.mark.parametrize(
    "public_key, code",
    [
        (lambda: rsa_key(1024), "key_too_weak"),
        (lambda: "ssh-dss AAAAB3NzaC1kc3MAAACBAP", "unsupported_key_type"),
        (lambda: "not a key", "unsupported_key_type"),
        (lambda: "ssh-ed25519 !!!notbase64", "invalid_ssh_key"),
        (lambda: "ssh-ed25519 " + rsa_key(2048).split()[1], "invalid_ssh_key"),
        (lambda: ed25519_key() + "\n" + ed25519_key(), "invalid_ssh_key"),
    ],
)
def test_ssh_key_create_rejects_bad_keys_naming_public_key(admin: TestClient, public_key, code) -> None:  # type: ignore[no-untyped-def]
    response = admin.post("/v1/ssh-keys", json={"name": "bad", "public_key": public_key()})
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["field"] == "public_key" and response.json()["code"] == code
    assert admin.get("/v1/ssh-keys").json()["items"] == []


def test_ssh_key_duplicate_in_project_is_409(admin: TestClient) -> None:
    line = ed25519_key("one")
    first = admin.post("/v1/ssh-keys", json={"name": "a", "public_key": line}).json()
    same_key_other_comment = line.rsplit(" ", 1)[0] + " two"
    response = admin.post("/v1/ssh-keys", json={"name": "b", "public_key": same_key_other_comment})
    assert response.status_code == 409
    assert response.json()["code"] == "duplicate_ssh_key" and response.json()["existing_id"] == first["id"]


def test_ssh_key_list_get_rename_delete(admin: TestClient) -> None:
    created = admin.post("/v1/ssh-keys", json={"name": "old", "public_key": ed25519_key()}).json()
    listed = admin.get("/v1/ssh-keys").json()
    assert [k["id"] for k in listed["items"]] == [created["id"]] and listed["next_page_token"] is None
    assert admin.get("/v1/ssh-keys", params={"name": "old"}).json()["items"][0]["id"] == created["id"]
    assert admin.get("/v1/ssh-keys", params={"name": "other"}).json()["items"] == []
    renamed = admin.patch(f"/v1/ssh-keys/{created['id']}", json={"name": "new"})
    assert renamed.status_code == 200 and renamed.json()["name"] == "new"
    assert renamed.json()["public_key"] == created["public_key"] and renamed.headers["etag"] == '"2"'
    assert admin.patch(f"/v1/ssh-keys/{created['id']}", json={"public_key": ed25519_key()}).status_code == 422
    assert admin.delete(f"/v1/ssh-keys/{created['id']}").status_code == 204
    gone = admin.get(f"/v1/ssh-keys/{created['id']}")
    assert gone.status_code == 404 and gone.json()["field"] == "ssh_key_id"


def test_ssh_key_in_use_by_a_cluster_cannot_be_deleted(admin: TestClient) -> None:
    key = admin.post("/v1/ssh-keys", json={"name": "k", "public_key": ed25519_key()}).json()
    cluster = admin.post(
        "/v1/clusters",
        json={"name": "c", "region": "us-east-1", "instance_type": "1xH100", "ssh_key_ids": [key["id"]]},
    ).json()
    response = admin.delete(f"/v1/ssh-keys/{key['id']}")
    assert response.status_code == 409 and response.json()["code"] == "ssh_key_in_use"
    assert admin.delete(f"/v1/clusters/{cluster['id']}").status_code == 202
    assert admin.delete(f"/v1/ssh-keys/{key['id']}").status_code == 204
