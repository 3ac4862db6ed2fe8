"""The node transport: how arguments are quoted, how files are written, how failures read, and the real
OpenSSH implementation against a real sshd on this machine's loopback (multiplexed, strict host keys)."""

from __future__ import annotations

import pwd
import shlex
import socket
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from backend.provisioning.node_config.shell import CommandResult, NodeCommandError, NodeFile, NodeShell
from backend.provisioning.node_config.ssh import SshShell, SshTarget, close_all, ensure_identity


class LocalShell(NodeShell):
    """A node that is this machine: the command line goes to `sh -c`, as a remote sshd would run it."""

    def __init__(self, name: str = "node-7") -> None:
        self.name = name
        self.commands: list[str] = []

    def _execute(self, remote_command: str, stdin: bytes | None, timeout: float) -> CommandResult:
        self.commands.append(remote_command)
        done = subprocess.run(["sh", "-c", remote_command], input=stdin or b"", capture_output=True,
                              timeout=timeout, check=False)
        return CommandResult(done.returncode, done.stdout.decode(), done.stderr.decode())


def test_node_shell_passes_arguments_through_the_remote_shell_unchanged() -> None:
    shell = LocalShell()
    awkward = ["a b", "it's", '"quoted"', "$HOME", "`id`", "; rm -rf /", "*", "", "new\nline"]
    done = shell.run(["printf", "%s\\0", *awkward])
    assert done.stdout.split("\0")[:-1] == awkward
    assert shell.commands == [shlex.join(["printf", "%s\\0", *awkward])]
    assert shell.run(["cat"], input="from stdin").stdout == "from stdin"


def test_node_shell_writes_files_whole_with_owner_and_mode_in_one_round_trip(tmp_path: Path) -> None:
    shell = LocalShell()
    nobody = pwd.getpwnam("nobody")
    secret = bytes(range(256)) + b"\nGPUCLOUD_EOF\n"  # binary, and a line like the here-document's end
    shell.write_files([NodeFile(str(tmp_path / "etc" / "munge.key"), secret, 0o400, "nobody"),
                       NodeFile(str(tmp_path / "etc" / "slurm.conf"), b"ClusterName=x\n")])
    key = tmp_path / "etc" / "munge.key"
    assert key.read_bytes() == secret
    assert (key.stat().st_mode & 0o777, key.stat().st_uid) == (0o400, nobody.pw_uid)
    assert (tmp_path / "etc" / "slurm.conf").read_text() == "ClusterName=x\n"
    assert (tmp_path / "etc" / "slurm.conf").stat().st_mode & 0o777 == 0o644
    assert len(shell.commands) == 1 and "munge.key" not in shell.commands[0]  # the content went on stdin
    inode = (tmp_path / "etc" / "slurm.conf").stat().st_ino
    shell.write_file(str(tmp_path / "etc" / "slurm.conf"), "ClusterName=x\n")  # the same content: untouched
    assert (tmp_path / "etc" / "slurm.conf").stat().st_ino == inode
    shell.write_file(str(tmp_path / "etc" / "slurm.conf"), "ClusterName=y\n")  # replaced, no temp file left
    assert (tmp_path / "etc" / "slurm.conf").stat().st_ino != inode
    assert sorted(p.name for p in (tmp_path / "etc").iterdir()) == ["munge.key", "slurm.conf"]
    assert (tmp_path / "etc" / "slurm.conf").read_text() == "ClusterName=y\n"


def test_node_shell_errors_name_the_node_the_command_and_its_stderr() -> None:
    shell = LocalShell("train-1")
    with pytest.raises(NodeCommandError) as failed:
        shell.run(["sh", "-c", "echo 'slurmd: fatal: no gres.conf' >&2; exit 3"])
    command = shlex.join(["sh", "-c", "echo 'slurmd: fatal: no gres.conf' >&2; exit 3"])
    assert str(failed.value) == f"train-1: `{command}` exited 3: slurmd: fatal: no gres.conf"
    assert (failed.value.node, failed.value.returncode) == ("train-1", 3)
    with pytest.raises(NodeCommandError, match=r"^train-1: `start slurmd` exited 127: .*no-such-program"):
        shell.run_script("no-such-program --now\necho never", what="start slurmd")
    assert shell.run(["false"], check=False).returncode == 1  # unchecked: the caller reads the status


# The real transport ---------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[tuple[SshShell, Path]]:
    """A real sshd on 127.0.0.1 that lets the provisioning key in as root; (shell, known_hosts)."""
    identity = ensure_identity(tmp_path / "backend-ssh")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "host_key")],
                   check=True)
    (tmp_path / "authorized_keys").write_text(identity.with_name("id_ed25519.pub").read_text())
    port = _free_port()
    (tmp_path / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {tmp_path}/host_key\n"
        f"AuthorizedKeysFile {tmp_path}/authorized_keys\nPermitRootLogin prohibit-password\nUsePAM no\n"
        f"StrictModes no\nPidFile {tmp_path}/sshd.pid\n")
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation directory
    with (tmp_path / "sshd.log").open("wb") as log:
        server = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(tmp_path / "sshd_config")],
                                  stdout=log, stderr=subprocess.STDOUT)
    host_key = (tmp_path / "host_key.pub").read_text().split()
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"node-alias {host_key[0]} {host_key[1]}\n")
    shell = SshShell(SshTarget("node-3", "127.0.0.1", port, known_hosts, "node-alias"), identity,
                     tmp_path / "ctl")
    try:
        deadline = time.monotonic() + 60  # a ceiling: sshd starts at once unless the machine is busy
        while subprocess.run(["ssh-keyscan", "-p", str(port), "127.0.0.1"], capture_output=True,
                             check=False).returncode != 0:
            assert time.monotonic() < deadline, "sshd did not start"
            time.sleep(0.05)
        yield shell, known_hosts
    finally:
        close_all(tmp_path / "ctl")
        server.terminate()
        server.wait(timeout=10)


def test_ssh_shell_runs_commands_and_writes_files_over_one_multiplexed_connection(
    sshd: tuple[SshShell, Path], tmp_path: Path
) -> None:
    shell, _ = sshd
    identity = tmp_path / "backend-ssh" / "id_ed25519"
    assert identity.stat().st_mode & 0o777 == 0o600 and identity.parent.stat().st_mode & 0o777 == 0o700
    assert shell.run(["printf", "%s|", "a b", "it's", "$HOME"]).stdout == "a b|it's|$HOME|"
    assert shell.control_path.is_socket() and shell.control_path.parent.stat().st_mode & 0o777 == 0o700
    for _ in range(5):
        shell.run(["true"])
    # Multiplexed: one connection (one key exchange, one login) carried every command.
    assert (tmp_path / "sshd.log").read_text().count("Accepted publickey for root") == 1
    shell.write_file(str(tmp_path / "written" / "gres.conf"), "Name=gpu Count=8\n", mode=0o640)
    written = tmp_path / "written" / "gres.conf"
    assert written.read_text() == "Name=gpu Count=8\n" and written.stat().st_mode & 0o777 == 0o640
    with pytest.raises(NodeCommandError, match=r"^node-3: `ls /no/such/dir` exited 2: ls: cannot access"):
        shell.run(["ls", "/no/such/dir"])
    argv = shell.ssh_argv("true")
    for option in ("BatchMode=yes", "StrictHostKeyChecking=yes", "ControlMaster=auto", "IdentityAgent=none",
                   "HostKeyAlias=node-alias", f"UserKnownHostsFile={tmp_path / 'known_hosts'}"):
        assert option in argv
    assert _masters(shell)
    shell.close()  # `ssh -O exit`: the master is gone at once, not after ControlPersist
    assert not shell.control_path.exists() and not _masters(shell)


def test_ssh_shell_keeps_its_control_socket_short_under_a_deep_directory(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60) / "ctl"
    target = SshTarget("node-5", "127.0.0.1", 22, tmp_path / "known_hosts")
    shell = SshShell(target, tmp_path / "id", deep)
    # ssh binds "<ControlPath>.<17 random characters>": all of it must fit a unix socket path (108 bytes).
    assert len(str(shell.control_path)) + 18 <= 108
    assert shell.control_path.parent.parent.stat().st_mode & 0o777 == 0o700  # private to this user
    assert SshShell(target, tmp_path / "id", deep).control_path == shell.control_path  # stable: reusable
    close_all(deep)
    assert not shell.control_path.exists()


def _masters(shell: SshShell) -> list[str]:
    ps = subprocess.run(["ps", "-ewwo", "args"], capture_output=True, text=True, check=True).stdout
    return [line for line in ps.splitlines() if str(shell.control_path) in line and "[mux]" in line]


def test_ssh_shell_refuses_an_unknown_host_key_and_names_what_it_could_not_reach(
    sshd: tuple[SshShell, Path], tmp_path: Path
) -> None:
    shell, known_hosts = sshd
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    wrong = tmp_path / "wrong_known_hosts"
    wrong.write_text("node-alias " + " ".join((tmp_path / "other_key.pub").read_text().split()[:2]) + "\n")
    impostor = SshShell(SshTarget("node-3", "127.0.0.1", shell.target.port, wrong, "node-alias"),
                        shell.identity, tmp_path / "ctl2")
    with pytest.raises(NodeCommandError, match=r"^node-3: `true` exited 255: ssh root@127.0.0.1 -p \d+: .*"
                                               r"Host key verification failed\.$"):
        impostor.run(["true"], check=False)  # not reaching the node fails even unchecked
    nobody_home = SshShell(SshTarget("node-4", "127.0.0.1", _free_port(), known_hosts, "node-alias"),
                           shell.identity, tmp_path / "ctl3")
    unreachable = r"^node-4: `true` exited 255: ssh root@127.0.0.1 -p \d+: .*refused"
    with pytest.raises(NodeCommandError, match=unreachable):
        nobody_home.run(["true"])


def test_provisioning_key_is_made_once_and_whole_when_asked_for_at_once(tmp_path: Path) -> None:
    directory = tmp_path / "backend-ssh"
    with ThreadPoolExecutor(max_workers=4) as pool:  # operations of four clusters starting together
        keys = set(pool.map(lambda _: ensure_identity(directory), range(4)))
    [key] = keys
    public = subprocess.run(["ssh-keygen", "-y", "-f", str(key)], capture_output=True, text=True, check=True)
    assert public.stdout.split()[:2] == (directory / "id_ed25519.pub").read_text().split()[:2]
    assert sorted(p.name for p in directory.iterdir()) == ["id_ed25519", "id_ed25519.pub"]
    assert key.stat().st_mode & 0o777 == 0o600 and directory.stat().st_mode & 0o777 == 0o700
