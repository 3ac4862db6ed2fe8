"""SSH host keys in the cluster JSON on the simulated driver (issue 31): `login.host_key` and
`nodes[*].host_key` are null until the machine is up, then valid OpenSSH ed25519 public keys, stable
across reads, one per machine (a node replaced in place presents a new one)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import load_ssh_public_key
from fastapi.testclient import TestClient

from backend.provisioning.worker import EngineWorker
from tests.backend.engine.conftest import create, drain, get


def _assert_valid_ed25519(line: str, tmp_path: Path) -> None:
    assert line.startswith("ssh-ed25519 ") and len(line.split()) == 2, line
    assert isinstance(load_ssh_public_key(line.encode()), Ed25519PublicKey)
    keygen = shutil.which("ssh-keygen")
    if keygen is not None:  # OpenSSH itself reads it: a fingerprint, no error
        path = tmp_path / "key.pub"
        path.write_text(line + "\n")
        listed = subprocess.run([keygen, "-l", "-f", str(path)], capture_output=True, text=True, check=False)
        assert listed.returncode == 0 and "(ED25519)" in listed.stdout, listed.stderr


def test_host_keys_are_published_once_known_valid_distinct_and_stable(
    admin: TestClient, make_worker: Callable[..., EngineWorker], tmp_path: Path
) -> None:
    cluster = create(admin, node_count=2)
    pending = get(admin, cluster["id"])
    assert pending["login"] is None or pending["login"]["host_key"] is None
    assert all(node["host_key"] is None for node in pending["nodes"])

    drain(make_worker())
    body = get(admin, cluster["id"])
    assert body["status"] == "RUNNING"
    login_key = body["login"]["host_key"]
    node_keys = {node["name"]: node["host_key"] for node in body["nodes"]}
    assert list(node_keys) == ["train-0", "train-1"]
    for line in (login_key, *node_keys.values()):
        _assert_valid_ed25519(line, tmp_path)
    assert len({login_key, *node_keys.values()}) == 3  # the jumphost and each node: own machines
    again = get(admin, cluster["id"])
    assert again["login"]["host_key"] == login_key
    assert {n["name"]: n["host_key"] for n in again["nodes"]} == node_keys


def test_single_node_login_host_key_is_the_nodes(
    admin: TestClient, make_worker: Callable[..., EngineWorker]
) -> None:
    cluster = create(admin, name="solo", instance_type="1xH100", node_count=1)
    drain(make_worker())
    body = get(admin, cluster["id"])
    (node,) = body["nodes"]
    assert node["host_key"] is not None and body["login"]["host_key"] == node["host_key"]


def test_a_node_replaced_in_place_presents_a_new_host_key(
    admin: TestClient, make_worker: Callable[..., EngineWorker]
) -> None:
    cluster = create(admin, node_count=2)
    worker = make_worker()
    drain(worker)
    before = {n["name"]: n["host_key"] for n in get(admin, cluster["id"])["nodes"]}
    answer = admin.post(f"/v1/clusters/{cluster['id']}/nodes/train-1/actions", json={"action": "replace"})
    assert answer.status_code == 202, answer.text
    drain(worker)
    after = {n["name"]: n["host_key"] for n in get(admin, cluster["id"])["nodes"]}
    assert after["train-0"] == before["train-0"]
    assert after["train-1"] is not None and after["train-1"] != before["train-1"]
