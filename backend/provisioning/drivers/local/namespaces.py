"""Nodes as Linux namespaces on this machine: the hardware layer of the `local` driver.

A node is what a container runtime or one of kind's nodes is, made with the kernel's own tools: a network
namespace (`ip netns`, cabled by a veth to its cluster's bridge) plus PID, mount, UTS and IPC namespaces
held by the node's init (pid 1 inside, a reaper), a root file system of its own (`pivot_root`: the host's
programs and libraries read-only, its own `/etc` overlay, `/var`, `/run`, `/tmp`, `/var/tmp`, `/dev`,
`/dev/shm`, `/proc`), and a cgroup v2 group where the host has one; a cluster's nodes run in a user
namespace of its own (`IdMap`), so root of a node is an unprivileged host uid. A tenant in the node sees
and signals its node's processes only and reaches no path of the host's but those bound in; releasing the
node kills its init (which ends every process of the PID namespace, double-forked and user-namespaced ones
included) and the cgroup (`cgroup.kill`). The driver enters a node only to boot it (init, sshd); it is
configured over SSH like any server (`backend.provisioning.node_config`).

Everything here is derived from names: the same cluster key and node name always give the same
namespace, bridge, veth, cgroup and directory, and the init is found from the system (pid 1 of a PID
namespace inside the node's network namespace), so a crashed backend finds what it made and removes it whole.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import ipaddress
import os
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

NETNS_PREFIX = "gpc-"  # every namespace this driver makes, so `ip netns list` shows what is ours
_COMMAND_TIMEOUT_SECONDS = 30.0
_BOOT_SECONDS = 30.0
# The only environment a node's init and daemons start with: nothing of the backend's (its settings and
# secrets) enters a node.
NODE_ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8")
# pid 1 of a node: reaps the orphans its PID namespace hands it, and ends (taking the node with it) on
# SIGTERM. Python, since every host of this driver has it and it is a dozen lines; ~8 MB per node.
# With `user-namespace`, it first makes the node's user namespace and a mount namespace it owns, waits for
# the host to write the maps (`LocalNode._map_user_namespace`) and becomes that namespace's root: in one
# process, as a program exec'd before the maps exist would lose its capabilities there.
_INIT = """import os, signal, sys
if sys.argv[1:] == ["user-namespace"]:
    import ctypes, time
    if ctypes.CDLL(None, use_errno=True).unshare(0x10000000 | 0x00020000) != 0:
        raise SystemExit("unshare: " + os.strerror(ctypes.get_errno()))
    while not open("/proc/self/uid_map").read().strip():
        time.sleep(0.01)
    os.setgroups([])
    os.setresgid(0, 0, 0)
    os.setresuid(0, 0, 0)
open("/var/.booted", "w").close()
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD, signal.SIGTERM})
while signal.sigwait({signal.SIGCHLD, signal.SIGTERM}) == signal.SIGCHLD:
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass
"""
# The devices of a node's /dev (name, major, minor), as a container runtime gives them.
_DEVICES = (("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8), ("urandom", 1, 9),
            ("tty", 5, 0))


class LocalHostError(RuntimeError):
    """A host command failed; the message names the command and what it printed."""


@dataclass(frozen=True)
class IdMap:
    """A node's user namespace: its uids and gids 0 to `count - 1` are host ids from `base` (so its root
    is an unprivileged host uid, and `sudo` in the node gives no power on the host), and `kept` (the
    cluster's user) is itself, so the user's files in the shared home and volumes keep their owner."""

    base: int
    kept: int
    count: int = 65536

    @property
    def table(self) -> str:
        """The lines of the namespace's `uid_map` (and `gid_map`)."""
        return f"0 {self.base} {self.count}\n{self.kept} {self.kept} 1\n"

    def host_id(self, inside: int) -> int:
        return self.base + inside


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
    """One cluster's share of the host: a bridge on `subnet` (the host takes its first address), a state
    directory under `root`, and the exports its nodes mount their volumes from."""

    def __init__(self, root: Path, cluster_key: str, subnet: str) -> None:
        self.root = root
        self.key = cluster_key
        self.subnet = ipaddress.IPv4Network(subnet)
        self.dir = root / "clusters" / cluster_key
        self.bridge = f"gpcb{_short(cluster_key)}"

    @property
    def gateway(self) -> str:
        """The host's address on the cluster bridge: how this machine reaches the nodes."""
        return str(next(self.subnet.hosts()))

    @property
    def management(self) -> str:
        """The backend's own address on the bridge (the subnet's second), where its provisioning SSH comes
        from: a cloud's management network. Nodes accept the backend's SSH from it and nothing else; what
        they send to it (or to `gateway`) is the security groups' to decide like any destination."""
        return str(self.subnet.network_address + 2)

    @property
    def exports(self) -> Path:
        """The volumes this cluster may mount, one bind each (`export_volumes`): a shared mount whose
        changes reach every node (each node holds a slave copy), so a node sees its cluster's volumes and
        no other."""
        return self.dir / "exports"

    @property
    def images_store(self) -> Path:
        """The cluster's container image store (`backend.provisioning.images`: bundles and the names
        pointing to them), bound read-only into every node (`node_setup.node_binds`)."""
        return self.dir / "images"

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
        """Create the bridge, directories and the exports mount (idempotent)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        # The host's only to change (it removes and unmounts what is in it); nodes pass through to the
        # volumes they are given by name (a node's root is not the host's), never list it.
        self.exports.mkdir(exist_ok=True)
        self.exports.chmod(0o711)
        self.images_store.mkdir(mode=0o755, exist_ok=True)  # before any node binds it
        if not _is_mountpoint(self.exports):
            run(["mount", "--bind", str(self.exports), str(self.exports)])
        run(["mount", "--make-shared", str(self.exports)])
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

    def export_volumes(self, volumes: Iterable[Path]) -> None:
        """Export exactly `volumes` (host directories, named by volume id) to the cluster's nodes: binds
        added for new ones, removed for the rest (a node's own mount of a volume outlives its export until
        the node unmounts it)."""
        wanted = {source.name: source for source in volumes}
        for name, source in wanted.items():
            target = self.exports / name
            target.mkdir(exist_ok=True)
            if not _is_mountpoint(target):
                run(["mount", "--bind", str(source), str(target)])
        for entry in self.exports.iterdir():
            if entry.name not in wanted:
                _unmount(entry)
                entry.rmdir()

    def node(self, name: str, address: str, instance: str | None = None) -> LocalNode:
        return LocalNode(self, name, address, instance)

    def node_names(self) -> list[str]:
        """Instance names of this cluster's nodes that exist now (their network namespaces)."""
        prefix = f"{NETNS_PREFIX}{self.key}-"
        listed = run(["ip", "netns", "list"], check=False).stdout.splitlines()
        return sorted(line.split()[0].removeprefix(prefix) for line in listed if line.startswith(prefix))

    def down(self) -> None:
        """Remove every node, the bridge, the exports and the state directory: nothing of the cluster
        remains (the volumes' own directories stay: they are the volumes')."""
        for instance in self.node_names():
            LocalNode(self, instance, "0.0.0.0").destroy()
        run(["ip", "link", "del", self.bridge], check=False)
        if self.exports.exists():
            _unmount(self.exports)  # never remove a tree that still has a volume bound into it
        shutil.rmtree(self.dir, ignore_errors=True)


class LocalNode:
    """One node: its namespaces, cgroup and directory, named after the cluster key and the node's instance
    name (the node name by default; a replacement with the same node name is another instance, so the one
    being released and the one booting never share anything). The hostname is `name`."""

    def __init__(self, cluster: LocalCluster, name: str, address: str, instance: str | None = None) -> None:
        self.cluster = cluster
        self.name = name
        self.address = address
        self.instance = instance or name
        self.netns = f"{NETNS_PREFIX}{cluster.key}-{self.instance}"
        self.dir = cluster.dir / "nodes" / self.instance
        self.veth = f"gpcv{_short(cluster.key, self.instance)}"
        cgroups = _cgroup_root()
        self.cgroup = cgroups / self.netns if cgroups is not None else None
        # A systemd node's cgroup in the host's `name=systemd` hierarchy, where the host has one.
        legacy = _cgroup_root(legacy_systemd=True)
        self.systemd_cgroup = legacy / self.netns if legacy is not None else None

    def exists(self) -> bool:
        """Booted whole and running: its init lives (a node half made when the backend died lacks the
        marker written last; a powered-off node has its files but no init)."""
        return (Path("/run/netns", self.netns).exists() and (self.dir / "made").exists()
                and self.init_pid() is not None)

    def create(self, binds: Iterable[Bind], *, systemd: bool = False, id_map: IdMap | None = None) -> None:
        """Boot the node: namespaces, cabling, its init and root file system (idempotent). Its directory
        (the node's disk) is kept from an earlier boot. With `id_map`, the node's processes run in a user
        namespace of their own (`_boot_script`): its root is root of the node only. With `systemd`,
        systemd is the init, as on most servers (the tests' stand-ins for servers of one's own): it brings
        up no unit of its own (`SYSTEMD_TARGET`) and has a cgroup namespace and hierarchies of its own
        (`_SYSTEMD_CGROUPS`)."""
        if systemd and id_map is not None:
            raise ValueError("a systemd node has no user namespace of its own")
        if self.exists():
            return
        (self.dir / "made").unlink(missing_ok=True)
        self._remove_namespaces()  # a half-made or powered-off node: start its machine over
        run(["ip", "netns", "add", self.netns])
        run(["ip", "link", "add", self.veth, "type", "veth", "peer", "name", "eth0", "netns", self.netns])
        run(["ip", "link", "set", self.veth, "master", self.cluster.bridge, "up"])
        prefix = self.cluster.subnet.prefixlen
        # A node replaced in place has its predecessor's address behind a new MAC: announce it when eth0
        # comes up (gratuitous ARP), or the host and the other nodes keep sending to the old MAC until
        # their neighbour entries expire (~30 s; a repaired node's sshd then "did not answer").
        run(["ip", "netns", "exec", self.netns, "sysctl", "-qw", "net.ipv4.conf.eth0.arp_notify=1"])
        if id_map is not None:  # the node's root has no privilege over the host-made network namespace
            run(["ip", "netns", "exec", self.netns, "sysctl", "-qw", "net.ipv4.ip_unprivileged_port_start=0"])
        # No default route: a node reaches its cluster's subnet (and the host on the bridge), nothing else.
        for argv in (["addr", "add", f"{self.address}/{prefix}", "dev", "eth0"],
                     ["link", "set", "eth0", "up"], ["link", "set", "lo", "up"]):
            run(["ip", "-n", self.netns, *argv])
        run(["ip", "neigh", "flush", "to", self.address, "dev", self.cluster.bridge], check=False)
        self._lay_out_disk()
        if systemd:
            _write_systemd_etc(self.dir / "etc", self.name)
        if id_map is not None:
            for entry in self.dir.iterdir():
                if entry.name not in _HOST_ONLY:
                    shift_ids(entry, id_map)
        booted = self.dir / "var" / ".booted"
        booted.unlink(missing_ok=True)
        (self.dir / "init.pid").unlink(missing_ok=True)
        if self.cgroup is not None:
            self.cgroup.mkdir(parents=True, exist_ok=True)
        # The init's parent (`unshare`) stays on the host, waiting for it; both end together.
        boot = ["nsenter", f"--net=/run/netns/{self.netns}", "unshare", "--pid", "--fork", "--mount", "--uts",
                "--ipc", *(["--cgroup"] if systemd else []), "--propagation", "slave",
                "sh", "-ec", _boot_script(self, binds, systemd=systemd, id_map=id_map)]
        if systemd and self.systemd_cgroup is not None:  # joined before its cgroup namespace is made
            self.systemd_cgroup.mkdir(parents=True, exist_ok=True)
            join = str(self.systemd_cgroup / "cgroup.procs")
            boot = ["sh", "-c", 'echo $$ > "$0" && exec "$@"', join, *boot]
        self._detached(boot, self.console / "boot.out")
        deadline = time.monotonic() + _BOOT_SECONDS
        while not (booted.exists() and self.init_pid() is not None):
            # The boot script is the init to be: once it recorded its pid, its end means boot failed.
            died = (self.dir / "init.pid").exists() and self.init_pid() is None
            if died or time.monotonic() > deadline:
                log = (self.console / "boot.out").read_text(errors="replace")[-800:]
                raise LocalHostError(f"node {self.name} did not boot: {log or 'no output'}")
            if id_map is not None:
                self._map_user_namespace(id_map)
            time.sleep(0.01)
        (self.dir / "made").touch()

    @property
    def console(self) -> Path:
        """The host's logs of the node's boot and of the daemons it starts in it (`start_daemon`): a
        directory of the host's that no node sees, like a server's console."""
        return self.dir / "console"

    def _map_user_namespace(self, id_map: IdMap) -> None:
        """Write the maps of the user namespace the booting init made (once it made it): the boot waits
        for them, as a process may not map more than its own uid into its own namespace."""
        pid = self.init_pid()
        if pid is None or _user_namespace(pid) == _user_namespace(os.getpid()):
            return
        if Path(f"/proc/{pid}/uid_map").read_text().strip():
            return
        for table in ("gid_map", "uid_map"):  # the boot goes on once it sees its uid_map
            Path(f"/proc/{pid}/{table}").write_text(id_map.table)

    def init_pid(self) -> int | None:
        """The host pid of the node's init: pid 1 of its PID namespace, inside the node's network namespace
        (the pid its boot recorded, checked against the system, so a reused pid is never taken for it)."""
        try:
            pid = int((self.dir / "init.pid").read_text())
            status = Path(f"/proc/{pid}/status").read_text()
            in_node = os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat(f"/run/netns/{self.netns}").st_ino
        except (OSError, ValueError):
            return None
        nspids = next((line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")), [])
        return pid if in_node and len(nspids) > 1 and nspids[-1] == "1" else None

    def enter_argv(self, argv: Sequence[str], *, user: str | None = None) -> list[str]:
        """The host command that runs `argv` inside this node, in its root (as `user` when given)."""
        pid = self.init_pid()
        if pid is None:
            raise LocalHostError(f"node {self.name} is not running")
        prefix = ["nsenter", "-t", str(pid), "--net", "--mount", "--uts", "--ipc", "--pid", "--root", "--wd"]
        if _user_namespace(pid) != _user_namespace(os.getpid()):
            prefix.insert(3, "--user")  # as the node's root, not the host's
        if user is not None:
            prefix += ["runuser", "-u", user, "--"]
        return [*prefix, *argv]

    def load_firewall(self, script: str) -> None:
        """Load an nftables ruleset (`node_config.firewall`) into the node's network namespace, from the
        host: the namespace is the host's, so no one in the node, its root included, can change it."""
        run(["ip", "netns", "exec", self.netns, "nft", "-f", "-"], input_text=script)

    def start_daemon(self, argv: Sequence[str]) -> None:
        """Start a long-running process inside the node, detached from the backend (not our child, so it
        survives a backend restart and is never left a zombie of ours), in the node's cgroup, with the
        node's environment only. Its output goes to the node's log directory. Does nothing when that
        program already runs in the node."""
        command = argv[list(argv).index("--") + 1:] if argv[0] == "runuser" else argv
        program = Path(command[0]).name
        if self.running(program):
            return
        self._detached(self.enter_argv(argv), self.console / f"{program}.out")

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
        """Every process in the node's network namespace (the init's host-side parent included)."""
        done = run(["ip", "netns", "pids", self.netns], check=False)
        return [int(pid) for pid in done.stdout.split()] if done.returncode == 0 else []

    def stop_processes(self, *, grace_seconds: float = 5.0) -> None:
        """SIGTERM the node's processes but its init, then end the node: SIGKILL to the init (the kernel
        then kills every process of its PID namespace), to its cgroup (`cgroup.kill`) and to anything left
        in its network namespace. Its files stay (a powered-off node keeps its disk)."""
        init = self.init_pid()
        keep = {init, _parent(init)} if init is not None else set()
        deadline = time.monotonic() + grace_seconds
        for pid in set(self.pids()) - keep:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        while set(self.pids()) - keep and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.cgroup is not None and (self.cgroup / "cgroup.kill").exists():
            (self.cgroup / "cgroup.kill").write_text("1")
        for pid in [*([init] if init is not None else []), *self.pids()]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5.0
        while (self.pids() or self._cgroup_populated()) and time.monotonic() < deadline:
            time.sleep(0.05)

    def destroy(self) -> None:
        """Stop its processes and remove its namespaces, veth, cgroup and directory (idempotent)."""
        self._remove_namespaces()
        for cgroup in (self.cgroup, self.systemd_cgroup):
            if cgroup is not None and cgroup.exists():
                _remove_cgroup(cgroup)
        shutil.rmtree(self.dir, ignore_errors=True)

    def _remove_namespaces(self) -> None:
        self.stop_processes()
        if Path("/run/netns", self.netns).exists():
            run(["ip", "netns", "del", self.netns], check=False)
        run(["ip", "link", "del", self.veth], check=False)

    def _cgroup_populated(self) -> bool:
        events = self.cgroup / "cgroup.events" if self.cgroup is not None else None
        return events is not None and events.exists() and "populated 1" in events.read_text()

    def _lay_out_disk(self) -> None:
        """The node's disk on the host: its /etc overlay's layers, its /var and root's home."""
        for sub in ("etc", "etc-work", "etc-lower", "console", "rootfs", "var/lib", "var/log", "var/spool",
                    "var/cache", "var/tmp"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        for link, target in (("var/run", "/run"), ("var/lock", "/run/lock")):
            if not (self.dir / link).is_symlink():
                (self.dir / link).symlink_to(target)

    def _detached(self, argv: Sequence[str], log_path: Path) -> None:
        """Run `argv` detached (`setsid --fork`), with the node's environment only, in the node's cgroup."""
        join = str(self.cgroup / "cgroup.procs") if self.cgroup is not None else ""
        with log_path.open("ab") as log:
            subprocess.run(["setsid", "--fork", "env", "-i", *NODE_ENV, "sh", "-c",
                            '[ -z "$1" ] || echo 0 > "$1"; shift; exec "$@"', "join", join, *argv],
                           stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, check=True,
                           timeout=_COMMAND_TIMEOUT_SECONDS)


# slurmd 22.05 refuses to start without the host's cgroup mounts (v1 or v2, not hybrid): the host's,
# read-only (a node's processes are held by its PID namespace and cgroup instead). Less the cgroup2 mount a
# hybrid host has beside its v1 controllers: crun refuses to run in a hybrid hierarchy ("cgroups in hybrid
# mode not supported"), and nothing in a node uses it.
_HOST_CGROUPS = (
    "if mountpoint -q /sys/fs/cgroup; then mount --rbind /sys/fs/cgroup sys/fs/cgroup; "
    "if mountpoint -q sys/fs/cgroup/unified; then umount sys/fs/cgroup/unified; fi; "
    "for m in $(findmnt -rn -o TARGET -R \"$PWD/sys/fs/cgroup\"); do mount -o remount,bind,ro \"$m\"; "
    "done; fi"
)
# systemd as a node's init: the host's v1 controllers read-only as above (Slurm 22.05 refuses the hybrid
# layout a systemd of the host's kind would otherwise show it), and the two hierarchies systemd writes to, a
# cgroup2 at `unified` and its own `name=systemd`, mounted anew in the node's cgroup namespace: their root
# is the node's cgroup in each (`LocalNode.cgroup`, `.systemd_cgroup`), so it sees and moves nothing of the
# host's. On a host with cgroup2 alone, that one, anew.
_SYSTEMD_CGROUPS = (
    "if [ \"$(stat -f -c %T /sys/fs/cgroup)\" = cgroup2fs ]; then "
    "mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 sys/fs/cgroup; else "
    "mount --rbind /sys/fs/cgroup sys/fs/cgroup; "
    "for m in $(findmnt -rn -o TARGET -R \"$PWD/sys/fs/cgroup\"); do "
    "case $m in */sys/fs/cgroup/unified|*/sys/fs/cgroup/systemd) umount \"$m\";; "
    "*) mount -o remount,bind,ro \"$m\";; esac; done; "
    "mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 sys/fs/cgroup/unified; "
    "mount -t cgroup -o nosuid,nodev,noexec,none,name=systemd cgroup sys/fs/cgroup/systemd; fi"
)
SYSTEMD = "/usr/lib/systemd/systemd"
# The unit a systemd node boots into: nothing but itself (not the host's default target, whose services,
# enabled on this machine's /etc, are no node's).
SYSTEMD_TARGET = "gpucloud-node.target"


def _write_systemd_etc(etc_upper: Path, hostname: str) -> None:
    """The node's boot target and hostname (systemd sets the one of /etc/hostname), in the upper layer of
    its /etc."""
    (etc_upper / "hostname").write_text(f"{hostname}\n")
    units = etc_upper / "systemd" / "system"
    units.mkdir(parents=True, exist_ok=True)
    (units / SYSTEMD_TARGET).write_text(
        "[Unit]\nDescription=A gpucloud node booted with systemd\nDefaultDependencies=no\n")


def _boot_script(node: LocalNode, binds: Iterable[Bind], *, systemd: bool = False,
                 id_map: IdMap | None = None) -> str:
    """What the node's init runs before it becomes the reaper: record its host pid, set the hostname, build
    the node's root in a tmpfs (the host's programs read-only, its own /etc, /var, /run, /tmp, /var/tmp,
    /dev, /dev/shm, /proc, /sys, then `binds`), switch to it with `pivot_root` and let go of the host's.

    With `id_map`, the root is built for the node's user namespace and entered last: what the boot makes
    in it is made as the namespace's root (`setpriv`), tmpfs and devpts are its, and the host's `/usr`
    and `/etc` are bound idmapped (`idmapped.py`), without `nosuid` (a set-uid program gives the
    namespace's root only). Then the init makes the user namespace with a mount namespace it owns (a copy
    whose mounts the node's root cannot take apart to see under), waits for the host to write its maps
    (`LocalNode._map_user_namespace`) and becomes the namespace's root."""
    q = shlex.quote
    node_dir = node.dir
    if id_map is None:
        as_node = owned = ""
        bind_dir = "mkdir $d; mount --bind /$d $d; mount -o remount,bind,ro,nosuid,nodev $d"
        etc_lower = "/etc"
        bind_system = "mount --bind /usr usr; mount -o remount,bind,ro,nosuid,nodev usr"
    else:
        as_node = f"setpriv --reuid={id_map.base} --regid={id_map.base} --clear-groups "
        owned = f",uid={id_map.base},gid={id_map.base}"
        helper = Path(__file__).with_name("idmapped.py")
        idmap = f"{q(sys.executable)} -I -S {q(str(helper))} proc {q(id_map.table)}"
        bind_dir = f"{as_node}mkdir $d; {idmap} /$d $d"
        etc_lower = str(node_dir / "etc-lower")
        bind_system = f"{idmap} /usr usr /etc {q(etc_lower)}"
    devpts_group = id_map.host_id(5) if id_map is not None else 5
    script = [
        # Written aside and renamed: the host reads it while it waits.
        f"read -r pid _ < /proc/self/stat; echo \"$pid\" > {q(str(node_dir / 'init.pid.new'))}",
        f"mv {q(str(node_dir / 'init.pid.new'))} {q(str(node_dir / 'init.pid'))}",
        f"hostname {q(node.name)}",
        f"mount -t tmpfs -o mode=0755,nosuid,nodev{owned} rootfs {q(str(node_dir / 'rootfs'))}",
        f"cd {q(str(node_dir / 'rootfs'))}; root=$(pwd -P)",
        f"{as_node}mkdir usr etc var run tmp dev proc sys home root mnt",
        "mount -t proc -o nosuid,nodev,noexec proc proc",
        # Merged /usr: /bin, /lib... are links into it; elsewhere they are directories of their own.
        "for d in bin sbin lib lib32 lib64 libx32; do if [ -L /$d ]; then "
        f"{as_node}ln -s \"$(readlink /$d)\" $d; elif [ -d /$d ]; then {bind_dir}; fi; done",
        bind_system,
        f"mount -t overlay overlay -o lowerdir={q(etc_lower)},upperdir={q(str(node_dir / 'etc'))},"
        f"workdir={q(str(node_dir / 'etc-work'))} etc",
        f"mount --bind {q(str(node_dir / 'var'))} var",
        f"mount -t tmpfs -o mode=1777,nosuid,nodev{owned} tmpfs var/tmp",
        f"mount -t tmpfs -o mode=0755,nosuid,nodev{owned} tmpfs run; {as_node}mkdir -m 1777 run/lock",
        f"mount -t tmpfs -o mode=1777,nosuid,nodev{owned} tmpfs tmp",
        f"mount -t tmpfs -o mode=0755,nosuid,noexec{owned} tmpfs dev",
        *(f"mknod -m 666 dev/{name} c {major} {minor}" for name, major, minor in _DEVICES),
        f"{as_node}mkdir dev/pts dev/shm",
        f"mount -t devpts -o newinstance,ptmxmode=0666,mode=0620,gid={devpts_group} devpts dev/pts",
        f"{as_node}ln -s pts/ptmx dev/ptmx; {as_node}ln -s /proc/self/fd dev/fd",
        f"{as_node}ln -s /proc/self/fd/0 dev/stdin; {as_node}ln -s /proc/self/fd/1 dev/stdout; "
        f"{as_node}ln -s /proc/self/fd/2 dev/stderr",
        f"mount -t tmpfs -o mode=1777,nosuid,nodev{owned} tmpfs dev/shm",
        "mount -t sysfs -o ro,nosuid,nodev,noexec sysfs sys",
        _SYSTEMD_CGROUPS if systemd else _HOST_CGROUPS,
        *(_bind_command(bind, as_node) for bind in binds),
        # The host's umount, through the old root: the node's (idmapped) is set-uid to the node's root.
        "mkdir .host; pivot_root . .host; cd /; /.host/usr/bin/umount -l /.host; rmdir /.host",
    ]
    if systemd:
        script += [": > /var/.booted",
                   f"exec env container=gpucloud {SYSTEMD} --system --unit={SYSTEMD_TARGET}"]
    else:
        script.append(f"exec /usr/bin/python3 -I -S -c {q(_INIT)}{' user-namespace' if id_map else ''}")
    return "\n".join(script)


def _bind_command(bind: Bind, as_node: str = "") -> str:
    """Bind a host path into the node's root being built (the current directory, `$root`), with what is
    mounted below it (the volumes exported to the cluster before the node boots); a missing target is made
    by `as_node` (the prefix that runs a command as the node's root). The target is resolved first and
    must stay in the node's root: its `/etc` and `/var` are the node's root's to fill with links, and one
    leading out (to a path of the host's) fails the boot instead of being followed by the host's root."""
    source, target = shlex.quote(str(bind.source)), shlex.quote(f".{bind.target}")
    make_target = f'{as_node}mkdir -p "$t"' if bind.source.is_dir() else f'{as_node}touch "$t"'
    remount = '; mount -o remount,bind,ro "$t"' if bind.read_only else ""
    escape = shlex.quote(f"boot: {bind.target} leads out of the node's root")
    # Relative again once checked: the node's root may not pass through the directories above its own.
    # One command per step, so that any failing fails the boot (`sh -e`).
    return (f't=$(realpath -m -- {target}); case $t in "$root"/*) ;; *) echo {escape} >&2; exit 1;; esac; '
            f't=".${{t#"$root"}}"; [ -e "$t" ] || {make_target}; mount --rbind {source} "$t"{remount}')


# What of a node's directory is the host's alone: never bound into the node, never given to its namespace.
_HOST_ONLY = frozenset({"rootfs", "etc-work", "etc-lower", "console", "xid.log", "init.pid", "init.pid.new",
                        "made"})


def shift_ids(path: Path, id_map: IdMap, *, recursive: bool = True) -> None:
    """Give a node's user namespace what the host made for it at and under `path` (at it only, unless
    `recursive`): an owner or group below the map's count (root, the system users) becomes the
    namespace's (`base` + id); the cluster user's stay. Idempotent, so a node booted before it had a
    namespace keeps its disk. Symbolic links are changed, never followed, and a file linked from elsewhere
    (more than one link) is left alone."""
    if not recursive or path.is_symlink() or not path.is_dir():
        _shift(str(path), id_map)
        return
    for directory, dirnames, filenames in os.walk(path):
        _shift(directory, id_map)
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(directory, d))]:
            _shift(os.path.join(directory, name), id_map)


def _shift(path: str, id_map: IdMap) -> None:
    info = os.lstat(path)
    if info.st_nlink > 1 and not stat.S_ISDIR(info.st_mode):
        return
    uid = id_map.host_id(info.st_uid) if info.st_uid < id_map.count else info.st_uid
    gid = id_map.host_id(info.st_gid) if info.st_gid < id_map.count else info.st_gid
    if (uid, gid) == (info.st_uid, info.st_gid):
        return
    os.lchown(path, uid, gid)
    special = stat.S_IMODE(info.st_mode) & (stat.S_ISUID | stat.S_ISGID)
    if special and stat.S_ISREG(info.st_mode):  # chown clears them
        os.chmod(path, stat.S_IMODE(info.st_mode))


def _user_namespace(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/user").st_ino
    except OSError:
        return None


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _remove_cgroup(cgroup: Path) -> None:
    """Remove a cgroup and those below it (a systemd node's units), deepest first; a busy one stays."""
    for path in sorted((p for p in cgroup.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        with contextlib.suppress(OSError):
            path.rmdir()
    with contextlib.suppress(OSError):
        cgroup.rmdir()


@functools.cache
def _cgroup_root(*, legacy_systemd: bool = False) -> Path | None:
    """Where node cgroups go: `gpucloud/` in the host's cgroup v2 hierarchy, or None without one (then a
    node's PID namespace alone ends its processes); with `legacy_systemd`, in its v1 `name=systemd` one."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        kind, options = fields[fields.index("-") + 1], fields[-1].split(",")
        if (kind == "cgroup" and "name=systemd" in options) if legacy_systemd else kind == "cgroup2":
            root = Path(fields[4]) / "gpucloud"
            try:
                root.mkdir(exist_ok=True)
            except OSError:
                return None
            return root if (root / "cgroup.procs").exists() else None
    return None


def _unmount(path: Path) -> None:
    """Unmount `path` and everything below it; raise if anything stays mounted there."""
    if _is_mountpoint(path):
        run(["umount", "-R", "-l", str(path)], check=False)
    if _is_mountpoint(path):
        raise LocalHostError(f"{path} is still mounted; unmount it before removing it")


def _is_mountpoint(path: Path) -> bool:
    return path.exists() and run(["mountpoint", "-q", str(path)], check=False).returncode == 0
