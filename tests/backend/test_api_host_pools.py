"""/v1/host-pools: registration with a write-only key, validation naming the field, hosts changed in place,
checks requested and recorded by the engine worker's round, team scopes, and the key kept out of every
answer and audit record. A cluster on a pool may leave out region and instance_type (the pool's region, the
type its checked servers are); without a pool both are required."""

from __future__ import annotations

import datetime as dt
import json
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from fastapi.testclient import TestClient
from sqlalchemy import select, text

from backend.domain.clock import SYSTEM_CLOCK, ManualClock
from backend.provisioning import host_checks
from backend.provisioning.drivers.ssh_hosts.host_check import HostTarget, HostVerdict
from backend.settings import Settings
from backend.store.db import make_engine, make_session_factory
from backend.store.host_pool_models import HostPoolHost
from tests.backend.access_keys import client_for, make_key
from tests.contract.private_keys import private_key

KEY = private_key("ed25519", "openssh")


def _pool(**overrides: object) -> dict[str, object]:
    body: dict[str, object] = {
        "name": "lab",
        "region": "on-prem-berlin",
        "ssh_private_key": KEY,
        "hosts": [{"address": "10.0.0.5"}, {"address": "gpu-b.lab.example", "port": 2222}],
    }
    body.update(overrides)
    return body


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def write_sessions(settings: Settings) -> Iterator[object]:
    engine = make_engine(settings)
    yield make_session_factory(engine, write=True)
    engine.dispose()


def test_create_returns_the_public_half_and_never_the_key(admin: TestClient) -> None:
    response = admin.post("/v1/host-pools", json=_pool(labels={"team": "nlp"}))
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["id"].startswith("hpl_") and response.headers["location"] == f"/v1/host-pools/{body['id']}"
    assert body["ssh_user"] == "root" and body["ssh_port"] == 22 and body["install_packages"] is False
    assert body["ssh_public_key"].startswith("ssh-ed25519 ") and body["ssh_key_fingerprint"].startswith(
        "SHA256:"
    )
    assert body["status"] == "probing" and body["ready_hosts"] == 0
    assert [(h["address"], h["port"], h["status"]) for h in body["hosts"]] == [
        ("10.0.0.5", 22, "pending"),
        ("gpu-b.lab.example", 2222, "pending"),
    ]
    secret_body = KEY.split("\n")[1]
    for answer in (
        response,
        admin.get(f"/v1/host-pools/{body['id']}"),
        admin.get("/v1/host-pools"),
        admin.get("/v1/audit-events"),
    ):
        assert secret_body not in answer.text
    audit = [e for e in admin.get("/v1/audit-events").json()["items"] if e["action"] == "host_pool.create"]
    assert audit[0]["details"]["request"]["ssh_private_key"] == "(write-only: not recorded)"


def test_the_key_is_sealed_at_rest(admin: TestClient, settings: Settings) -> None:
    pool = admin.post("/v1/host-pools", json=_pool()).json()
    engine = make_engine(settings)
    with engine.connect() as connection:
        stored = connection.execute(
            text("SELECT ssh_private_key FROM host_pools WHERE id = :id"), {"id": pool["id"]}
        ).scalar_one()
    engine.dispose()
    assert stored.startswith("gcs1:") and "PRIVATE" not in stored


@pytest.mark.parametrize(
    ("change", "field", "code"),
    [
        ({"ssh_private_key": "ssh-ed25519 AAAA not a private key"}, "ssh_private_key", "invalid_private_key"),
        ({"hosts": [{"address": "-oProxyCommand=evil"}]}, "hosts[0].address", "invalid_address"),
        (
            {"hosts": [{"address": "10.0.0.5"}, {"address": "10.0.0.5", "port": 22}]},
            "hosts[1]",
            "duplicate_host",
        ),
        ({"hosts": [{"address": "10.0.0.5", "host_key": "nonsense"}]}, "hosts[0].host_key", None),
        ({"proxy_jump": "bastion:99999"}, "proxy_jump", "invalid_proxy_jump"),
        ({"shared_storage_path": "/mnt/../etc"}, "shared_storage_path", "invalid_path"),
        ({"hosts": []}, "hosts", None),
        ({"region": "Berlin"}, "region", None),
    ],
)
def test_bad_input_names_the_field(
    admin: TestClient, change: dict[str, object], field: str, code: str | None
) -> None:
    response = admin.post("/v1/host-pools", json=_pool(**change))
    assert response.status_code == 422, response.text
    problem = response.json()
    assert problem["field"] == field, problem
    if code is not None:
        assert problem["code"] == code, problem
    assert KEY.split("\n")[1] not in response.text


def test_an_encrypted_key_is_refused_with_the_fix(admin: TestClient, tmp_path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "passphrase", "-f", str(tmp_path / "id")], check=True
    )
    pkcs8 = (
        ed25519.Ed25519PrivateKey.generate()
        .private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"passphrase"),
        )
        .decode()
    )
    for locked in ((tmp_path / "id").read_text(), pkcs8):
        problem = admin.post("/v1/host-pools", json=_pool(ssh_private_key=locked)).json()
        assert problem["code"] == "encrypted_private_key" and "ssh-keygen -p" in problem["detail"]


def test_patch_keeps_kept_hosts_and_checks_new_ones(admin: TestClient, write_sessions) -> None:  # type: ignore[no-untyped-def]
    pool = admin.post("/v1/host-pools", json=_pool()).json()
    host_checks.run_due_checks(
        write_sessions,
        SYSTEM_CLOCK,
        "test",
        dt.timedelta(minutes=5),
        check=lambda target: HostVerdict("ready", host_key="ssh-ed25519 AAAA"),
    )
    checked = admin.get(f"/v1/host-pools/{pool['id']}")
    assert checked.json()["status"] == "ready" and checked.json()["ready_hosts"] == 2
    new_hosts = [{"address": "gpu-b.lab.example", "port": 2222}, {"address": "10.0.0.7"}]
    patched = admin.patch(
        f"/v1/host-pools/{pool['id']}",
        json={"hosts": new_hosts, "name": "lab2"},
        headers={"If-Match": checked.headers["etag"]},
    )
    assert patched.status_code == 200, patched.text
    hosts = patched.json()["hosts"]
    assert [(h["address"], h["status"]) for h in hosts] == [
        ("gpu-b.lab.example", "ready"),
        ("10.0.0.7", "pending"),
    ]
    assert hosts[0]["host_key"] == "ssh-ed25519 AAAA" and patched.json()["name"] == "lab2"
    stale = admin.patch(
        f"/v1/host-pools/{pool['id']}", json={"name": "x"}, headers={"If-Match": checked.headers["etag"]}
    )
    assert stale.status_code == 412
    # The same host written with the pool's port is the same host.
    same = admin.patch(
        f"/v1/host-pools/{pool['id']}",
        json={"hosts": [{**new_hosts[0]}, {"address": "10.0.0.7", "port": 22}]},
    )
    assert [h["status"] for h in same.json()["hosts"]] == ["ready", "pending"]
    # A new key: every host is checked again.
    rekeyed = admin.patch(
        f"/v1/host-pools/{pool['id']}", json={"ssh_private_key": private_key("rsa", "pkcs8")}
    )
    assert {h["status"] for h in rekeyed.json()["hosts"]} == {"pending"}
    assert rekeyed.json()["ssh_public_key"].startswith("ssh-rsa ")


def test_a_check_made_before_a_change_does_not_overwrite_it(admin: TestClient, write_sessions) -> None:  # type: ignore[no-untyped-def]
    pool = admin.post("/v1/host-pools", json=_pool(hosts=[{"address": "10.0.0.5"}])).json()
    claims = host_checks.claim_due(write_sessions, SYSTEM_CLOCK, "w1")
    admin.post(f"/v1/host-pools/{pool['id']}/probe")  # the user asks again while the check runs
    assert not host_checks.record(
        write_sessions, SYSTEM_CLOCK, "w1", claims[0], HostVerdict("ready"), dt.timedelta(minutes=5)
    )
    assert admin.get(f"/v1/host-pools/{pool['id']}").json()["hosts"][0]["status"] == "pending"


def test_unreachable_host_gets_the_reason_from_a_real_ssh(admin: TestClient, write_sessions) -> None:  # type: ignore[no-untyped-def]
    port = _closed_port()
    pool = admin.post("/v1/host-pools", json=_pool(hosts=[{"address": "127.0.0.1", "port": port}])).json()
    assert host_checks.run_due_checks(write_sessions, SYSTEM_CLOCK, "test", dt.timedelta(minutes=5)) == 1
    body = admin.get(f"/v1/host-pools/{pool['id']}").json()
    host = body["hosts"][0]
    assert body["status"] == "unavailable" and host["status"] == "unreachable"
    assert host["reason_code"] == "unreachable" and f"127.0.0.1 port {port}" in host["reason"]
    assert "refused" in host["reason"].lower() and host["checked_at"] is not None
    with write_sessions() as session:  # type: ignore[operator]
        row = session.scalars(select(HostPoolHost)).one()
        assert row.probe_lease_owner is None and row.probe_due_at > row.checked_at


def test_probe_and_delete(admin: TestClient, member: TestClient) -> None:
    pool = admin.post("/v1/host-pools", json=_pool()).json()
    assert member.post(f"/v1/host-pools/{pool['id']}/probe").status_code == 403
    probed = admin.post(f"/v1/host-pools/{pool['id']}/probe")
    assert probed.status_code == 202 and probed.json()["status"] == "probing"
    assert admin.delete(f"/v1/host-pools/{pool['id']}").status_code == 204
    assert admin.get(f"/v1/host-pools/{pool['id']}").status_code == 404


def test_team_keys_see_their_team_pools_only(client: TestClient, settings: Settings, tenant) -> None:  # type: ignore[no-untyped-def]
    nlp = client_for(client, make_key(settings, "acme", "admin", scope="team=nlp"))
    cv = client_for(client, make_key(settings, "acme", "admin", scope="team=cv"))
    pool = nlp.post("/v1/host-pools", json=_pool()).json()
    assert pool["labels"] == {"team": "nlp"}
    assert cv.get(f"/v1/host-pools/{pool['id']}").status_code == 404
    assert cv.patch(f"/v1/host-pools/{pool['id']}", json={"name": "mine"}).status_code == 404
    assert [p["id"] for p in cv.get("/v1/host-pools").json()["items"]] == []
    assert [p["id"] for p in nlp.get("/v1/host-pools").json()["items"]] == [pool["id"]]
    assert json.loads(nlp.get("/v1/host-pools", params={"name": "lab"}).text)["items"][0]["id"] == pool["id"]


def test_the_checks_target_what_the_pool_declares(admin: TestClient, write_sessions) -> None:  # type: ignore[no-untyped-def]
    admin.post(
        "/v1/host-pools",
        json=_pool(
            ssh_user="ops",
            ssh_port=2200,
            proxy_jump="jump@bastion:2022",
            hosts=[{"address": "10.0.0.5"}],
            install_packages=True,
        ),
    )
    seen: list[HostTarget] = []
    host_checks.run_due_checks(
        write_sessions,
        SYSTEM_CLOCK,
        "test",
        dt.timedelta(minutes=5),
        check=lambda target: seen.append(target) or HostVerdict("ready"),
    )
    target = seen[0]
    assert (target.address, target.port, target.user, target.jump) == (
        "10.0.0.5",
        2200,
        "ops",
        ("jump", "bastion", 2022),
    )
    assert target.install_packages and target.private_key.startswith("-----BEGIN OPENSSH PRIVATE KEY-----")


def test_a_check_left_by_a_killed_worker_is_taken_over(admin: TestClient, write_sessions) -> None:  # type: ignore[no-untyped-def]
    pool = admin.post("/v1/host-pools", json=_pool(hosts=[{"address": "10.0.0.5"}])).json()
    clock = ManualClock(SYSTEM_CLOCK.now())
    assert len(host_checks.claim_due(write_sessions, clock, "killed-mid-check")) == 1
    assert host_checks.claim_due(write_sessions, clock, "other") == []  # claimed: not checked twice at once
    with write_sessions() as session:  # a live worker's heartbeat keeps its claim
        host_checks.extend_leases(session, "killed-mid-check", clock.now() + dt.timedelta(seconds=30))
        session.commit()
    clock.advance(seconds=61)
    assert host_checks.claim_due(write_sessions, clock, "other") == []
    clock.advance(seconds=30)  # no heartbeat since: the claim lapses and another worker checks the host
    checked = host_checks.run_due_checks(
        write_sessions, clock, "other", dt.timedelta(minutes=5), check=lambda target: HostVerdict("ready")
    )
    assert checked == 1 and admin.get(f"/v1/host-pools/{pool['id']}").json()["status"] == "ready"


def _checked(write_sessions, inventory: dict[str, object] | None) -> None:  # type: ignore[no-untyped-def]
    """Every pending host checked: ready with `inventory`, or unreachable without one."""
    verdict = HostVerdict("ready", host_key="ssh-ed25519 AAAA", inventory=inventory) if inventory else (
        HostVerdict("unreachable", reason_code="unreachable", reason="connection refused"))
    host_checks.run_due_checks(write_sessions, SYSTEM_CLOCK, "test", dt.timedelta(minutes=5),
                               check=lambda target: verdict)


def test_a_cluster_on_a_pool_takes_its_region_and_the_type_its_servers_are(  # type: ignore[no-untyped-def]
    admin: TestClient, write_sessions
) -> None:
    pool = admin.post("/v1/host-pools", json=_pool()).json()
    _checked(write_sessions, {"gpu_count": 8, "gpu_model": "NVIDIA H200"})
    spec = {"name": "own", "host_pool_id": pool["id"]}  # no region, no instance type
    estimate = admin.post("/v1/pricing/estimate", json=spec)  # completed the same way: no compute charge
    assert estimate.status_code == 200, estimate.text
    assert estimate.json()["hourly_usd"] == "0"
    created = admin.post("/v1/clusters", json=spec)
    assert created.status_code in (201, 202), created.text
    body = created.json()
    assert (body["region"], body["instance_type"]) == ("on-prem-berlin", "8xH200")
    assert (body["orchestrator"], body["interconnect"], body["node_count"]) == ("slurm", "ethernet", 1)
    read = admin.get(f"/v1/clusters/{body['id']}").json()
    assert (read["region"], read["instance_type"]) == ("on-prem-berlin", "8xH200")


def test_a_pool_without_a_fitting_ready_server_refuses_a_cluster_without_a_type(  # type: ignore[no-untyped-def]
    admin: TestClient, write_sessions
) -> None:
    pool = admin.post("/v1/host-pools", json=_pool()).json()
    spec = {"name": "own", "host_pool_id": pool["id"]}
    for inventory in (None, {"gpu_count": 4, "gpu_model": "NVIDIA H200"}):  # never ready; no type's GPUs
        if inventory is not None:
            admin.post(f"/v1/host-pools/{pool['id']}/probe")
        _checked(write_sessions, inventory)
        response = admin.post("/v1/clusters", json=spec)
        assert response.status_code == 422, response.text
        errors = [(e["field"], e["code"]) for e in response.json()["errors"]]
        assert errors == [("instance_type", "no_fitting_instance_type")], errors
        assert "set instance_type" in response.json()["errors"][0]["message"]


@pytest.mark.parametrize("field", ["region", "instance_type"])
def test_a_cluster_without_a_pool_needs_a_region_and_an_instance_type(admin: TestClient, field: str) -> None:
    spec = {"name": "train", "region": "us-east-1", "instance_type": "8xH100"}
    del spec[field]
    response = admin.post("/v1/clusters", json=spec)
    assert response.status_code == 422, response.text
    assert [(e["field"], e["code"]) for e in response.json()["errors"]] == [(field, "required")]


@pytest.mark.parametrize(("found", "accounting"), [
    ({"packages": {"slurmdbd": True, "mariadbd": True}}, True),
    ({"packages": {"slurmdbd": True, "mariadbd": False}}, False),
    ({"packages": {"slurmdbd": True, "mariadbd": True}, "mariadb_in_use": True}, False),
])
def test_a_host_says_whether_its_clusters_keep_accounting(  # type: ignore[no-untyped-def]
    admin: TestClient, write_sessions, found: dict[str, object], accounting: bool
) -> None:
    pool = admin.post("/v1/host-pools", json=_pool()).json()
    _checked(write_sessions, {"hostname": "gpu-a", "gpu_count": 8, "gpu_model": "NVIDIA H200", **found})
    hosts = admin.get(f"/v1/host-pools/{pool['id']}").json()["hosts"]
    assert {host["inventory"]["accounting"] for host in hosts} == {accounting}, hosts
