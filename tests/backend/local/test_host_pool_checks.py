"""Checks of a host pool's servers against real sshd's: stand-in hosts are namespaces with a root of their own
(the local driver's boot code) on one bridge, whose sshd lets root in with the pool's key from anywhere, as a
rented server's would. Each check runs the real `ssh` and the node agent on the host.

Needs root and `ip netns` (.ci/run); every address lives inside namespaces this test makes.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from fastapi.testclient import TestClient

from backend.domain.clock import SYSTEM_CLOCK
from backend.provisioning import host_checks
from backend.provisioning.drivers.local.driver import tear_down
from backend.provisioning.drivers.local.namespaces import Bind, LocalCluster, LocalNode
from backend.provisioning.drivers.local.node_setup import BOOT_DIR, node_binds, prepare_cluster, start_sshd
from backend.provisioning.drivers.ssh_hosts.host_check import HostTarget, check_host
from backend.settings import Settings
from backend.store.db import make_engine, make_session_factory

SUBNET = "10.0.8.0/24"
RECORDED_XML = Path(__file__).parents[1] / "node_agent" / "data" / "nvidia-smi-q.xml"
# A server's sshd: root may log in with a key from any address (no management network to restrict it to).
SSHD_CONFIG = f"""\
Port 22
ListenAddress 0.0.0.0
HostKey {BOOT_DIR}/ssh_host_ed25519_key
AuthorizedKeysFile {BOOT_DIR}/authorized_keys/%u
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
PidFile /run/sshd/sshd.pid
"""


def _private_key() -> ed25519.Ed25519PrivateKey:
    return ed25519.Ed25519PrivateKey.generate()


def _openssh(key: ed25519.Ed25519PrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    ).decode()


def _public(key: ed25519.Ed25519PrivateKey) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )


@dataclass(frozen=True)
class StandIns:
    bridge: LocalCluster
    nodes: dict[str, LocalNode]
    private_key: str
    host_key: str  # `ssh-ed25519 AAAA...` every stand-in presents

    def target(self, name: str, **changes: object) -> HostTarget:
        base = HostTarget(
            address=self.nodes[name].address,
            port=22,
            user="root",
            private_key=self.private_key,
            host_key=None,
        )
        return replace(base, **changes)  # type: ignore[arg-type]


def _wait_for_sshd(address: str, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            probe.settimeout(1)
            if probe.connect_ex((address, 22)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"sshd on {address} did not answer")


def _recorded_gpu(root: Path) -> list[Bind]:
    """An `nvidia-smi` on the host's PATH that answers `-q -x` with a real H200 node's output
    (tests/backend/node_agent/data): the inventory path of a GPU server, without its GPU."""
    tools = root / "gpu-tools"
    tools.mkdir(parents=True)
    shutil.copy(RECORDED_XML, tools / "nvidia-smi-q.xml")
    script = tools / "nvidia-smi"
    script.write_text('#!/bin/sh\n[ "$*" = "-q -x" ] && exec cat /usr/local/bin/nvidia-smi-q.xml\nexit 9\n')
    script.chmod(0o755)
    return [Bind(tools, "/usr/local/bin", read_only=True)]


@pytest.fixture(scope="module")
def stand_ins() -> Iterator[StandIns]:
    root = Path("/var/tmp") / f"gpucloud-hosts-test-{uuid.uuid4().hex[:8]}"
    bridge = LocalCluster(root, f"h{uuid.uuid4().hex[:6]}", SUBNET)
    key = _private_key()
    try:
        bridge.up()
        prepare_cluster(bridge)
        boot = bridge.dir / "ssh"
        (boot / "sshd_config").write_text(SSHD_CONFIG)
        (boot / "authorized_keys" / "root").write_text(_public(key) + "\n")
        nodes = {
            name: bridge.node(name, f"10.0.8.{11 + index}") for index, name in enumerate(("host-a", "host-b"))
        }
        for name, node in nodes.items():
            node.create(node_binds(node) + (_recorded_gpu(root) if name == "host-a" else []))
            start_sshd(node)
            _wait_for_sshd(node.address)
        host_key = " ".join((boot / "ssh_host_ed25519_key.pub").read_text().split()[:2])
        yield StandIns(bridge, nodes, _openssh(key), host_key)
    finally:
        tear_down(bridge)
        subprocess.run(["rm", "-rf", str(root)], check=False)


def test_a_reachable_host_is_ready_with_its_inventory_and_key(stand_ins: StandIns) -> None:
    verdict = check_host(stand_ins.target("host-a"))
    assert (verdict.status, verdict.reason_code, verdict.reason) == ("ready", None, None)
    assert verdict.host_key == stand_ins.host_key  # recorded on first contact
    inventory = verdict.inventory or {}
    assert inventory["hostname"] == "host-a" and inventory["kernel"] == os.uname().release
    assert inventory["cpu_count"] == os.cpu_count() and inventory["memory_mib"] > 0
    assert inventory["packages"] == {"slurmd": True, "slurmctld": True, "munged": True, "python3": True}
    assert inventory["init"] == "none"  # a namespace has no systemd of its own
    assert abs(inventory["clock_skew_seconds"]) < 5
    assert (inventory["gpu_count"], inventory["gpu_model"]) == (1, "NVIDIA H200")  # the recorded node's
    assert inventory["gpus"] == [
        {
            "index": 0,
            "name": "NVIDIA H200",
            "memory_total_mib": 143771,
            "uuid": "GPU-16d21506-2e18-0481-34e3-09ceda98eb42",
        }
    ]
    assert inventory["interconnect"] == "none"  # no HCA in a namespace
    # From now on the recorded key is required, and it matches.
    assert check_host(stand_ins.target("host-a", host_key=verdict.host_key)).status == "ready"


def test_a_changed_host_key_is_refused_before_anything_is_sent(stand_ins: StandIns) -> None:
    other = " ".join(_public(_private_key()).split()[:2])
    verdict = check_host(stand_ins.target("host-b", host_key=other))
    assert (verdict.status, verdict.reason_code) == ("unreachable", "host_key_changed")
    assert "reinstalled" in (verdict.reason or "") and verdict.host_key == other and verdict.inventory is None


def test_a_key_the_host_does_not_accept_names_the_fix(stand_ins: StandIns) -> None:
    verdict = check_host(stand_ins.target("host-a", private_key=_openssh(_private_key())))
    assert (verdict.status, verdict.reason_code) == ("unreachable", "auth_refused")
    assert "authorized_keys" in (verdict.reason or "") and "'root'" in (verdict.reason or "")


def test_an_address_nobody_answers_is_unreachable(stand_ins: StandIns) -> None:
    verdict = check_host(replace(stand_ins.target("host-a"), address="10.0.8.99"))
    assert (verdict.status, verdict.reason_code) == ("unreachable", "unreachable")
    assert "10.0.8.99 port 22" in (verdict.reason or "")


def test_a_host_behind_a_bastion(stand_ins: StandIns) -> None:
    jump = (None, stand_ins.nodes["host-a"].address, 22)
    verdict = check_host(stand_ins.target("host-b", jump=jump))
    assert verdict.status == "ready", verdict.reason
    assert (verdict.inventory or {})["hostname"] == "host-b"
    assert (verdict.inventory or {})["gpu_count"] == 0  # no nvidia-smi on this one
    assert verdict.jump_known_hosts.startswith("jump-10.0.8.11-22 ssh-ed25519 ")


def test_a_user_without_sudo_is_told_how_to_fix_it(stand_ins: StandIns) -> None:
    node = stand_ins.nodes["host-b"]
    added = subprocess.run(
        node.enter_argv(["useradd", "-M", "-p", "*", "-s", "/bin/sh", "ops"]), capture_output=True, text=True
    )
    assert added.returncode == 0, added.stderr
    keys = stand_ins.bridge.dir / "ssh" / "authorized_keys" / "ops"
    keys.write_text((stand_ins.bridge.dir / "ssh" / "authorized_keys" / "root").read_text())
    verdict = check_host(stand_ins.target("host-b", user="ops"))
    assert (verdict.status, verdict.reason_code) == ("degraded", "no_sudo"), verdict.reason
    assert "sudo" in (verdict.reason or "") and "ops" in (verdict.reason or "")


def test_the_pool_is_ready_through_the_api_and_the_worker_round(
    stand_ins: StandIns, admin: TestClient, settings: Settings
) -> None:
    body = {
        "name": "lab",
        "region": "on-prem",
        "ssh_private_key": stand_ins.private_key,
        "hosts": [{"address": "10.0.8.11"}, {"address": "10.0.8.12"}, {"address": "10.0.8.99"}],
    }
    pool = admin.post("/v1/host-pools", json=body).json()
    engine = make_engine(settings)
    sessions = make_session_factory(engine, write=True)
    assert host_checks.run_due_checks(sessions, SYSTEM_CLOCK, "test", dt.timedelta(minutes=5)) == 3
    engine.dispose()
    read = admin.get(f"/v1/host-pools/{pool['id']}").json()
    assert read["status"] == "ready" and read["ready_hosts"] == 2 and read["free_hosts"] == 2
    assert [h["status"] for h in read["hosts"]] == ["ready", "ready", "unreachable"]
    assert [h["inventory"]["hostname"] for h in read["hosts"][:2]] == ["host-a", "host-b"]
    assert read["hosts"][0]["host_key"] == stand_ins.host_key
