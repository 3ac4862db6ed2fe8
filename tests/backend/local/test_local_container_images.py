"""Container images declared through the API on a real 2-node local cluster (root, Debian's Slurm 22.05,
crun, skopeo, umoci, docker-registry): `container_images` is imported once into the cluster's store by the
engine's import operation and run with `srun --container=/images/<name>`; a private registry behind
htpasswd needs `registry_credentials` (missing and wrong ones fail naming the image and keep the image
shown), a missing tag says so, and a fixed declaration switches the name in place. SQLite only."""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from backend.provisioning.drivers.local.driver import LocalDriver
from backend.provisioning.drivers.local.namespaces import run
from backend.provisioning.drivers.local.node_setup import cluster_uid
from backend.provisioning.settings import EngineSettings, use
from backend.provisioning.worker import EngineWorker
from tests.backend.engine.conftest import FAST, create, get, sessions
from tests.backend.local.test_local_containers import SRUN, _build_image, _user
from tests.backend.local.test_local_driver_day2 import _cluster
from tests.backend.local.test_local_driver_nodes import _converged, _until, driver
from tests.backend.provisioning.test_images import Registry, _push, _require_tools, _start_registry, _stop

__all__ = ["driver", "sessions"]  # fixtures, used here


@dataclass
class Registries:
    public: Registry  # team/tools:1 and :2, markers "one" and "two"
    private: Registry  # team/tools:2, marker "two"; user alice, password s3cret


@pytest.fixture
def registries(tmp_path: Path) -> Iterator[Registries]:
    _require_tools()
    layout = tmp_path / "layout"
    for tag, marker in (("1", "one"), ("2", "two")):
        _build_image(layout, tmp_path, tag, marker)
    htpasswd = subprocess.run(["htpasswd", "-Bbn", "alice", "s3cret"], capture_output=True, text=True,
                              check=True).stdout
    (tmp_path / "htpasswd").write_text(htpasswd)
    public = _start_registry(tmp_path / "public")
    private = None
    try:
        private = _start_registry(tmp_path / "private", "auth:\n  htpasswd:\n    realm: test\n"
                                  f"    path: {tmp_path / 'htpasswd'}\n")
        _push(layout, "1", public, "team/tools:1")
        _push(layout, "2", public, "team/tools:2")
        _push(layout, "2", private, "team/tools:2", "--dest-creds=alice:s3cret")
        yield Registries(public, private)
    finally:
        for registry in (public, private):
            if registry is not None:
                _stop(registry)


def _image(body: dict[str, Any], name: str) -> dict[str, Any]:
    return next(image for image in body["images"] if image["name"] == name)


def _settled(name: str, since: str | None) -> Callable[[dict[str, Any]], bool]:
    """The image's import after `since` (its previous updated_at) finished, one way or the other."""
    def done(body: dict[str, Any]) -> bool:
        image = _image(body, name)
        finished = image["state"] in ("ready", "failed") and image["updated_at"] != since
        return finished and body["phase"] == "Ready"
    return done


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_local_cluster_imports_declared_images_from_public_and_private_registries(
    admin: TestClient, sessions: sessionmaker[Session], driver: LocalDriver, registries: Registries,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    worker, cluster, login = _cluster(admin, sessions, driver, tmp_path, monkeypatch, "img")
    url = f"/v1/clusters/{cluster['id']}"
    public = f"127.0.0.1:{registries.public.port}/team/tools:1"
    private_registry = f"127.0.0.1:{registries.private.port}"
    private = f"{private_registry}/team/tools:2"

    def declare(worker: EngineWorker, **changes: Any) -> dict[str, Any]:
        images = get(admin, cluster["id"])["images"]
        before = next((image["updated_at"] for image in images if image["name"] == "tools"), None)
        answer = admin.patch(url, json=changes)
        assert answer.status_code == 200, answer.text
        _until(worker, admin, cluster["id"], _settled("tools", before), 120)
        return _image(get(admin, cluster["id"]), "tools")

    def marker() -> list[str]:
        return _user(tmp_path / "key", login, f"{SRUN} -N2 --container=/images/tools cat /etc/marker")

    shown = declare(worker, container_images={"tools": public})
    assert shown["state"] == "ready" and shown["digest"].startswith("sha256:") and shown["size_bytes"] > 0
    assert marker() == ["one", "one"]  # pulled once onto the cluster's storage, run on both nodes

    refused = declare(worker, container_images={"tools": private})
    assert refused["state"] == "failed" and f'container_images["tools"]: image {private}' in refused["reason"]
    assert "needs credentials" in refused["reason"] and "still shows" in refused["reason"]
    assert refused["digest"] == shown["digest"] and marker() == ["one", "one"]  # the old image stays

    wrong = declare(worker, registry_credentials={private_registry: {"username": "alice",
                                                                     "password": "nope"}})
    assert wrong["state"] == "failed" and "refused the credentials" in wrong["reason"]
    assert "nope" not in str(get(admin, cluster["id"]))

    fixed = declare(worker, registry_credentials={private_registry: {"username": "alice",
                                                                     "password": "s3cret"}})
    assert fixed["state"] == "ready" and fixed["digest"] != shown["digest"]
    assert marker() == ["two", "two"]  # switched in place: the same nodes, the new image

    missing = declare(worker, container_images={"tools": f"127.0.0.1:{registries.public.port}/team/tools:9"})
    assert missing["state"] == "failed" and "no such repository or tag" in missing["reason"]
    assert marker() == ["two", "two"]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_local_single_node_container_runs_every_login_inside_the_image(
    admin: TestClient, sessions: sessionmaker[Session], driver: LocalDriver, registries: Registries,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    block = secrets.randbelow(16 * 64)  # a block of its own, as _cluster takes
    monkeypatch.setenv("GPUCLOUD_LOCAL_ADDRESS_RANGE", f"172.{16 + block // 64}.{block % 64 * 4}.0/22")
    use(EngineSettings())
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "key")])
    key = admin.post("/v1/ssh-keys", json={"name": "k", "public_key": (tmp_path / "key.pub").read_text()})
    worker = EngineWorker(sessions, EngineSettings.model_validate(FAST), driver=driver)
    first = f"127.0.0.1:{registries.public.port}/team/tools:1"
    cluster = create(admin, name="solo", node_count=1, container=first, ssh_key_ids=[key.json()["id"]])
    _until(worker, admin, cluster["id"], _converged(1))
    body = get(admin, cluster["id"])
    assert _image(body, "container")["state"] == "ready"
    login = body["login"]["public_ip"]

    def session(command: str, *, check: bool = True) -> list[str]:
        return _user(tmp_path / "key", login, command, check=check)

    # A command over SSH runs in the image, as the cluster's user, in its home; the image is read-only.
    uid = str(cluster_uid(driver.cluster(cluster["id"], body["fabric"]["subnet"])))
    assert session("cat /etc/marker; id -u; pwd; touch ~/kept && echo written") == [
        "one", uid, "/home/ubuntu", "written"]
    assert "Read-only file system" in session("touch /etc/x 2>&1", check=False)[0]
    # An interactive login gets a terminal inside the image too.
    interactive = run(["ssh", "-tt", "-i", str(tmp_path / "key"), "-o", "StrictHostKeyChecking=no",
                       "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", f"ubuntu@{login}"],
                      input_text="tty && cat /etc/marker; exit\n", check=False, timeout=60)
    assert "/dev/pts/" in interactive.stdout and "one" in interactive.stdout, interactive

    # A new container: imported, and the next session runs in it; the home stays.
    answer = admin.patch(f"/v1/clusters/{cluster['id']}",
                         json={"container": f"127.0.0.1:{registries.public.port}/team/tools:2"})
    assert answer.status_code == 200, answer.text
    _until(worker, admin, cluster["id"], _settled("container", _image(body, "container")["updated_at"]))
    assert _image(get(admin, cluster["id"]), "container")["state"] == "ready"
    assert session("cat /etc/marker; ls ~") == ["two", "kept"]

    # No container: sessions run on the node itself again.
    answer = admin.patch(f"/v1/clusters/{cluster['id']}", json={"container": None})
    assert answer.status_code == 200, answer.text
    # The engine runs meanwhile: a session tells where it lands (sshd reloads its configuration, as
    # `systemctl reload ssh` does, re-executing itself: a connection in that instant is refused, retried).
    _until(worker, admin, cluster["id"],
           lambda _: session("test -e /etc/marker && echo inside || echo node", check=False) == ["node"], 60)
