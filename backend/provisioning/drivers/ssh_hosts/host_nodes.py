"""A cluster's nodes on a pool's hosts: how each host is reached, taken, configured and given back.

The configuration is the local driver's (`backend.provisioning.node_config`, over a root shell): the same
user, keys, hosts file, munge key, Slurm files and daemons. What differs on a server of one's own:

- it is reached as the pool's user with the pool's key (`sudo -n` when that user is not root), through the
  pool's bastion if any, and its host key is the one the pool's check recorded (never accepted anew here);
- it is claimed before anything is written and released after (`footprint.py`): what the cluster adds is
  removed and what the host had is put back;
- sshd reads the cluster user's keys from `AUTHORIZED_KEYS_DIR` through a drop-in (`footprint.SSHD_DROP_IN`),
  beside the user's own `~/.ssh/authorized_keys`, reloaded after an `sshd -t` check;
- daemons are transient systemd units where systemd runs the host, detached processes elsewhere
  (`node_config.configure.OWN`); neither starts at the host's boot: a host restarted by its owner has none
  running until the engine's health watch restarts them (docs/guides/own-hosts.md).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from backend.provisioning.drivers.ssh_hosts import footprint
from backend.provisioning.node_config import configure as node_config
from backend.provisioning.node_config import firewall
from backend.provisioning.node_config.configure import AUTHORIZED_KEYS_DIR
from backend.provisioning.node_config.shell import NodeCommandError, NodeFile, NodeShell
from backend.provisioning.node_config.ssh import SshShell, SshTarget, close_all

# A server's kernel log, where the NVIDIA driver reports XIDs (node_config.read_health parses its lines).
KERNEL_LOG_COMMAND = "dmesg --time-format iso"


class HostTaken(RuntimeError):
    """The host is a node of another cluster (`owner`; the message names it)."""

    def __init__(self, message: str, owner: str) -> None:
        super().__init__(message)
        self.owner = owner


@dataclass(frozen=True)
class PoolLogin:
    """How the backend logs in to every host of a pool."""

    user: str
    private_key: str  # OpenSSH format; on disk only while a `PoolAccess` is open
    jump: tuple[str | None, str, int] | None = None  # the bastion, `(user or None, host, port)`
    jump_known_hosts: str = ""  # the bastion's recorded key lines


@dataclass(frozen=True)
class PoolHost:
    """One host lent to a cluster under a node name."""

    name: str  # the node's name in its cluster
    address: str
    port: int
    host_key: str  # `type base64`, as the pool's check recorded it


class PoolAccess:
    """Root shells on a pool's hosts. The pool's key and the hosts' keys live in `directory` (0600 files in a
    0700 directory) while the access is open; `close` stops the connection masters and removes them."""

    def __init__(self, directory: Path, login: PoolLogin, hosts: Sequence[PoolHost]) -> None:
        self.directory = directory
        self.login = login
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        directory.chmod(0o700)
        self.identity = directory / "id"
        _replace(self.identity, login.private_key.rstrip("\n") + "\n")
        self.known_hosts = directory / "known_hosts"
        lines = [f"{_alias(host)} {host.host_key}\n" for host in hosts]
        _replace(self.known_hosts, "".join(lines) + login.jump_known_hosts)

    def shell(self, host: PoolHost) -> SshShell:
        target = SshTarget(name=host.name, host=host.address, port=host.port, known_hosts=self.known_hosts,
                           host_key_alias=_alias(host), user=self.login.user, jump=self.login.jump,
                           sudo=self.login.user != "root")
        return SshShell(target, self.identity, self.directory / "ctl")

    def close(self) -> None:
        close_all(self.directory / "ctl")
        self.identity.unlink(missing_ok=True)
        self.known_hosts.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # only when nothing else is left there
            self.directory.rmdir()


def _replace(path: Path, content: str) -> None:
    """Write aside (0600) and rename: an ssh of another operation reads the old file or the new, whole."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    partial.touch(mode=0o600)
    partial.write_text(content)
    partial.rename(path)


def _alias(host: PoolHost) -> str:
    return f"pool-host-{host.address}-{host.port}"


def join(shell: NodeShell, cluster_id: str, config: node_config.NodeConfig, firewall_script: str) -> None:
    """Take the host for the cluster and configure it as one of its nodes (all but the Slurm daemons)."""
    claim(shell, cluster_id, config.user)
    node_config.configure(shell, config)
    allow_cluster_keys(shell, config.user)
    firewall.apply(shell, firewall_script)


def start_slurmd(shell: NodeShell, node_name: str) -> None:
    """munged and slurmd, slurmd under the node's name in the cluster (the server keeps its own hostname)."""
    node_config.start_daemons(shell, ["munged"])
    start = node_config.start_command("slurmd", "-N", node_name)
    shell.run_script(f"{node_config.OWN}{footprint.steps_slice_script()}{start}", what="start slurmd")


def claim(shell: NodeShell, cluster_id: str, user: str) -> None:
    done = shell.run_script(footprint.claim_script(cluster_id, user), what="claim the host", check=False)
    if done.returncode == footprint.CLAIMED_ELSEWHERE:
        said = done.stderr.strip()
        raise HostTaken(f"{shell.name}: {said}", said.split()[-1] if said else "")
    if done.returncode != 0:
        raise NodeCommandError(shell.name, "claim the host", done.returncode, done.stderr or done.stdout)


def release(shell: NodeShell, cluster_id: str, user: str) -> None:
    """Give the host back as it was (a no-op when the cluster does not hold it)."""
    shell.run_script(footprint.release_script(cluster_id, user), what="release the host")
    _reload_sshd(shell)


def allow_cluster_keys(shell: NodeShell, user: str) -> None:
    """sshd takes the user's keys from the API's file as well as the user's own, once its config checks."""
    drop_in = (f"# gpucloud: the cluster user's keys (removed when the host leaves its cluster)\n"
               f"Match User {user}\n"
               f"    AuthorizedKeysFile {AUTHORIZED_KEYS_DIR}/%u .ssh/authorized_keys\n")
    shell.write_files([NodeFile(footprint.SSHD_DROP_IN, drop_in.encode(), 0o644)])
    _reload_sshd(shell)


# The listening sshd (its parent is not an sshd): checked with its own command line's config, then reloaded.
_RELOAD_SSHD = """\
set -eu
if [ -d /run/systemd/system ] && systemctl is-active --quiet ssh 2>/dev/null; then
    sshd -t && systemctl reload ssh; exit 0
fi
if [ -d /run/systemd/system ] && systemctl is-active --quiet sshd 2>/dev/null; then
    sshd -t && systemctl reload sshd; exit 0
fi
for pid in $(pgrep -x sshd); do
    parent=$(ps -o comm= -p "$(ps -o ppid= -p "$pid" | tr -d ' ')" 2>/dev/null || true)
    [ "$parent" = sshd ] && continue
    config=$(tr '\\0' '\\n' < /proc/"$pid"/cmdline | sed -n '/^-f$/{n;p}')
    /usr/sbin/sshd -t -f "${config:-/etc/ssh/sshd_config}"
    kill -HUP "$pid"
done
"""


def _reload_sshd(shell: NodeShell) -> None:
    shell.run_script(_RELOAD_SSHD, what="reload sshd")
