"""Checking one of a pool's servers over SSH: can the backend get in, is it fit for a cluster, what is in it.

One check is three round trips at most on one connection: a probe script (OS, programs, init, clock), the
package install when the pool allows it and something is missing, and the node agent for the inventory
(the local driver's agent, its code sent on standard input: CPUs, memory, `nvidia-smi -q -x`, InfiniBand
and EFA devices from sysfs). The verdict is the host's status with a reason that names the cause and the fix.

The key the host presents on first contact is recorded (`accept-new`) and required afterwards; a pinned
or recorded key that no longer matches is refused before anything is sent.
"""

from __future__ import annotations

import json
import shlex
import socket
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.domain.host_pools import ACCOUNTING_PROGRAMS
from backend.provisioning.drivers.local.observe import agent_script
from backend.provisioning.node_config.configure import MARIADB_CONFIG
from backend.provisioning.node_config.shell import CommandResult, NodeCommandError, NodeShell
from backend.provisioning.node_config.ssh import SshShell, SshTarget

# Slurm's credentials (munge) are refused beyond munge's TTL (300 s) of skew; jobs misbehave long before.
MAX_CLOCK_SKEW_SECONDS = 30.0
# What a node of a Slurm cluster runs: program -> the Debian package that has it.
REQUIRED_PROGRAMS = {"slurmd": "slurmd", "slurmctld": "slurmctld", "munged": "munge", "python3": "python3"}
HOST_KEY_ALIAS = "gpucloud-pool-host"
_PROBE_SCRIPT = """\
echo "kernel_name=$(uname -s)"
echo "kernel=$(uname -r)"
echo "arch=$(uname -m)"
echo "hostname=$(hostname)"
if [ -r /etc/os-release ]; then . /etc/os-release; echo "os=${PRETTY_NAME:-$NAME}"; fi
for program in PROGRAMS; do
    if command -v "$program" >/dev/null 2>&1 || [ -x "/usr/sbin/$program" ]; then
        echo "have_$program=1"
    else
        echo "have_$program=0"
    fi
done
if [ -d /run/systemd/system ]; then echo init=systemd; else echo init=none; fi
# The address the host sees the backend's connection come from (a bastion's, behind one): the first
# SSH_CONNECTION among this script's ancestors (sudo clears it from its children, not from itself).
p=$$
while [ "${p:-1}" -gt 1 ]; do
    connection=$(tr '\\0' '\\n' < /proc/"$p"/environ 2>/dev/null | sed -n 's/^SSH_CONNECTION=//p')
    if [ -n "$connection" ]; then echo "ssh_client=${connection%% *}"; break; fi
    p=$(awk '{print $4}' /proc/"$p"/stat 2>/dev/null)
done
# A MariaDB of the host's own (not a cluster's accounting database) holds the socket accounting would use.
for pid in $(pgrep -x "mariadbd|mysqld" || true); do
    tr '\\0' ' ' < /proc/"$pid"/cmdline 2>/dev/null | grep -q -- "--defaults-file=MARIADB_CONFIG" ||
        echo mariadb_in_use=1
done
if command -v apt-get >/dev/null 2>&1; then echo packager=apt
elif command -v dnf >/dev/null 2>&1; then echo packager=dnf
else echo packager=none; fi
echo "epoch=$(date +%s)"
""".replace("PROGRAMS", " ".join((*REQUIRED_PROGRAMS, *ACCOUNTING_PROGRAMS))).replace(
    "MARIADB_CONFIG", MARIADB_CONFIG
)
_INSTALL = {
    "apt": "DEBIAN_FRONTEND=noninteractive apt-get install -y -q {packages}",
    "dnf": "dnf install -y -q {packages}",
}
# dnf (EPEL) names: the daemons come in packages of their own.
_DNF_PACKAGES = {
    "slurmd": "slurm-slurmd",
    "slurmctld": "slurm-slurmctld",
    "slurmdbd": "slurm-slurmdbd",
    "munge": "munge",
    "python3": "python3",
    "mariadb-server": "mariadb-server",
}
INSTALL_TIMEOUT_SECONDS = 600.0


@dataclass(frozen=True)
class HostTarget:
    """Where one host answers and how the pool logs in."""

    address: str
    port: int
    user: str
    private_key: str  # OpenSSH format; written to a 0600 file for the check's duration only
    host_key: str | None  # `type base64` required, or None: record the first one
    jump: tuple[str | None, str, int] | None = None
    jump_known_hosts: str = ""  # the bastion's recorded key lines
    install_packages: bool = False


@dataclass
class HostVerdict:
    status: str  # ready | degraded | unreachable
    reason_code: str | None = None
    reason: str | None = None
    host_key: str | None = None
    inventory: dict[str, Any] | None = None
    jump_known_hosts: str = ""


def check_host(target: HostTarget, *, now: Callable[[], float] = time.time) -> HostVerdict:
    """Check one host (never raises for what the host does: every failure is a verdict)."""
    with tempfile.TemporaryDirectory(prefix="gpucloud-hostcheck-") as scratch:
        directory = Path(scratch)
        identity = directory / "id"
        identity.touch(mode=0o600)
        identity.write_text(target.private_key.rstrip("\n") + "\n")
        known_hosts = directory / "known_hosts"
        lines = [f"{HOST_KEY_ALIAS} {target.host_key}\n"] if target.host_key else []
        known_hosts.write_text("".join(lines) + target.jump_known_hosts)
        shell = SshShell(
            SshTarget(
                name=target.address,
                host=target.address,
                port=target.port,
                known_hosts=known_hosts,
                host_key_alias=HOST_KEY_ALIAS,
                user=target.user,
                accept_new_host_key=target.host_key is None,
                jump=target.jump,
                accept_new_jump_key=target.jump is not None and not target.jump_known_hosts,
                sudo=target.user != "root",
                multiplex=False,
            ),
            identity,
            directory / "ctl",
        )
        try:
            verdict = _check(shell, target, now)
        except NodeCommandError as failure:  # raised only when ssh got no answer (every call has check=False)
            verdict = connection_verdict(failure.stderr, target)
        recorded = known_hosts.read_text().splitlines()
        verdict.host_key = verdict.host_key or _recorded_key(recorded, HOST_KEY_ALIAS) or target.host_key
        verdict.jump_known_hosts = "".join(f"{line}\n" for line in recorded if line.startswith("jump-"))
        return verdict


def _recorded_key(lines: list[str], alias: str) -> str | None:
    for line in lines:
        fields = line.split()
        if len(fields) >= 3 and fields[0] == alias:
            return f"{fields[1]} {fields[2]}"
    return None


def _check(shell: NodeShell, target: HostTarget, now: Callable[[], float]) -> HostVerdict:
    sent = now()
    probe = _probe(shell)
    received = now()
    if probe.returncode != 0:
        return _sudo_or_failure(probe, target)
    facts = parse_facts(probe.stdout)
    if facts.get("kernel_name") != "Linux":
        system = facts.get("kernel_name") or "an unknown system"
        return HostVerdict("degraded", "not_linux", f"{target.address} runs {system}: clusters need Linux")
    skew = skew_seconds(facts, sent, received)  # from the first probe, whose round trip was timed
    missing = missing_packages(facts)
    wanted = missing + missing_packages(facts, ACCOUNTING_PROGRAMS)
    if wanted and target.install_packages:
        installed = _install(shell, facts, wanted)
        if installed is not None:
            facts = installed
            missing = missing_packages(facts)
        elif missing:  # accounting's alone may fail to install: the host runs clusters without it
            return HostVerdict(
                "degraded",
                "package_missing",
                f"{target.address}: installing {', '.join(wanted)} failed (see the host's package manager "
                "log); install slurmd, slurmctld and munge by hand (slurmdbd and mariadb-server for "
                "accounting)",
            )
    inventory = base_inventory(facts, skew=skew)
    if "python3" not in missing:
        reading = shell.run(["python3", "-"], input=agent_script(), check=False, timeout=60)
        if reading.returncode != 0:
            said = (reading.stderr.strip() or "no output")[-300:]
            return HostVerdict(
                "degraded",
                "agent_failed",
                f"{target.address}: the node agent (python3) failed: {said}",
                inventory=inventory,
            )
        inventory.update(inventory_from_agent(json.loads(reading.stdout)))
    if target.jump is None and (ip := reached_ip(target.address, target.port)) is not None:
        inventory["ip"] = ip  # a cluster's /etc/hosts, firewall and login use it, not the DNS name
    return judge(target, inventory, missing)


def reached_ip(address: str, port: int) -> str | None:
    """The IP a host's address resolves to here, where ssh just reached it (None: it does not resolve
    now). Behind a bastion the name is the bastion's to resolve, so it is kept."""
    try:
        found = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)
    except OSError:
        return None
    return str(found[0][4][0]) if found else None


def judge(target: HostTarget, inventory: dict[str, Any], missing: list[str]) -> HostVerdict:
    """The verdict for a host that answered: packages, then clock."""
    if missing:
        packages = " ".join(missing)
        return HostVerdict(
            "degraded",
            "package_missing",
            (
                f"{target.address} lacks {', '.join(missing)}: install them (Debian/Ubuntu: `apt-get install "
                f"{packages}`) or set install_packages = true on the pool"
            ),
            inventory=inventory,
        )
    skew = inventory.get("clock_skew_seconds")
    if skew is not None and abs(skew) > MAX_CLOCK_SKEW_SECONDS:
        direction = "ahead of" if skew > 0 else "behind"
        return HostVerdict(
            "degraded",
            "clock_skew",
            (
                f"{target.address}'s clock is {abs(skew):.0f} s {direction} the backend's (at most "
                f"{MAX_CLOCK_SKEW_SECONDS:.0f} s: Slurm's munge credentials fail beyond): run chrony or "
                "systemd-timesyncd on the host"
            ),
            inventory=inventory,
        )
    return HostVerdict("ready", inventory=inventory)


def connection_verdict(said: str, target: HostTarget) -> HostVerdict:
    """Why ssh could not get in (`said`: its error output), in the user's terms."""
    where = f"{target.address} port {target.port}"
    if "REMOTE HOST IDENTIFICATION HAS CHANGED" in said or "Host key verification failed" in said:
        return HostVerdict(
            "unreachable",
            "host_key_changed",
            (
                f"{where} presented another SSH host key than the one recorded ({target.host_key or 'none'})"
                ": if the server was reinstalled, remove the host from the pool and add it again, or pin its "
                "new key in hosts[].host_key; otherwise the connection may be intercepted"
            ),
        )
    if "Permission denied" in said:
        return HostVerdict(
            "unreachable",
            "auth_refused",
            (
                f"{where} refused the pool's key for user {target.user!r}: append the pool's ssh_public_key "
                f"to ~{target.user}/.ssh/authorized_keys on the host"
            ),
        )
    return HostVerdict("unreachable", "unreachable", f"no SSH connection to {where}: {_ssh_said(said)}")


def _ssh_said(stderr: str) -> str:
    """ssh's own words, without the `ssh user@host -p N:` prefix our shell adds."""
    text = stderr.split(": ", 1)[1] if stderr.startswith("ssh ") and ": " in stderr else stderr
    return text.strip()[-300:] or "no answer"


def _sudo_or_failure(result: CommandResult, target: HostTarget) -> HostVerdict:
    if target.user != "root" and "sudo" in result.stderr and "not found" in result.stderr:
        return HostVerdict(
            "degraded",
            "no_sudo",
            (
                f"{target.address} has no sudo, which {target.user} needs to configure it: install sudo and "
                f"add `{target.user} ALL=(ALL) NOPASSWD:ALL` to /etc/sudoers.d/gpucloud, or log in as root"
            ),
        )
    if target.user != "root" and "sudo" in result.stderr:
        return HostVerdict(
            "degraded",
            "no_sudo",
            (
                f"{target.user} may not run sudo without a password on {target.address}: add "
                f"`{target.user} ALL=(ALL) NOPASSWD:ALL` to /etc/sudoers.d/gpucloud, or log in as root"
            ),
        )
    return HostVerdict(
        "degraded",
        "agent_failed",
        f"{target.address}: the host probe failed (exit "
        f"{result.returncode}): {(result.stderr.strip() or 'no output')[-300:]}",
    )


def parse_facts(output: str) -> dict[str, str]:
    facts = {}
    for line in output.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            facts[key.strip()] = value.strip()
    return facts


def missing_packages(facts: Mapping[str, str], programs: Mapping[str, str] = REQUIRED_PROGRAMS) -> list[str]:
    """The Debian packages of the programs (program -> package) the host lacks."""
    return [package for program, package in programs.items() if facts.get(f"have_{program}") != "1"]


def skew_seconds(facts: Mapping[str, str], sent: float, received: float) -> float | None:
    """The host's clock minus ours at the moment it answered (the round trip's middle); whole seconds."""
    try:
        return round(float(facts["epoch"]) - (sent + received) / 2, 1)
    except (KeyError, ValueError):
        return None


def _install(shell: NodeShell, facts: dict[str, str], missing: list[str]) -> dict[str, str] | None:
    """Install what is missing with the host's package manager; the host's facts afterwards (None: it
    failed)."""
    packager = facts.get("packager", "none")
    if packager not in _INSTALL:
        return facts
    names = [_DNF_PACKAGES.get(name, name) if packager == "dnf" else name for name in missing]
    if packager == "apt" and "slurmd" in missing:
        names.append("slurm-client")
    done = shell.run_script(
        _INSTALL[packager].format(packages=shlex.join(names)),
        what="install packages",
        check=False,
        timeout=INSTALL_TIMEOUT_SECONDS,
    )
    if done.returncode != 0:
        return None
    return parse_facts(_probe(shell).stdout)


def _probe(shell: NodeShell) -> CommandResult:
    return shell.run_script(_PROBE_SCRIPT, what="host probe", check=False)


def base_inventory(facts: Mapping[str, str], *, skew: float | None) -> dict[str, Any]:
    """What the probe script found (the agent adds CPUs, memory, GPUs and links)."""
    return {
        "hostname": facts.get("hostname", ""),
        "os": facts.get("os"),
        "kernel": facts.get("kernel"),
        "arch": facts.get("arch"),
        "init": "systemd" if facts.get("init") == "systemd" else "none",
        "packages": {
            program: facts.get(f"have_{program}") == "1"
            for program in (*REQUIRED_PROGRAMS, *ACCOUNTING_PROGRAMS)
        },
        "clock_skew_seconds": skew,
        "ssh_client_ip": facts.get("ssh_client") or None,  # whom a cluster's firewall lets in to manage it
        "mariadb_in_use": facts.get("mariadb_in_use") == "1",
        "gpu_count": 0,
        "gpus": [],
        "interconnect": "none",
        "interconnect_devices": [],
    }


def inventory_from_agent(reading: Mapping[str, Any]) -> dict[str, Any]:
    """CPUs, memory, GPUs and fabric devices from one node agent reading."""
    host = reading.get("host") or {}
    devices = (reading.get("gpus") or {}).get("devices") or []
    layout = reading.get("cpu_layout") or {}  # an older agent's reading has none
    gpu_cores = layout.get("gpu_cores") or {}
    gpus = [
        {
            "index": d["index"],
            "name": d.get("name"),
            "uuid": d.get("uuid"),
            "memory_total_mib": d.get("memory_total_mib"),
            "cores": gpu_cores.get(d.get("pci_bus_id")),
        }
        for d in devices
    ]
    ports = ((reading.get("links") or {}).get("infiniband")) or []
    names = sorted({port["device"] for port in ports})
    if any(name.startswith(("efa", "rdmap")) for name in names):
        interconnect = "efa"
    elif any(port.get("link_layer") == "InfiniBand" for port in ports):
        interconnect = "infiniband"
    else:
        interconnect = "none"
    models = sorted({gpu["name"] for gpu in gpus if gpu["name"]})
    return {
        "cpu_count": host.get("cpu_count"),
        "sockets": layout.get("sockets"),
        "cores_per_socket": layout.get("cores_per_socket"),
        "threads_per_core": layout.get("threads_per_core"),
        "memory_mib": host.get("memory_total_mib"),
        "gpu_count": len(gpus),
        "gpus": gpus,
        "gpu_model": ", ".join(models) or None,
        "interconnect": interconnect,
        "interconnect_devices": names if interconnect != "none" else [],
    }
