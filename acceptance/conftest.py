"""Acceptance fixtures: real Terraform, providers installed from a filesystem mirror.

- `provider_mirror` (session): a mirror holding `gpucloud/gpucloud` and the test-only
  `gpucloud/conformance`, written by `provider.plugin.install.write_mirror` exactly as users get it.
- `terraform` (function): a factory, `terraform(version="1.11") -> Terraform` in a fresh directory
  whose CLI configuration installs gpucloud/* from that mirror. `mirror=False` gives a Terraform with
  no mirror at all (built-in `terraform_data` only), which does not build the mirror.
- `tf_version`: parametrises a smoke test over every supported Terraform ("1.11", "1.15").
- `backend_server` (function): the real `gpucloud-backend serve` on a free loopback port with a fresh
  SQLite data dir, a project and an admin API key (`acceptance/backend.py`); pass
  `env=backend_server.provider_env` to `terraform(...)` so the provider reaches it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from importlib.metadata import version as distribution_version
from pathlib import Path

import pytest

from acceptance.backend import Backend, running_backend
from acceptance.harness import SUPPORTED_VERSIONS, Terraform, TerraformFactory

CONFORMANCE_VERSION = "0.1.0"


@pytest.fixture(scope="session")
def provider_mirror(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A filesystem mirror with the gpucloud and conformance providers (built once per session)."""
    from provider.plugin.install import write_mirror

    mirror = tmp_path_factory.mktemp("provider-mirror")
    write_mirror(
        mirror, namespace="gpucloud", type_name="gpucloud", version=distribution_version("gpucloud"),
        launch_module="provider.plugin.main",
    )
    write_mirror(
        mirror, namespace="gpucloud", type_name="conformance", version=CONFORMANCE_VERSION,
        launch_module="acceptance.conformance.main",
    )
    return mirror


@pytest.fixture
def terraform(request: pytest.FixtureRequest, tmp_path: Path) -> TerraformFactory:
    """Factory for Terraform runners, each in its own fresh working directory under tmp_path."""
    counter = itertools.count()

    def make(
        version: str = "1.11", *, mirror: bool = True, env: Mapping[str, str] | None = None
    ) -> Terraform:
        mirror_dir: Path | None = request.getfixturevalue("provider_mirror") if mirror else None
        workdir = tmp_path / f"tf{version.replace('.', '')}-{next(counter)}"
        return Terraform(workdir, version=version, mirror=mirror_dir, env=env)

    return make


@pytest.fixture(params=SUPPORTED_VERSIONS, ids=[f"tf{v}" for v in SUPPORTED_VERSIONS])
def tf_version(request: pytest.FixtureRequest) -> str:
    """Each supported Terraform version in turn: for the smoke tests that run on both."""
    version: str = request.param
    return version


@pytest.fixture
def backend_server(tmp_path: Path) -> Iterator[Backend]:
    """A fresh backend (own SQLite store, project, admin key) for one test."""
    data_dir = tmp_path / "backend"
    data_dir.mkdir()
    with running_backend(data_dir) as server:
        yield server
