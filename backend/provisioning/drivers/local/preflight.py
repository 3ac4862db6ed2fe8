"""What the `local` driver needs from this machine, checked before it touches anything.

Root and Linux (namespaces, bridges, mounts), Debian's daemons and tools (slurmdbd and MariaDB for
accounting included: the driver does not run Slurm without them), and an address range that no
route of the host already covers: the driver puts a bridge with an address of every cluster subnet on
the host, and a developer machine on 10.x must not lose its own network to it.
"""

from __future__ import annotations

import glob
import ipaddress
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass

from backend.provisioning.drivers.local.namespaces import run

# Programs the driver runs, and the Debian package that ships each one.
REQUIRED_PROGRAMS = {
    "ip": "iproute2", "nsenter": "util-linux", "unshare": "util-linux", "setsid": "util-linux",
    "runuser": "util-linux", "mountpoint": "util-linux", "findmnt": "util-linux", "setpriv": "util-linux",
    "sudo": "sudo",  # the cluster's user is root of its nodes (their user namespace)
    "slurmctld": "slurmctld", "slurmd": "slurmd", "scontrol": "slurm-client", "munged": "munge",
    "sshd": "openssh-server", "ssh-keygen": "openssh-client",
    # Configuring a node over SSH: the client here, the tools the configuration scripts run on the node.
    "ssh": "openssh-client", "useradd": "passwd", "pgrep": "procps",
    "nft": "nftables",  # security groups: each node's firewall
    # Accounting on the controller (required: slurm.conf keeps accounting in slurmdbd, and slurmctld does
    # not start without it): slurmdbd, MariaDB (its server package brings the client tools) and sacctmgr.
    "slurmdbd": "slurmdbd", "sacctmgr": "slurm-client", "mariadbd": "mariadb-server",
    "mariadb-install-db": "mariadb-server", "mariadb-admin": "mariadb-server", "mariadb": "mariadb-server",
}
PMIX_LIBRARY = "/usr/lib/*/pmix2/lib/libpmix.so*"
_SBIN = ("/usr/sbin", "/sbin", "/usr/bin", "/bin")
# Bridges this driver made (`gpcb<hash>`): their routes are ours, not a conflict.
OWN_BRIDGE_PREFIX = "gpcb"


@dataclass(frozen=True)
class HostProblem:
    what: str
    fix: str


def missing_packages() -> list[str]:
    """Debian packages whose programs are not installed here (sorted, unique)."""
    path = os.pathsep.join([os.environ.get("PATH", ""), *_SBIN])
    missing = {package for program, package in REQUIRED_PROGRAMS.items()
               if shutil.which(program, path=path) is None}
    if not glob.glob(PMIX_LIBRARY):  # MpiDefault=pmix: Debian's plugin loads this library at every step
        missing.add("libpmix-dev")
    return sorted(missing)


def install_command(packages: Iterable[str]) -> str:
    return f"apt-get install -y --no-install-recommends {' '.join(sorted(packages))}"


def host_routes() -> list[tuple[str, str]]:
    """(destination, the route line) of every IPv4 route of the host but the default one."""
    routes = []
    for line in run(["ip", "-4", "route", "show", "table", "all"], check=False).stdout.splitlines():
        destination = line.split()[0] if line.split() else ""
        if destination in ("default", "broadcast", "local", "multicast", "unreachable", "prohibit",
                           "blackhole", "throw", "nat") or not destination:
            continue
        routes.append((destination, line.strip()))
    return routes


def conflicting_route(cidr: str, routes: Iterable[tuple[str, str]] | None = None, *,
                      own_bridge: str | None = None) -> str | None:
    """A host route overlapping `cidr`, or None. Routes on `own_bridge` (the cluster's own) never
    conflict; without one, routes on any bridge of this driver's are taken for its own clusters."""
    network = ipaddress.IPv4Network(cidr)
    for destination, line in host_routes() if routes is None else routes:
        device = line.split(" dev ", 1)[1].split()[0] if " dev " in line else ""
        if device == own_bridge or (own_bridge is None and device.startswith(OWN_BRIDGE_PREFIX)):
            continue
        try:
            other = ipaddress.IPv4Network(destination, strict=False)
        except ValueError:
            continue
        if other.is_loopback:
            continue
        if network.overlaps(other):
            return line
    return None


def address_ranges() -> list[str]:
    """The blocks the local driver takes cluster subnets from (see drivers.local_address_range)."""
    from backend.domain.catalog import default_catalog
    from backend.provisioning.drivers import local_address_range

    override = local_address_range()
    if override is not None:
        return [override]
    catalog = default_catalog()
    return sorted({catalog.subnet_block(f.region, f.name)[0] for f in catalog.fabrics})


def host_problems(address_ranges: Iterable[str]) -> list[HostProblem]:
    """Everything that keeps the local driver from running here, each with its fix."""
    problems = []
    if not sys.platform.startswith("linux"):
        return [HostProblem(f"the local driver needs Linux (this is {sys.platform})",
                            "run the backend on Linux, or use GPUCLOUD_DRIVER=simulated")]
    if os.geteuid() != 0:
        problems.append(HostProblem("the local driver needs root (namespaces, bridges, mounts)",
                                    "run `gpucloud-backend serve` as root"))
    missing = missing_packages()
    if missing:
        problems.append(HostProblem(f"missing packages: {', '.join(missing)}", install_command(missing)))
    if os.geteuid() == 0 and not idmapped_mounts_work():
        problems.append(HostProblem(
            "the host's /usr and /etc cannot be bound idmapped into a node's user namespace",
            "run the backend on Linux 5.19 or later with / on ext4, xfs or btrfs, or use "
            "GPUCLOUD_DRIVER=simulated"))
    if shutil.which("ip") is not None:
        for cidr in address_ranges:
            route = conflicting_route(cidr)
            if route is not None:
                problems.append(HostProblem(
                    f"the cluster address range {cidr} overlaps the host route `{route}`",
                    "set GPUCLOUD_LOCAL_ADDRESS_RANGE to a block no route covers (e.g. 172.31.0.0/16), "
                    "or remove that route"))
    return problems


def idmapped_mounts_work() -> bool:
    """Whether this host can bind its /usr and /etc idmapped (what every node's boot does), tried in a
    mount namespace of its own that goes with the probe."""
    helper = os.path.join(os.path.dirname(__file__), "idmapped.py")
    with tempfile.TemporaryDirectory(prefix="gpucloud-idmap-") as scratch:
        targets = [os.path.join(scratch, name) for name in ("usr", "etc")]
        for target in targets:
            os.mkdir(target)
        probe = ["unshare", "--mount", "--propagation", "private", sys.executable, "-I", "-S", helper,
                 "/proc", "0 1000000000 65536\n", "/usr", targets[0], "/etc", targets[1]]
        return shutil.which("unshare") is not None and run(probe, check=False).returncode == 0


def report(problems: Iterable[HostProblem]) -> str:
    """One message: what is missing and the exact commands that fix it."""
    return "; ".join(f"{problem.what} (fix: {problem.fix})" for problem in problems)
