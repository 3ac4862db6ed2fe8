"""Nodes as Linux namespaces on this machine: the hardware layer of the `local` driver.

A node is a network namespace (`ip netns`, cabled by a veth to its cluster's bridge) plus a mount and
a UTS namespace kept alive by bind-mounting them onto files, so they outlive every process (the backend
included) and can be entered again after a restart. Its hostname is the node name; its mount namespace
gives it what a machine of its own would have on its disk: its own `/etc` (an overlay of the host's, whose
changes land in the node's directory: the cluster's users exist only inside its nodes), a private /tmp,
and whatever `create` is told to bind (state directories, boot files). The driver enters a node only to
boot it (namespaces, sshd); it is configured over SSH like any server (`backend.provisioning.node_config`).

Everything here is derived from names: the same cluster key and node name always give the same
namespace, bridge and veth, so a crashed backend finds what it made (`exists`) and removes it whole.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

NETNS_PREFIX = "gpc-"  # every namespace this driver makes, so `ip netns list` shows what is ours
_COMMAND_TIMEOUT_SECONDS = 30.0


class LocalHostError(RuntimeError):
    """A host command failed; the message names the command and what it printed."""


@dataclass(frozen=True)
class Bind:
    """A host path mounted at `target` inside a node (read-only where `read_only`)."""

    source: Path
    target: str
    read_only: bool = False


def run(argv: Sequence[str], *, check: bool = True, timeout: float = _COMMAND_TIMEOUT_SECONDS,
        input_text: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run a host command; a failure raises with the command and its output."""
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, input=input_text,
                          check=False)
    if check and done.returncode != 0:
        output = (done.stderr or done.stdout).strip()[-500:]
        raise LocalHostError(f"{' '.join(argv)} exited {done.returncode}: {output}")
    return done


def _short(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:8]


class LocalCluster:
    """One cluster's share of the host: a bridge on `subnet` (the host takes its first address)
    and a state directory under `root`."""

    def __init__(self, root: Path, cluster_key: str, subnet: str) -> None:
        self.root = root
        self.key = cluster_key
        self.subnet = ipaddress.IPv4Network(subnet)
        self.dir = root / "clusters" / cluster_key
        self.ns_dir = root / "ns"
        self.bridge = f"gpcb{_short(cluster_key)}"

    @property
    def gateway(self) -> str:
        """The host's address on the cluster bridge: how this machine reaches the nodes."""
        return str(next(self.subnet.hosts()))

    @property
    def management(self) -> str:
        """The backend's own address on the bridge (the subnet's second), where its provisioning SSH comes
        from: a cloud's management network, which security groups never filter (the host's `gateway`,
        what a user's ssh comes from, they do)."""
        return str(self.subnet.network_address + 2)

    @property
    def mac(self) -> str:
        """The bridge's own MAC, fixed (locally administered, derived from the cluster key). A bridge
        whose MAC was never set takes the lowest MAC of its ports and changes it whenever a node's veth
        comes or goes: the nodes keep the old one for the host's addresses in their neighbour tables, and
        what they send there is dropped until the entry is probed again (STALE, DELAY 5 s, unicast probes:
        a user's ssh from `.1` timed out after a scale while the backend's `.2` had been re-resolved)."""
        digest = hashlib.sha256(f"bridge/{self.key}".encode()).digest()
        return ":".join(f"{byte:02x}" for byte in (0x02, *digest[:5]))

    def up(self) -> None:
        """Create the bridge and directories (idempotent)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        _ensure_private_mount_dir(self.ns_dir)
        if run(["ip", "link", "show", self.bridge], check=False).returncode != 0:
            run(["ip", "link", "add", self.bridge, "address", self.mac, "type", "bridge"])
        elif f" {self.mac} " not in run(["ip", "-o", "link", "show", self.bridge]).stdout:
            run(["ip", "link", "set", self.bridge, "address", self.mac])  # made before its MAC was pinned
        present = run(["ip", "-o", "addr", "show", "dev", self.bridge]).stdout
        # The gateway first: it stays the primary address, the source of this machine's own connections.
        for host in (self.gateway, self.management):
            address = f"{host}/{self.subnet.prefixlen}"
            if f" {address} " not in present:
                run(["ip", "addr", "add", address, "dev", self.bridge])
        run(["ip", "link", "set", self.bridge, "up"])

    def node(self, name: str, address: str, instance: str | None = None) -> LocalNode:
        return LocalNode(self, name, address, instance)

    def node_names(self) -> list[str]:
        """Instance names of this cluster's nodes that exist now (from the namespace files, not memory)."""
        prefix = f"{NETNS_PREFIX}{self.key}-"
        found = {entry.name.removeprefix(prefix).removesuffix(".mnt")
                 for entry in self.ns_dir.glob(f"{prefix}*.mnt")} if self.ns_dir.exists() else set()
        # A node half made when the backend died may have its network namespace and no files yet.
        listed = run(["ip", "netns", "list"], check=False).stdout.splitlines()
        found |= {line.split()[0].removeprefix(prefix) for line in listed if line.startswith(prefix)}
        return sorted(found)

    def down(self) -> None:
        """Remove every node, the bridge and the state directory: nothing of the cluster remains."""
        for instance in self.node_names():
            LocalNode(self, instance, "0.0.0.0").destroy()
        run(["ip", "link", "del", self.bridge], check=False)
        shutil.rmtree(self.dir, ignore_errors=True)


class LocalNode:
    """One node: persistent net, mount and UTS namespaces named after the cluster key and the node's
    instance name (the node name by default; a replacement with the same node name is another instance,
    so the one being released and the one booting never share a namespace). The hostname is `name`."""

    def __init__(self, cluster: LocalCluster, name: str, address: str, instance: str | None = None) -> None:
        self.cluster = cluster
        self.name = name
        self.address = address
        self.instance = instance or name
        self.netns = f"{NETNS_PREFIX}{cluster.key}-{self.instance}"
        self.mnt_file = cluster.ns_dir / f"{self.netns}.mnt"
        self.uts_file = cluster.ns_dir / f"{self.netns}.uts"
        self.dir = cluster.dir / "nodes" / self.instance
        self.veth = f"gpcv{_short(cluster.key, self.instance)}"

    def exists(self) -> bool:
        """Made whole: a node half made when the backend died lacks the marker written last."""
        return (Path("/run/netns", self.netns).exists() and _is_mountpoint(self.mnt_file)
                and (self.dir / "made").exists())

    def create(self, binds: Iterable[Bind]) -> None:
        """Make the namespaces, cable the node and lay out its file system (idempotent)."""
        if self.exists():
            return
        self._remove_namespaces()  # a half-made node from a crash: start it over
        run(["ip", "netns", "add", self.netns])
        run(["ip", "link", "add", self.veth, "type", "veth", "peer", "name", "eth0", "netns", self.netns])
        run(["ip", "link", "set", self.veth, "master", self.cluster.bridge, "up"])
        prefix = self.cluster.subnet.prefixlen
        # A node replaced in place has its predecessor's address behind a new MAC: announce it when eth0
        # comes up (gratuitous ARP), or the host and the other nodes keep sending to the old MAC until
        # their neighbour entries expire (~30 s; a repaired node's sshd then "did not answer").
        run(["ip", "netns", "exec", self.netns, "sysctl", "-qw", "net.ipv4.conf.eth0.arp_notify=1"])
        # No default route: a node reaches its cluster's subnet (and the host on the bridge), nothing else.
        for argv in (["addr", "add", f"{self.address}/{prefix}", "dev", "eth0"],
                     ["link", "set", "eth0", "up"], ["link", "set", "lo", "up"]):
            run(["ip", "-n", self.netns, *argv])
        run(["ip", "neigh", "flush", "to", self.address, "dev", self.cluster.bridge], check=False)
        self.mnt_file.touch()
        self.uts_file.touch()
        etc, work = self.dir / "etc", self.dir / "etc-work"
        for directory in (etc, work):
            directory.mkdir(parents=True, exist_ok=True)
        # /etc first (binds may land in it), then the binds: a source under the host's /tmp must be
        # mounted before the node's own /tmp hides it.
        script = [f"hostname {self.name}",
                  f"mount -t overlay overlay -o lowerdir=/etc,upperdir='{etc}',workdir='{work}' /etc",
                  *(_bind_command(bind) for bind in binds), "mount -t tmpfs -o mode=1777 tmpfs /tmp"]
        run(["unshare", f"--mount={self.mnt_file}", f"--uts={self.uts_file}", "--propagation", "private",
             "sh", "-ec", "; ".join(script)])
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "made").touch()

    def enter_argv(self, argv: Sequence[str], *, user: str | None = None) -> list[str]:
        """The host command that runs `argv` inside this node (as `user` when given)."""
        prefix = ["nsenter", f"--net=/run/netns/{self.netns}", f"--mount={self.mnt_file}",
                  f"--uts={self.uts_file}"]
        if user is not None:
            prefix += ["runuser", "-u", user, "--"]
        return [*prefix, *argv]

    def start_daemon(self, argv: Sequence[str]) -> None:
        """Start a long-running process inside the node, detached from the backend (`setsid --fork`:
        not our child, so it survives a backend restart and is never left a zombie of ours). Its output
        goes to the node's log directory. Does nothing when that program already runs in the node."""
        command = argv[list(argv).index("--") + 1:] if argv[0] == "runuser" else argv
        program = Path(command[0]).name
        if self.running(program):
            return
        with (self.dir / "log" / f"{program}.out").open("ab") as log:
            subprocess.run(["setsid", "--fork", *self.enter_argv(argv)], stdin=subprocess.DEVNULL,
                           stdout=log, stderr=subprocess.STDOUT, check=True, timeout=_COMMAND_TIMEOUT_SECONDS)

    def running(self, program: str) -> list[int]:
        """Pids of `program` running in the node: read from the system, so it holds after a restart."""
        found = []
        for pid in self.pids():
            try:
                if Path(f"/proc/{pid}/comm").read_text().strip() == program[:15]:
                    found.append(pid)
            except OSError:
                continue
        return found

    def pids(self) -> list[int]:
        """Every process in the node's network namespace."""
        done = run(["ip", "netns", "pids", self.netns], check=False)
        return [int(pid) for pid in done.stdout.split()] if done.returncode == 0 else []

    def stop_processes(self, *, grace_seconds: float = 5.0) -> None:
        """SIGTERM every process of the node, then SIGKILL what is left after the grace period."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + (grace_seconds if sig == signal.SIGTERM else 2.0)
            while self.pids() and time.monotonic() < deadline:
                time.sleep(0.1)

    def destroy(self) -> None:
        """Stop its processes and remove its namespaces, veth and directory (idempotent)."""
        self._remove_namespaces()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _remove_namespaces(self) -> None:
        if Path("/run/netns", self.netns).exists():
            self.stop_processes()
            run(["ip", "netns", "del", self.netns], check=False)
        for ns_file in (self.mnt_file, self.uts_file):
            if _is_mountpoint(ns_file):
                run(["umount", str(ns_file)], check=False)
            ns_file.unlink(missing_ok=True)
        run(["ip", "link", "del", self.veth], check=False)


def _bind_command(bind: Bind) -> str:
    kind = "-p" if bind.source.is_dir() else ""
    make_target = f"mkdir {kind} '{bind.target}'" if bind.source.is_dir() else f"touch '{bind.target}'"
    remount = f" && mount -o remount,bind,ro '{bind.target}'" if bind.read_only else ""
    return (f"{{ [ -e '{bind.target}' ] || {make_target}; }} && mount --bind '{bind.source}' '{bind.target}'"
            f"{remount}")


def _is_mountpoint(path: Path) -> bool:
    return path.exists() and run(["mountpoint", "-q", str(path)], check=False).returncode == 0


def _ensure_private_mount_dir(path: Path) -> None:
    """Namespace files must sit on a private mount, or binding a namespace onto them is refused."""
    path.mkdir(parents=True, exist_ok=True)
    if not _is_mountpoint(path):
        run(["mount", "--bind", str(path), str(path)])
    run(["mount", "--make-private", str(path)])
