"""Checks of a host pool's servers against real sshd's: stand-in hosts are namespaces with a root of their own
(the local driver's boot code) on one bridge, whose sshd lets root in with the pool's key from anywhere, as a
rented server's would. Each check runs the real `ssh` and the node agent on the host.

Needs root and `ip netns` (.ci/run); every address lives inside namespaces this test makes.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
from collections.abc import Iterator
from dataclasses import replace

import pytest
from fastapi.testclient import TestClient

from backend.domain.clock import SYSTEM_CLOCK
from backend.node_agent.topology import read_cpu_layout
from backend.provisioning import host_checks
from backend.provisioning.drivers.ssh_hosts.host_check import check_host
from backend.settings import Settings
from backend.store.db import make_engine, make_session_factory
from tests.backend.local.stand_in_hosts import StandIns, openssh, private_key, public, stand_in_hosts

SUBNET = "10.0.8.0/24"


@pytest.fixture(scope="module")
def stand_ins() -> Iterator[StandIns]:
    with stand_in_hosts(SUBNET, ("host-a", "host-b"), gpu_hosts=("host-a",)) as hosts:
        yield hosts


def test_a_reachable_host_is_ready_with_its_inventory_and_key(stand_ins: StandIns) -> None:
    verdict = check_host(stand_ins.target("host-a"))
    assert (verdict.status, verdict.reason_code, verdict.reason) == ("ready", None, None)
    assert verdict.host_key == stand_ins.host_key  # recorded on first contact
    inventory = verdict.inventory or {}
    assert inventory["hostname"] == "host-a" and inventory["kernel"] == os.uname().release
    assert inventory["cpu_count"] == os.cpu_count() and inventory["memory_mib"] > 0
    assert inventory["packages"] == {"slurmd": True, "slurmctld": True, "munged": True, "python3": True,
                                     "slurmdbd": True, "mariadbd": True}  # the optional ones, for accounting
    assert inventory["init"] == "none"  # a namespace has no systemd of its own
    assert abs(inventory["clock_skew_seconds"]) < 5
    assert (inventory["gpu_count"], inventory["gpu_model"]) == (1, "NVIDIA H200")  # the recorded node's
    # The stand-in shares this machine's CPUs and sysfs: the layout read here, and the GPU's cores as read
    # here for the recorded GPU's bus id (every core: this machine has one NUMA node).
    layout = read_cpu_layout(("00000000:00:06.0",))
    assert layout is not None
    assert (inventory["sockets"], inventory["cores_per_socket"], inventory["threads_per_core"]) == (
        layout.sockets, layout.cores_per_socket, layout.threads_per_core)
    assert inventory["gpus"] == [
        {
            "index": 0,
            "name": "NVIDIA H200",
            "memory_total_mib": 143771,
            "uuid": "GPU-16d21506-2e18-0481-34e3-09ceda98eb42",
            "cores": layout.gpu_cores.get("00000000:00:06.0"),
        }
    ]
    assert inventory["interconnect"] == "none"  # no HCA in a namespace
    assert inventory["ip"] == stand_ins.nodes["host-a"].address  # what a cluster's node is known by
    # From now on the recorded key is required, and it matches.
    assert check_host(stand_ins.target("host-a", host_key=verdict.host_key)).status == "ready"


def test_a_changed_host_key_is_refused_before_anything_is_sent(stand_ins: StandIns) -> None:
    other = " ".join(public(private_key()).split()[:2])
    verdict = check_host(stand_ins.target("host-b", host_key=other))
    assert (verdict.status, verdict.reason_code) == ("unreachable", "host_key_changed")
    assert "reinstalled" in (verdict.reason or "") and verdict.host_key == other and verdict.inventory is None


def test_a_key_the_host_does_not_accept_names_the_fix(stand_ins: StandIns) -> None:
    verdict = check_host(stand_ins.target("host-a", private_key=openssh(private_key())))
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
    keys = node.dir / "ssh" / "authorized_keys"  # the node's copy of its sshd's files, made at boot
    (keys / "ops").write_text((keys / "root").read_text())
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
