"""The one thing node configuration needs from a machine: a root shell on it.

`NodeShell` runs a command (an argv, quoted here) or a script on the node and writes files there. Its
production implementation is OpenSSH (`ssh.py`); anything that can run `sh` as root on a machine can
stand in (a test runs the same scripts in a local `sh`). Scripts travel on standard input, never on a
command line: a file's content (a munge key) is never visible in a process list, here or on the node.
"""

from __future__ import annotations

import base64
import hashlib
import posixpath
import shlex
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

COMMAND_TIMEOUT_SECONDS = 60.0
# Runs the script read from standard input, as a root-only file, with nothing left to read on stdin.
RUN_SCRIPT = ('f=$(mktemp) && trap \'rm -f "$f"\' EXIT && cat > "$f" && sh -e "$f" < /dev/null')


class NodeCommandError(RuntimeError):
    """A command failed on a node; the message names the node, the command and what it printed."""

    def __init__(self, node: str, command: str, returncode: int, stderr: str) -> None:
        self.node, self.command, self.returncode, self.stderr = node, command, returncode, stderr
        said = stderr.strip()[-500:] or "no output"
        super().__init__(f"{node}: `{command}` exited {returncode}: {said}")


@dataclass(frozen=True)
class CommandResult:
    returncode: int
    stdout: str
    stderr: str
    reached: bool = True  # False: the node did not answer (no connection, or no answer in time)


@dataclass(frozen=True)
class NodeFile:
    """A file to put on a node, whole (written aside, then renamed over the old one)."""

    path: str
    content: bytes
    mode: int = 0o644
    owner: str = "root"
    group: str | None = None  # the owner's login group when None


class NodeShell(ABC):
    """A root shell on one node. `name` is the node's name, for messages."""

    name: str

    @abstractmethod
    def _execute(self, remote_command: str, stdin: bytes | None, timeout: float) -> CommandResult:
        """Run `remote_command` (one shell command line) on the node as root."""

    def run(self, argv: Sequence[str], *, input: bytes | str | None = None, check: bool = True,
            timeout: float = COMMAND_TIMEOUT_SECONDS) -> CommandResult:
        """Run one program with its arguments as given (quoted for the node's shell)."""
        command = shlex.join(argv)
        return self._checked(command, command, _bytes(input), check, timeout)

    def run_script(self, script: str, *, what: str, check: bool = True,
                   timeout: float = COMMAND_TIMEOUT_SECONDS) -> CommandResult:
        """Run a `sh -e` script (one round trip, whatever its length); `what` names it in errors."""
        return self._checked(RUN_SCRIPT, what, script.encode(), check, timeout)

    def write_file(self, path: str, content: bytes | str, *, mode: int = 0o644, owner: str = "root",
                   group: str | None = None) -> None:
        self.write_files([NodeFile(path, _bytes(content) or b"", mode, owner, group)])

    def write_files(self, files: Iterable[NodeFile]) -> None:
        files = list(files)
        if files:
            self.run_script(files_script(files), what=f"write {', '.join(f.path for f in files)}")

    def _checked(self, command: str, what: str, stdin: bytes | None, check: bool, timeout: float
                 ) -> CommandResult:
        done = self._execute(command, stdin, timeout)
        if not done.reached or (check and done.returncode != 0):
            raise NodeCommandError(self.name, what, done.returncode, done.stderr or done.stdout)
        return done


def files_script(files: Iterable[NodeFile]) -> str:
    """Shell lines that put each file in place whole: written aside with its owner and mode, then
    renamed over the old one (a reader sees the old file or the new, never half of one). When every
    file already has its content, nothing is written (one `sha256sum` instead of a few programs a file)."""
    files = list(files)
    sums = "".join(f"{hashlib.sha256(file.content).hexdigest()}  {file.path}\n" for file in files)
    directories = sorted({posixpath.dirname(file.path) for file in files})
    lines = [f"if ! sha256sum --check --status 2>/dev/null <<'GPUCLOUD_SUMS'\n{sums}GPUCLOUD_SUMS",
             "then", f"mkdir -p {' '.join(shlex.quote(d) for d in directories)}",
             "(umask 077  # the new content is nobody else's until its mode is set"]
    for file in files:
        path, temporary = shlex.quote(file.path), shlex.quote(f"{file.path}.gpucloud-new")
        owner = shlex.quote(f"{file.owner}:{file.group or ''}")  # `user:` is the user and its login group
        encoded = base64.encodebytes(file.content).decode()
        lines += [f"base64 -d > {temporary} <<'GPUCLOUD_EOF'\n{encoded}GPUCLOUD_EOF",
                  f"chown {owner} {temporary}", f"chmod {file.mode:o} {temporary}",
                  f"mv -f {temporary} {path}"]
    return "\n".join([*lines, ")", "fi"]) + "\n"


def _bytes(value: bytes | str | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value
