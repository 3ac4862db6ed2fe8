"""`NodeShell` over OpenSSH: how the backend reaches a node as root to configure it.

One multiplexed connection per node (`ControlMaster`): the first command pays for the key exchange,
the next ones cost a few milliseconds each. The master runs detached from the backend, so it survives
a backend restart and is reused by the next one (its socket path is derived from the node); it exits on
its own after `CONTROL_PERSIST_SECONDS` idle, when the node's sshd goes away, or at `close()` (`ssh -O exit`,
called when a node is torn down). Host keys are checked strictly against the file the caller gives (the
keys it generated or recorded), and nothing is asked interactively (`BatchMode`).

The provisioning key is a secret of the backend: its file is 0600 in a 0700 directory, it is given to
ssh by path, and no message here prints it.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from backend.provisioning.node_config.shell import CommandResult, NodeShell

CONTROL_PERSIST_SECONDS = 60
CONNECT_TIMEOUT_SECONDS = 5
SSH_UNREACHABLE = 255  # ssh's own exit status: no connection (a remote command's status is passed on)
_IDENTITY_LOCK = threading.Lock()  # operations of several clusters may ask for the key at once
# A unix socket path has 108 bytes at most, and ssh adds a 17-character suffix while it binds the master's.
_SOCKET_PATH_MAX = 108 - 18


@dataclass(frozen=True)
class SshTarget:
    """Where a node's sshd answers and how to trust it."""

    name: str  # the node's name, for messages
    host: str
    port: int
    known_hosts: Path  # the host keys to accept, nothing else
    host_key_alias: str | None = None  # the name the key is recorded under in known_hosts
    user: str = "root"
    source_address: str | None = None  # connect from this local address (a management network's)
    # A server's first contact (a host pool's new host): record the key it presents in `known_hosts` instead
    # of refusing it; a different key later is refused all the same.
    accept_new_host_key: bool = False
    # Reach the host through this bastion (`ssh -W`), `(user or None, host, port)`, with the same key; its
    # host key is recorded in and checked against `known_hosts` under its own name (`jump_alias`), accepted
    # anew when `accept_new_jump_key` (nothing recorded yet).
    jump: tuple[str | None, str, int] | None = None
    accept_new_jump_key: bool = False
    sudo: bool = False  # `user` is not root: every command runs under `sudo -n`
    multiplex: bool = True  # one connection master per node (off: a connection per command)


class SshShell(NodeShell):
    def __init__(self, target: SshTarget, identity: Path, control_dir: Path) -> None:
        self.name = target.name
        self.target = target
        self.identity = identity
        self.control_dir = socket_directory(control_dir)
        digest = hashlib.sha256(f"{target.user}@{target.host}:{target.port}".encode()).hexdigest()[:16]
        self.control_path = self.control_dir / digest

    def ssh_argv(self, remote_command: str) -> list[str]:
        """The ssh command line that runs `remote_command` on the node."""
        target = self.target
        options = self._common_options(target.accept_new_host_key)
        if target.multiplex:
            options.update({"ControlMaster": "auto", "ControlPath": str(self.control_path),
                            "ControlPersist": str(CONTROL_PERSIST_SECONDS)})
        if target.host_key_alias is not None:
            options["HostKeyAlias"] = target.host_key_alias
        if target.jump is not None:
            options["ProxyCommand"] = shlex.join(self._jump_argv(*target.jump))
        argv = ["ssh", "-F", "none", "-i", str(self.identity), "-p", str(target.port)]
        if target.source_address is not None:
            argv += ["-b", target.source_address]
        for key, value in options.items():
            argv += ["-o", f"{key}={value}"]
        if target.sudo:
            remote_command = f"sudo -n -- sh -c {shlex.quote(remote_command)}"
        return [*argv, f"{target.user}@{target.host}", "--", remote_command]

    def _common_options(self, accept_new: bool) -> dict[str, str]:
        return {
            "BatchMode": "yes", "IdentitiesOnly": "yes", "IdentityAgent": "none",
            "PasswordAuthentication": "no",
            "StrictHostKeyChecking": "accept-new" if accept_new else "yes",
            "UserKnownHostsFile": str(self.target.known_hosts), "GlobalKnownHostsFile": "/dev/null",
            "ConnectTimeout": str(CONNECT_TIMEOUT_SECONDS),
            "ServerAliveInterval": "5", "ServerAliveCountMax": "3", "LogLevel": "ERROR",
        }

    def _jump_argv(self, user: str | None, host: str, port: int) -> list[str]:
        """The ProxyCommand that reaches the target through the bastion (ssh -W), checked like the target."""
        argv = ["ssh", "-F", "none", "-i", str(self.identity), "-p", str(port)]
        for key, value in self._common_options(self.target.accept_new_jump_key).items():
            argv += ["-o", f"{key}={value}"]
        argv += ["-o", f"HostKeyAlias={jump_alias(host, port)}"]
        return [*argv, "-W", "%h:%p", f"{user or self.target.user}@{host}"]

    def _execute(self, remote_command: str, stdin: bytes | None, timeout: float) -> CommandResult:
        _private_dir(self.control_dir)
        try:
            done = subprocess.run(self.ssh_argv(remote_command), input=stdin or b"", capture_output=True,
                                  timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return CommandResult(-1, "", f"no answer over ssh within {timeout:.0f} s", reached=False)
        stdout, stderr = done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
        if done.returncode == SSH_UNREACHABLE:  # ssh's own failure: say where it could not get to
            where = f"ssh {self.target.user}@{self.target.host} -p {self.target.port}"
            said = " ".join(line.strip() for line in stderr.splitlines() if line.strip())[-300:] or "failed"
            return CommandResult(done.returncode, stdout, f"{where}: {said}", reached=False)
        return CommandResult(done.returncode, stdout, stderr)

    def close(self) -> None:
        """Stop this node's connection master, if any (it would otherwise linger `ControlPersist`)."""
        if self.control_path.exists():
            _exit_master(self.control_path, f"{self.target.user}@{self.target.host}")


def jump_alias(host: str, port: int) -> str:
    """The name a bastion's host key is recorded under in known_hosts."""
    return f"jump-{host}-{port}"


def socket_directory(control_dir: Path) -> Path:
    """Where the masters' sockets for `control_dir` live: itself, or a short private stand-in under the temp
    directory when its path is too long for a unix socket (a deep data directory)."""
    if len(str(control_dir)) + 1 + 16 <= _SOCKET_PATH_MAX:
        return control_dir
    digest = hashlib.sha256(str(control_dir).encode()).hexdigest()[:16]
    owned = Path(tempfile.gettempdir()) / f"gpucloud-ssh-{os.getuid()}"
    _private_dir(owned)
    if owned.is_symlink() or owned.stat().st_uid != os.getuid():  # another user's planted directory
        raise PermissionError(f"{owned} is not a directory of this user: remove it")
    return owned / digest


def close_all(control_dir: Path) -> None:
    """Stop every connection master whose socket is in `control_dir`, and remove the directory."""
    control_dir = socket_directory(control_dir)
    for socket in control_dir.glob("*") if control_dir.exists() else []:
        _exit_master(socket, "gpucloud-node")
    shutil.rmtree(control_dir, ignore_errors=True)


def _exit_master(control_path: Path, destination: str) -> None:
    subprocess.run(["ssh", "-F", "none", "-o", f"ControlPath={control_path}", "-O", "exit", destination],
                   capture_output=True, timeout=10, check=False)
    control_path.unlink(missing_ok=True)


def ensure_identity(directory: Path, comment: str = "gpucloud provisioning") -> Path:
    """The backend's provisioning key pair in `directory` (made once; 0600 in a 0700 directory)."""
    _private_dir(directory)
    key = directory / "id_ed25519"
    with _IDENTITY_LOCK:
        if not key.exists():
            _make_identity(directory, key, comment)
    return key


def _make_identity(directory: Path, key: Path, comment: str) -> None:
    """A new pair, whole or not at all: the private key is renamed into place last."""
    for stale in directory.glob("new.id_ed25519*"):
        stale.unlink()
    partial = directory / "new.id_ed25519"
    argv = ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(partial)]
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"ssh-keygen failed: {done.stderr.strip()}")
    partial.chmod(0o600)
    partial.with_name("new.id_ed25519.pub").rename(directory / "id_ed25519.pub")
    partial.rename(key)  # last: marks the pair done


def _private_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.stat().st_mode & 0o077:
        os.chmod(path, 0o700)

