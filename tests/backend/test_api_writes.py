"""Integrity failures in writes: a lost uniqueness race is retried once; anything else is a logged 500."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from backend.domain.ids import new_id
from backend.services import ssh_keys
from backend.services.clock import utcnow
from backend.store.models import SshKey
from tests.backend.keys import ed25519_key


def _insert_key(session: Session, *, project_id: str, fingerprint: str) -> SshKey:
    now = utcnow()
    row = SshKey(
        id=new_id("ssh_key"),
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


def test_writes_integrity_failure_that_is_no_race_is_a_logged_500_without_retry(
    admin: TestClient, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A foreign key violation can never be fixed by retrying: it is a bug, not a conflict.
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
    assert calls == [1]
    errors = [line for line in _logged(capsys) if line["event"] == "write.integrity_error"]
    assert len(errors) == 1 and errors[0]["request_id"] == "fk-1" and errors[0]["level"] == "error"
    assert "IntegrityError" in errors[0]["exception"] and "Traceback" in errors[0]["exception"]
    assert admin.get("/v1/ssh-keys").json()["items"] == []


def test_writes_unique_violation_that_survives_the_retry_is_a_logged_500(
    admin: TestClient, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A service that does not check a unique rule collides every time: one retry, then 500 (not 409).
    existing = admin.post("/v1/ssh-keys", json={"name": "k", "public_key": ed25519_key()}).json()
    calls = _patch_create(
        monkeypatch,
        lambda call, **kw: _insert_key(
            kw["session"], project_id=kw["project_id"], fingerprint=existing["fingerprint"]
        ),
    )
    capsys.readouterr()
    response = admin.post("/v1/ssh-keys", json={"name": "k2", "public_key": ed25519_key()})
    assert response.status_code == 500 and response.json()["code"] == "internal_error"
    assert response.json()["request_id"] == response.headers["x-request-id"]
    assert calls == [1, 2]
    events = [line["event"] for line in _logged(capsys)]
    assert "write.lost_race" in events and "write.integrity_error" in events
