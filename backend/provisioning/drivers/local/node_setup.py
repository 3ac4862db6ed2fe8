"""Booting a local node, what a hypervisor and cloud-init do for a server, and nothing after it.

Boot gives a node its own disk (an overlay of the host's `/etc`, empty state directories for its
daemons, a private `/tmp`), its stand-in GPUs and kernel log, and an sshd that lets the backend in as
root with its provisioning key (from the host's bridge address only) and the cluster's users in with
theirs. Everything after that (the cluster's user, home, keys, volumes, munge, Slurm) is configured over
SSH by `backend.provisioning.node_config`, as on any server: `node_shell` is how the driver reaches a node.

Per cluster, the host keeps the secrets and identities it hands to nodes: the SSH host key (one per
cluster; the backend's known_hosts pins it), the munge key (0600, pushed to each node over SSH), the
`ubuntu` uid (a host uid of the cluster's own: no other cluster, host account or subordinate range has
it, so the kernel keeps one cluster's processes and files from another's), the ids of the nodes' user
namespace (`cluster_id_map`, the same rule), and the shared home directory.
"""

from __future__ import annotations

import contextlib
import grp
import hashlib
import os
import pwd
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path

from backend.fabric.slurm import SlurmHost
from backend.provisioning.drivers.local.namespaces import Bind, IdMap, LocalCluster, LocalNode, run, shift_ids
from backend.provisioning.node_config import containers
from backend.provisioning.node_config.ssh import SshShell, SshTarget, ensure_identity

SSH_USER = "ubuntu"
# Nodes here have no GPUs, no cgroup tree delegated to slurmd and less than the shape sold.
LOCAL_SLURM_HOST = SlurmHost(gpu_device_dir="/var/lib/slurm/gpus", cgroups=False, shape_from_config=True,
                             health_check_program=None, run_dir="/run/slurm",
                             cred_expire_seconds=30)  # nodes on one machine launch in milliseconds
# The node's stand-in kernel log of XIDs (the host's `node.dir/xid.log`; `fault xid` writes it).
KERNEL_LOG = "/var/log/slurm/kernel-xid.log"
KERNEL_LOG_COMMAND = f"cat {KERNEL_LOG}"
BOOT_DIR = "/etc/ssh/gpucloud"  # what boot hands the node: sshd's config, host key, root's key
# The host's storage a node mounts from (the cluster's home, the volumes), as a file server's exports:
# bound at boot where the node's own /tmp cannot hide them (the data directory may be under /tmp).
EXPORTS = "/etc/gpucloud/exports"
_SSHD_CONFIG = """\
# sshd of a gpucloud local node; written by the local driver at boot.
Port 22
ListenAddress 0.0.0.0
HostKey {boot}/ssh_host_ed25519_key
AuthorizedKeysFile {boot}/authorized_keys/%u /etc/ssh/authorized_keys/%u
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
UsePAM no
PidFile /run/sshd/sshd.pid
Subsystem sftp internal-sftp
# A single-node cluster's container: its user's sessions run in it (node_config.containers, LOGIN_CONF).
Include /etc/ssh/gpucloud-login*.conf
# The backend configures the node as root, from its addresses on the cluster bridge only.
Match Address {gateway},{management}
    PermitRootLogin prohibit-password
"""


# Cluster users' host uids (and gids, the same number): far above the host's accounts and the subordinate
# ranges `useradd` hands out (100000 + 65536 per user), below the 32-bit limit of every tool.
CLUSTER_UIDS = range(2_000_000, 3_000_000)
# Where each cluster's user namespace starts (`IdMap.base`; its nodes' root and system users): 65536 host
# ids of its own, above the cluster users' uids and below 2^31 (signed 32-bit ids in some tools).
NAMESPACE_SIZE = 65536
NAMESPACE_BASES = range(1_000_000_000, 2_000_000_000, NAMESPACE_SIZE)


def cluster_uid(cluster: LocalCluster) -> int:
    """The `ubuntu` user's uid (and gid) in this cluster, chosen once and never given to another cluster."""
    return _recorded(cluster, "uid", "uids", CLUSTER_UIDS, 1)


def cluster_id_map(cluster: LocalCluster) -> IdMap:
    """The user namespace of the cluster's nodes: its own host ids (chosen once, never given to another
    cluster), the cluster's user kept as itself."""
    base = _recorded(cluster, "namespace", "namespaces", NAMESPACE_BASES, NAMESPACE_SIZE)
    return IdMap(base=base, kept=cluster_uid(cluster), count=NAMESPACE_SIZE)


def _recorded(cluster: LocalCluster, name: str, table: str, candidates: range, span: int) -> int:
    recorded = cluster.dir / name
    if recorded.exists():
        return int(recorded.read_text())
    chosen = _allocate(cluster.root / table, candidates, span, cluster.key)
    _replace(recorded, lambda path: path.write_text(str(chosen)))
    return chosen


def _allocate(allocations: Path, candidates: range, span: int, owner: str) -> int:
    """The first free id of `candidates` whose `span` ids no host account, group or subordinate range
    has: each allocation is a file named after it under `allocations`, made with O_EXCL (two clusters
    booting at once never share one) and kept after its cluster goes (files it left on a volume are
    never owned by a later cluster's)."""
    allocations.mkdir(mode=0o700, exist_ok=True)
    taken = _host_ids()
    for candidate in candidates:
        if any(start < candidate + span and candidate < stop for start, stop in taken):
            continue
        try:
            descriptor = os.open(allocations / str(candidate), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        with os.fdopen(descriptor, "w") as handle:
            handle.write(owner)
        return candidate
    raise RuntimeError(f"every id of {candidates.start}-{candidates.stop - 1} in {allocations} is taken")


def _host_ids() -> list[tuple[int, int]]:
    """The ids this host uses, as [start, stop) ranges: its accounts, groups and subordinate id ranges."""
    taken = [(entry.pw_uid, entry.pw_uid + 1) for entry in pwd.getpwall()]
    taken += [(entry.gr_gid, entry.gr_gid + 1) for entry in grp.getgrall()]
    for table in (Path("/etc/subuid"), Path("/etc/subgid")):
        lines = table.read_text().splitlines() if table.exists() else []
        for fields in (line.split(":") for line in lines):
            if len(fields) == 3 and fields[1].isdigit() and fields[2].isdigit():
                taken.append((int(fields[1]), int(fields[1]) + int(fields[2])))
    return taken


def identity(root: Path) -> Path:
    """The backend's provisioning key (private: 0600 in a 0700 directory under the data dir)."""
    return ensure_identity(root / "ssh")


def prepare_cluster(cluster: LocalCluster, id_map: IdMap | None = None) -> None:
    """The cluster's boot files on the host (idempotent): SSH host key, sshd config, root's authorized
    key, the backend's known_hosts, the munge key and the shared home directory; with `id_map`, for nodes
    in that user namespace."""
    key = identity(cluster.root)
    ssh = cluster.dir / "ssh"
    if not (ssh / "ssh_host_ed25519_key").exists():
        (ssh / "authorized_keys").mkdir(parents=True, exist_ok=True)
        for stale in ssh.glob("new.*"):
            stale.unlink()
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"gpucloud {cluster.key}",
             "-f", str(ssh / "new.ssh_host_ed25519_key")])
        (ssh / "new.ssh_host_ed25519_key.pub").rename(ssh / "ssh_host_ed25519_key.pub")
        (ssh / "new.ssh_host_ed25519_key").rename(ssh / "ssh_host_ed25519_key")  # last: marks it done
    _write(ssh / "sshd_config", _SSHD_CONFIG.format(boot=BOOT_DIR, gateway=cluster.gateway,
                                                      management=cluster.management))
    _write(ssh / "authorized_keys" / "root", key.with_name("id_ed25519.pub").read_text())
    host_key = (ssh / "ssh_host_ed25519_key.pub").read_text().split()
    _write(ssh / "known_hosts", f"{host_key_alias(cluster)} {host_key[0]} {host_key[1]}\n")
    munge_key = cluster.dir / "munge.key"
    if not munge_key.exists():
        def make_munge_key(path: Path) -> None:
            path.touch(mode=0o600)
            path.write_bytes(secrets.token_bytes(1024))

        _replace(munge_key, make_munge_key)
    home = cluster.dir / "home"
    home.mkdir(mode=0o755, exist_ok=True)
    if id_map is not None:  # the home's top is the nodes' root's: it makes the users' homes there
        shift_ids(home, id_map, recursive=False)


def volumes_dir(root: Path) -> Path:
    """Where the shared volumes live on the host, one directory each."""
    return root / "volumes"


def published_host_key(cluster: LocalCluster) -> str | None:
    """The host key every node of the cluster (the jumphost too) presents, as `ssh-ed25519 AAAA...` for
    the API to publish; None before `prepare_cluster` made it."""
    public = cluster.dir / "ssh" / "ssh_host_ed25519_key.pub"
    if not public.exists():
        return None
    key_type, blob = public.read_text().split()[:2]
    return f"{key_type} {blob}"


def host_key_alias(cluster: LocalCluster) -> str:
    return f"gpucloud-{cluster.key}"


def munge_key(cluster: LocalCluster) -> bytes:
    return (cluster.dir / "munge.key").read_bytes()


def node_shell(cluster: LocalCluster, name: str, address: str) -> SshShell:
    """A root shell on the node over SSH (one multiplexed connection per node, see node_config/ssh.py)."""
    target = SshTarget(name, address, 22, cluster.dir / "ssh" / "known_hosts", host_key_alias(cluster),
                       source_address=cluster.management)
    return SshShell(target, identity(cluster.root), control_dir(cluster))


def control_dir(cluster: LocalCluster) -> Path:
    """Where the cluster's SSH connection masters keep their sockets (0700)."""
    return cluster.root / "ssh" / "ctl" / hashlib.sha256(cluster.key.encode()).hexdigest()[:8]


def node_binds(node: LocalNode) -> list[Bind]:
    """What boot binds into a node's root: root's home, state directories for its daemons (their owners
    are set when the node is configured), its stand-in GPUs and kernel log, the boot files of its sshd,
    and the storage it mounts from (configuration mounts the home and volumes from `EXPORTS`: the
    cluster's home and the volumes exported to the cluster, no other), and the cluster's container
    images, read-only (`node_config.containers`)."""
    node_dir = node.dir
    for sub in ("lib", "log", "run", "munge-run", "munge-lib", "munge-log"):
        (node_dir / sub).mkdir(parents=True, exist_ok=True)
    (node_dir / "sshd").mkdir(mode=0o755, exist_ok=True)
    (node_dir / "root").mkdir(mode=0o700, exist_ok=True)
    (node_dir / "xid.log").touch()
    _copy_boot_files(node.cluster.dir / "ssh", node_dir / "ssh")
    _stand_in_gpus(node_dir / "lib" / "gpus")
    # Root's only, like a file server's mounts: made in the node's own /etc (the upper layer of its overlay).
    (node_dir / "etc" / "gpucloud").mkdir(parents=True, mode=0o700, exist_ok=True)
    return [
        Bind(node.cluster.dir / "home", f"{EXPORTS}/home"),
        Bind(node.cluster.exports, f"{EXPORTS}/volumes"),
        Bind(node.cluster.images_store, containers.STORE_MOUNT, read_only=True),
        Bind(node_dir / "ssh", BOOT_DIR, read_only=True),
        Bind(node_dir / "lib", "/var/lib/slurm"),
        Bind(node_dir / "log", "/var/log/slurm"),
        Bind(node_dir / "xid.log", KERNEL_LOG, read_only=True),
        Bind(node_dir / "run", "/run/slurm"),
        Bind(node_dir / "munge-run", "/run/munge"),
        Bind(node_dir / "munge-lib", "/var/lib/munge"),
        Bind(node_dir / "munge-log", "/var/log/munge"),
        Bind(node_dir / "sshd", "/run/sshd"),
        # root's own home, as on a fresh server: not the host's (whose shell startup files would run
        # at every command the backend sends, and whose keys are not the node's).
        Bind(node_dir / "root", "/root"),
    ]


def start_sshd(node: LocalNode) -> None:
    """The node's sshd, started as its init would (the one daemon boot runs in the node)."""
    node.start_daemon(["/usr/sbin/sshd", "-D", "-e", "-f", f"{BOOT_DIR}/sshd_config"])


def _copy_boot_files(cluster_ssh: Path, node_ssh: Path) -> None:
    """The node's copy of its sshd's files (config, host key, root's authorized key), made at each boot:
    the node's root owns it where the node has a user namespace (`namespaces.shift_ids`), the cluster's
    stay the host's (nodes booted before namespaces read them as they are)."""
    shutil.rmtree(node_ssh, ignore_errors=True)
    (node_ssh / "authorized_keys").mkdir(parents=True)
    for name in ("sshd_config", "ssh_host_ed25519_key", "ssh_host_ed25519_key.pub", "authorized_keys/root"):
        shutil.copy2(cluster_ssh / name, node_ssh / name)


def _stand_in_gpus(directory: Path, count: int = 8) -> None:
    """Character devices with NVIDIA's major number, never opened: Slurm 22.05 needs a file per GPU. The
    directory is in the node's `/var/lib/slurm`, which the node's root may change: made through a
    descriptor that follows no link, so the host's root never makes a device where a link points."""
    if directory.is_symlink() or (directory.exists() and not directory.is_dir()):
        directory.unlink()
    directory.mkdir(exist_ok=True)
    handle = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for index in range(count):
            with contextlib.suppress(FileExistsError):
                os.mknod(f"nvidia{index}", 0o666 | 0o020000, os.makedev(195, index), dir_fd=handle)
    finally:
        os.close(handle)


def _replace(path: Path, make: Callable[[Path], object]) -> None:
    """Create a file whole or not at all (a backend killed half-way leaves no half-made key)."""
    partial = path.with_name(f"new.{path.name}")
    partial.unlink(missing_ok=True)
    make(partial)
    partial.rename(path)


def _write(path: Path, content: str) -> None:
    """Replace a file's content in place (bind mounts pin the inode, so never rename over it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != content:
        with path.open("w") as handle:
            handle.write(content)
