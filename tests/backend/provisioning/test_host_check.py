"""The verdicts of a host check that the stand-in hosts cannot produce (they share this machine's programs and
clock): missing packages and their install, clock skew, another system, fabric devices, ssh's failures in
the user's terms. The probe script itself runs for real in this machine's `sh`."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

from backend.domain.host_pools import accounting_ready
from backend.provisioning import pool_hosts
from backend.provisioning.drivers.ssh_hosts import host_check
from backend.provisioning.drivers.ssh_hosts.host_check import HostTarget
from backend.provisioning.node_config.configure import MARIADB_CONFIG
from backend.provisioning.node_config.shell import RUN_SCRIPT, CommandResult, NodeShell

TARGET = HostTarget(address="10.0.0.5", port=22, user="root", private_key="unused", host_key=None)
ALL_THERE = "\n".join(f"have_{program}=1" for program in host_check.REQUIRED_PROGRAMS)


class ScriptedHost(NodeShell):
    """A host answering each script from a list of outputs, recording what it was sent."""

    def __init__(self, *answers: CommandResult) -> None:
        self.name = "scripted"
        self.answers = list(answers)
        self.scripts: list[str] = []

    def _execute(self, remote_command: str, stdin: bytes | None, timeout: float) -> CommandResult:
        self.scripts.append((stdin or b"").decode() if remote_command == RUN_SCRIPT else remote_command)
        return self.answers.pop(0)


def _facts(**values: str) -> str:
    base = {
        "kernel_name": "Linux",
        "kernel": "6.1.0",
        "arch": "x86_64",
        "hostname": "gpu-a",
        "init": "systemd",
        "packager": "apt",
        "epoch": "1000",
    }
    base.update(values)
    return "\n".join(f"{key}={value}" for key, value in base.items())


def test_the_probe_script_runs_in_a_posix_shell() -> None:
    script = host_check._PROBE_SCRIPT
    # Run as sudo would: its child has no SSH_CONNECTION, its parent (here: sh -c's caller, env) has.
    wrapped = ["env", "SSH_CONNECTION=192.0.2.7 50000 192.0.2.8 22", "sh", "-c",
               f"env -u SSH_CONNECTION sh -e -c {shlex.quote(script)}"]
    done = subprocess.run(wrapped, capture_output=True, text=True, check=True)
    facts = host_check.parse_facts(done.stdout)
    assert facts["kernel_name"] == "Linux" and facts["have_python3"] == "1" and facts["epoch"].isdigit()
    assert facts["ssh_client"] == "192.0.2.7"  # what a cluster's firewall lets in to manage the host
    assert facts["init"] in ("systemd", "none") and facts["packager"] in ("apt", "dnf", "none")


def test_missing_packages_name_the_install_command() -> None:
    facts = host_check.parse_facts(
        _facts() + "\nhave_slurmd=0\nhave_slurmctld=1\nhave_munged=0\nhave_python3=1"
    )
    assert host_check.missing_packages(facts) == ["slurmd", "munge"]
    verdict = host_check.judge(TARGET, {"clock_skew_seconds": 0.0}, ["slurmd", "munge"])
    assert (verdict.status, verdict.reason_code) == ("degraded", "package_missing")
    assert "apt-get install slurmd munge" in (verdict.reason or "") and "install_packages" in (
        verdict.reason or ""
    )


def test_a_skewed_clock_is_degraded_with_the_fix() -> None:
    assert host_check.skew_seconds({"epoch": "1100"}, sent=1000.0, received=1002.0) == 99.0
    verdict = host_check.judge(TARGET, {"clock_skew_seconds": -95.0}, [])
    assert (verdict.status, verdict.reason_code) == ("degraded", "clock_skew")
    assert "95 s behind" in (verdict.reason or "") and "chrony" in (verdict.reason or "")
    assert host_check.judge(TARGET, {"clock_skew_seconds": 3.0}, []).status == "ready"


def test_packages_are_installed_when_the_pool_allows_it() -> None:
    missing = _facts() + "\nhave_slurmd=0\nhave_slurmctld=0\nhave_munged=0\nhave_python3=1"
    agent = '{"host": {"cpu_count": 4, "memory_total_mib": 8000}, "gpus": {"devices": []}, "links": null}'
    host = ScriptedHost(
        CommandResult(0, missing, ""),
        CommandResult(0, "", ""),
        CommandResult(0, _facts() + "\n" + ALL_THERE, ""),
        CommandResult(0, agent, ""),
    )
    verdict = host_check._check(
        host, HostTarget(**{**TARGET.__dict__, "install_packages": True}), now=iter([999.0, 1001.0]).__next__
    )
    assert verdict.status == "ready", verdict.reason
    # Accounting's packages with the required ones; the clock from the first probe, whose trip was timed.
    installed = "apt-get install -y -q slurmd slurmctld munge slurmdbd mariadb-server slurm-client"
    assert installed in host.scripts[1]
    assert verdict.inventory is not None and verdict.inventory["cpu_count"] == 4
    assert verdict.inventory["clock_skew_seconds"] == 0.0
    assert not accounting_ready(verdict.inventory)  # the second probe did not find them


def test_a_host_whose_accounting_packages_fail_to_install_is_ready_without_accounting() -> None:
    agent = '{"host": {"cpu_count": 4, "memory_total_mib": 8000}, "gpus": {"devices": []}, "links": null}'
    host = ScriptedHost(
        CommandResult(0, _facts() + "\n" + ALL_THERE, ""),
        CommandResult(100, "", "E: Unable to locate package mariadb-server"),
        CommandResult(0, agent, ""),
    )
    target = HostTarget(**{**TARGET.__dict__, "install_packages": True})
    verdict = host_check._check(host, target, now=iter([999.0, 1001.0]).__next__)
    assert verdict.status == "ready", verdict.reason
    assert "apt-get install -y -q slurmdbd mariadb-server" in host.scripts[1]
    assert verdict.inventory is not None and not accounting_ready(verdict.inventory)
    everything = _facts() + "\n" + ALL_THERE + "\nhave_slurmdbd=1\nhave_mariadbd=1"
    host = ScriptedHost(CommandResult(0, everything, ""), CommandResult(0, agent, ""))
    verdict = host_check._check(host, target, now=iter([999.0, 1001.0]).__next__)
    assert len(host.scripts) == 2 and accounting_ready(verdict.inventory)  # nothing installed
    # A MariaDB of the host's own runs (the probe saw one not started with the cluster's configuration file):
    # it holds the socket the cluster's accounting database would use, so clusters there go without.
    host = ScriptedHost(CommandResult(0, everything + "\nmariadb_in_use=1", ""), CommandResult(0, agent, ""))
    verdict = host_check._check(host, target, now=iter([999.0, 1001.0]).__next__)
    assert verdict.status == "ready" and not accounting_ready(verdict.inventory)
    assert f"--defaults-file={MARIADB_CONFIG}" in host.scripts[0]


def test_another_system_is_not_linux() -> None:
    host = ScriptedHost(CommandResult(0, _facts(kernel_name="FreeBSD"), ""))
    verdict = host_check._check(host, TARGET, now=iter([1.0, 2.0]).__next__)
    assert (verdict.status, verdict.reason_code) == ("degraded", "not_linux") and "FreeBSD" in (
        verdict.reason or ""
    )


def test_fabric_devices_are_told_apart() -> None:
    def reading(*ports: tuple[str, str]) -> dict[str, object]:
        return {
            "host": {},
            "gpus": {"devices": []},
            "links": {"infiniband": [{"device": device, "link_layer": layer} for device, layer in ports]},
        }

    ib = host_check.inventory_from_agent(reading(("mlx5_1", "InfiniBand"), ("mlx5_0", "InfiniBand")))
    assert (ib["interconnect"], ib["interconnect_devices"]) == ("infiniband", ["mlx5_0", "mlx5_1"])
    efa = host_check.inventory_from_agent(reading(("rdmap0s6", "Unspecified")))
    assert efa["interconnect"] == "efa"
    roce = host_check.inventory_from_agent(reading(("mlx5_0", "Ethernet")))
    assert (roce["interconnect"], roce["interconnect_devices"]) == ("none", [])


def test_inventory_takes_the_cpu_layout_and_each_gpus_cores_by_its_bus_id() -> None:
    gpus = [{"index": 0, "name": "NVIDIA H200", "pci_bus_id": "00000000:07:00.0"},
            {"index": 1, "name": "NVIDIA H200", "pci_bus_id": "00000000:8A:00.0"}]
    layout = {"sockets": 2, "cores_per_socket": 56, "threads_per_core": 2,
              "gpu_cores": {"00000000:07:00.0": "0-55"}}
    inventory = host_check.inventory_from_agent({"host": {"cpu_count": 224}, "gpus": {"devices": gpus},
                                                 "cpu_layout": layout})
    assert (inventory["sockets"], inventory["cores_per_socket"], inventory["threads_per_core"]) == (2, 56, 2)
    assert [gpu["cores"] for gpu in inventory["gpus"]] == ["0-55", None]
    older_agent = host_check.inventory_from_agent({"host": {}, "gpus": {"devices": gpus}})
    assert older_agent["sockets"] is None and [gpu["cores"] for gpu in older_agent["gpus"]] == [None, None]


def test_ssh_failures_in_the_users_terms() -> None:
    changed = host_check.connection_verdict(
        "ssh root@10.0.0.5 -p 22: WARNING: REMOTE HOST IDENTIFICATION "
        "HAS CHANGED! Host key verification failed.",
        TARGET,
    )
    assert changed.reason_code == "host_key_changed"
    denied = host_check.connection_verdict(
        "ssh root@10.0.0.5 -p 22: root@10.0.0.5: Permission denied (publickey).", TARGET
    )
    assert denied.reason_code == "auth_refused" and "~root/.ssh/authorized_keys" in (denied.reason or "")
    timeout = host_check.connection_verdict(
        "ssh root@10.0.0.5 -p 22: ssh: connect to host 10.0.0.5 port 22: Connection timed out", TARGET
    )
    assert timeout.reason_code == "unreachable"
    assert (
        timeout.reason == "no SSH connection to 10.0.0.5 port 22: ssh: connect to host 10.0.0.5 port 22: "
        "Connection timed out"
    )


def test_a_user_whose_sudo_wants_a_password() -> None:
    host = ScriptedHost(CommandResult(1, "", "sudo: a password is required\n"))
    verdict = host_check._check(
        host, HostTarget(**{**TARGET.__dict__, "user": "ops"}), now=iter([1.0, 2.0]).__next__
    )
    assert (verdict.status, verdict.reason_code) == ("degraded", "no_sudo")
    assert "ops ALL=(ALL) NOPASSWD:ALL" in (verdict.reason or "")


def test_a_host_given_by_name_is_used_by_the_ip_it_resolved_to() -> None:
    # A cluster's /etc/hosts, firewall and login need addresses: the check records the one ssh reached.
    assert host_check.reached_ip("10.0.9.11", 22) == "10.0.9.11"
    assert host_check.reached_ip("localhost", 22) in ("127.0.0.1", "::1")
    assert host_check.reached_ip("no-such-host.invalid", 22) is None


def test_a_real_h200_server_read_back_through_the_whole_check() -> None:
    """The probe and the node agent as they ran on a real H200 server (data/h200-server): the check's
    inventory matches what `slurmd -C` read on the same machine, and its verdict names what is missing."""
    recorded = Path(__file__).parent / "data" / "h200-server"
    probe = (recorded / "probe.txt").read_text()
    reading = (recorded / "agent.json").read_text()
    host = ScriptedHost(CommandResult(0, probe, ""), CommandResult(0, reading, ""))
    epoch = float(host_check.parse_facts(probe)["epoch"])
    verdict = host_check._check(host, TARGET, now=lambda: epoch)
    assert (verdict.status, verdict.reason_code) == ("degraded", "package_missing")
    assert "lacks slurmd, slurmctld, munge" in (verdict.reason or "")
    inventory = verdict.inventory or {}
    assert inventory["os"] == "Ubuntu 24.04.3 LTS" and inventory["init"] == "none"
    assert inventory["gpu_count"] == 1 and inventory["gpu_model"] == "NVIDIA H200"
    [gpu] = inventory["gpus"]
    assert (gpu["memory_total_mib"], gpu["cores"]) == (143771, "0-15")  # one NUMA node: every core
    slurm = dict(field.split("=", 1) for field in (recorded / "slurmd-C.txt").read_text().split())
    shape = pool_hosts.node_shape(inventory)
    assert shape is not None
    assert shape.cpus == int(slurm["CPUs"]) and inventory["memory_mib"] == int(slurm["RealMemory"])
    said = ("Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore")
    assert shape.layout == "".join(f" {field}={slurm[field]}" for field in said)
