"""Steps shared by the gpucloud resource acceptance tests, in the spirit of terraform-plugin-testing:
apply then check the follow-up plans are empty, import-verify, read the state of one address.

Fixtures (import them into a test module): `backend` (one real backend per module) and `gpucloud_tf`
(a factory of Terraform working directories whose provider reaches that backend).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from acceptance.backend import Backend, running_backend
from acceptance.harness import Terraform, TerraformFactory

PROVIDER_BLOCK = """
terraform {
  required_providers {
    gpucloud = { source = "gpucloud/gpucloud" }
  }
}

provider "gpucloud" {}
"""


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    """One real backend (fresh SQLite) shared by the scenarios of a test module."""
    with running_backend(tmp_path_factory.mktemp("backend")) as server:
        yield server


GpuCloudTerraform = Callable[..., Terraform]


@pytest.fixture
def gpucloud_tf(terraform: TerraformFactory, backend: Backend) -> GpuCloudTerraform:
    """`gpucloud_tf(main_tf, version="1.11")`: a fresh, initialised working directory configured for the
    backend."""

    def make(main_tf: str, version: str = "1.11") -> Terraform:
        tf = terraform(version)
        tf.env.update(backend.provider_env)
        tf.write("provider.tf", PROVIDER_BLOCK)
        tf.write_main(main_tf)
        tf.init()
        return tf

    return make


def apply_and_check(tf: Terraform) -> None:
    """Apply, then the plans with and without refresh must be empty."""
    tf.apply()
    tf.assert_plan_empty()


def values(tf: Terraform, address: str) -> dict[str, Any]:
    """The attribute values of `address` in the state."""
    state = tf.show_json()
    for resource in state.get("values", {}).get("root_module", {}).get("resources", []):
        if resource["address"] == address:
            found: dict[str, Any] = resource["values"]
            return found
    raise AssertionError(f"{address} is not in the state: {state}")


def import_verify(tf: Terraform, address: str) -> None:
    """Forget `address`, import it by id: the imported state equals the applied one, the plan is empty."""
    applied = values(tf, address)
    tf.run("state", "rm", address)
    tf.import_(address, applied["id"])
    assert values(tf, address) == applied
    tf.assert_plan_empty()


def plan_text(tf: Terraform, *args: str) -> tuple[int, str]:
    """`plan -detailed-exitcode`: (exit code, output with whitespace runs collapsed)."""
    result = tf.plan_changes(*args)
    return result.returncode, " ".join(result.output.split())


def plan_error(tf: Terraform) -> str:
    """A plan that must fail: its output (the diagnostics; Terraform wraps them, so whitespace runs are
    collapsed to single spaces)."""
    result = tf.plan(check=False)
    assert result.returncode == 1, result.output
    return " ".join(result.output.split())


def expiry_after(tf: Terraform, commands: int) -> str:
    """An `expires_at` (RFC 3339, whole seconds) late enough that the next `commands` Terraform runs end
    before the engine deletes the cluster: at least 20 s ahead, more on a loaded machine (five times what
    a `validate`, which launches the provider, takes now, per command). A fixed 20 s could let the
    expiry land inside the apply or its follow-up plans when two test workers share the CPUs."""
    launch = tf.validate().seconds
    ahead = max(20.0, 5 * launch * commands)
    return (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=ahead)).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_public_key(comment: str = "acc@test") -> str:
    """A fresh ed25519 public key line (each test needs its own: the API refuses duplicates)."""
    key = ed25519.Ed25519PrivateKey.generate().public_key()
    line = key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    return f"{line} {comment}"


def write_text(tf: Terraform, name: str, text: str) -> Path:
    """A data file next to the configuration (exact bytes, no dedent)."""
    path = tf.workdir / name
    path.write_text(text)
    return path
