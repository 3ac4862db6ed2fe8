"""Integrity failures in writes (backend.services.unit_of_work): a lost race is retried once and then
answered by the services' checks; what survives the retry is 409 when it is a business rule (a unique
field, deleting what is still referenced) and a logged 500 otherwise; deadlocks are retried, then 409."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from backend.domain.clock import utcnow
from backend.domain.ids import new_id
from backend.services import ssh_keys, unit_of_work
from backend.store.models import SshKey
from tests.backend.keys import ed25519_key


def _insert_key(session: Session, *, project_id: str, fingerprint: str, key_id: str | None = None) -> SshKey:
    now = utcnow()
    row = SshKey(
        id=key_id or new_id("ssh_key"),
        project_id=project_id,
        name="raw",
        public_key="ssh-ed25519 AAAA",
        fingerprint=fingerprint,
        key_type="ssh-ed25519",
        generation=1,
        created_at=now,
        updated_at=now,
    )
    session.add(row)
    session.flush()
    return row


def _patch_create(monkeypatch: pytest.MonkeyPatch, behaviour: Callable[..., SshKey]) -> list[int]:
    """Replace the service's create with `behaviour(call_number, **kwargs)`; returns the call log."""
    calls: list[int] = []

    def create(**kwargs: Any) -> SshKey:
        calls.append(len(calls) + 1)
        return behaviour(len(calls), **kwargs)

    monkeypatch.setattr(ssh_keys, "create_ssh_key", create)
    return calls


def _logged(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]


class _DriverError(Exception):
    """What psycopg raises for a deadlock: an error carrying its SQLSTATE."""

    sqlstate = "40P01"


def test_writes_lost_uniqueness_race_is_retried_and_answers_the_services_conflict(
    admin: TestClient, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    winner = admin.post("/v1/ssh-keys", json={"name": "k", "public_key": ed25519_key()}).json()
    original = ssh_keys.create_ssh_key

    def racing(call: int, **kwargs: Any) -> SshKey:
        if call == 1:  # the existence check ran before the winner committed: the insert collides
            return _insert_key(
                kwargs["session"], project_id=kwargs["project_id"], fingerprint=winner["fingerprint"]
            )
        return original(**kwargs)

    calls = _patch_create(monkeypatch, racing)
    capsys.readouterr()
    loser = admin.post("/v1/ssh-keys", json={"name": "k2", "public_key": winner["public_key"]})
    assert loser.status_code == 409 and loser.json()["code"] == "duplicate_ssh_key", loser.text
    assert calls == [1, 2]
    assert any(line["event"] == "write.lost_race" for line in _logged(capsys))


def test_writes_foreign_key_violation_that_survives_the_retry_is_a_logged_500(
    admin: TestClient, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A reference to a row that is gone is retried once (a concurrent delete: the checks then say
    # not_found); still failing, no check covers it: a bug, logged, never 409 "retry".
    calls = _patch_create(
        monkeypatch,
        lambda call, **kw: _insert_key(kw["session"], project_id="prj_missing", fingerprint="SHA256:x"),
    )
    capsys.readouterr()
    response = admin.post(
        "/v1/ssh-keys", json={"name": "k", "public_key": ed25519_key()}, headers={"X-Request-Id": "fk-1"}
    )
    assert response.status_code == 500 and response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == "internal_error" and response.json()["request_id"] == "fk-1"
    assert calls == [1, 2]
    errors = [line for line in _logged(capsys) if line["event"] == "write.integrity_error"]
    assert len(errors) == 1 and errors[0]["request_id"] == "fk-1" and errors[0]["level"] == "error"
    assert "IntegrityError" in errors[0]["exception"] and "Traceback" in errors[0]["exception"]
    assert admin.get("/v1/ssh-keys").json()["items"] == []


def test_writes_business_unique_violation_that_survives_the_retry_is_409_naming_the_field(
    admin: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    existing = admin.post("/v1/ssh-keys", json={"name": "k", "public_key": ed25519_key()}).json()
    calls = _patch_create(
        monkeypatch,
        lambda call, **kw: _insert_key(
            kw["session"], project_id=kw["project_id"], fingerprint=existing["fingerprint"]
        ),
    )
    response = admin.post("/v1/ssh-keys", json={"name": "k2", "public_key": ed25519_key()})
    assert response.status_code == 409, response.text
    assert response.json()["code"] == "conflict" and response.json()["field"] == "public_key"
    assert calls == [1, 2]


def test_writes_unique_violation_of_no_business_rule_is_a_logged_500(
    admin: TestClient, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A primary key collision is no rule a user can break: one retry, then 500 (not 409).
    existing = admin.post("/v1/ssh-keys", json={"name": "k", "public_key": ed25519_key()}).json()
    calls = _patch_create(
        monkeypatch,
        lambda call, **kw: _insert_key(
            kw["session"], project_id=kw["project_id"], fingerprint="SHA256:new", key_id=existing["id"]
        ),
    )
    capsys.readouterr()
    response = admin.post("/v1/ssh-keys", json={"name": "k2", "public_key": ed25519_key()})
    assert response.status_code == 500 and response.json()["code"] == "internal_error"
    assert response.json()["request_id"] == response.headers["x-request-id"]
    assert calls == [1, 2]
    events = [line["event"] for line in _logged(capsys)]
    assert "write.lost_race" in events and "write.integrity_error" in events


def test_writes_deleting_a_row_still_referenced_is_409_in_use(
    admin: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The service's "is it used?" check did not see the reference (a concurrent request added it):
    # the database refuses the delete and the answer names what references it.
    key = admin.post("/v1/ssh-keys", json={"name": "k", "public_key": ed25519_key()}).json()
    cluster = admin.post("/v1/clusters", json={"name": "train", "region": "us-east-1",
                                               "instance_type": "8xH100", "node_count": 1,
                                               "ssh_key_ids": [key["id"]]})
    assert cluster.status_code == 201, cluster.text

    def unchecked_delete(**kwargs: Any) -> None:
        kwargs["session"].execute(delete(SshKey).where(SshKey.id == kwargs["ssh_key_id"]))

    monkeypatch.setattr(ssh_keys, "delete_ssh_key", unchecked_delete)
    response = admin.delete(f"/v1/ssh-keys/{key['id']}")
    assert response.status_code == 409, response.text
    assert response.json()["code"] == "in_use" and response.json()["referenced_by"] == "clusters"
    assert admin.get(f"/v1/ssh-keys/{key['id']}").status_code == 200


@pytest.mark.parametrize("deadlocks, status", [(1, 201), (unit_of_work.TRANSIENT_ATTEMPTS, 409)])
def test_writes_deadlock_is_retried_then_409_conflict_retry(
    admin: TestClient, monkeypatch: pytest.MonkeyPatch, deadlocks: int, status: int
) -> None:
    original = ssh_keys.create_ssh_key
    monkeypatch.setattr(unit_of_work, "_BACKOFF_SECONDS", 0.0)

    def deadlocking(call: int, **kwargs: Any) -> SshKey:
        if call <= deadlocks:
            raise OperationalError("UPDATE engine_locks ...", {}, _DriverError("deadlock detected"))
        return original(**kwargs)

    calls = _patch_create(monkeypatch, deadlocking)
    response = admin.post("/v1/ssh-keys", json={"name": "k", "public_key": ed25519_key()})
    assert response.status_code == status, response.text
    assert len(calls) == min(deadlocks + 1, unit_of_work.TRANSIENT_ATTEMPTS)
    if status == 409:
        assert response.json()["code"] == "conflict_retry" and response.headers["retry-after"] == "1"
        assert admin.get("/v1/ssh-keys").json()["items"] == []


def test_writes_audit_records_never_hold_a_write_only_field(admin: TestClient) -> None:
    """Secrets the API takes and never returns (registry passwords, pools' private keys) are replaced in
    the audit record of every write, whatever the route; the rest of the request is kept."""
    created = admin.post("/v1/clusters", json={
        "name": "secretive", "region": "us-east-1", "instance_type": "1xH100", "node_count": 1,
        "orchestrator": "slurm", "container_images": {"app": "registry.internal:5000/team/app:v1"},
        "registry_credentials": {"registry.internal:5000": {"username": "ci", "password": "hunter2-secret"}}})
    assert created.status_code == 201, created.text
    events = admin.get("/v1/audit-events", params={"action": "cluster.create"}).json()["items"]
    assert "hunter2-secret" not in json.dumps(events)
    login = events[-1]["details"]["request"]["registry_credentials"]["registry.internal:5000"]
    assert login == {"username": "ci", "password": "(write-only: not recorded)"}
