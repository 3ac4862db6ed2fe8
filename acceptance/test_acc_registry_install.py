"""Installing the provider as Terraform installs any provider: from the backend over HTTPS.

One backend for the module serves HTTPS with real signed packages (acceptance/provider_registry.py).
Terraform runs with the `network_mirror` CLI configuration docs/installing.md gives teams (the source
stays `gpucloud/gpucloud`), or with no CLI configuration and the backend as the registry host, and the
provider runs on the system's python3 with no Python environment of ours on PATH.
"""

from __future__ import annotations

import base64
import hashlib
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from acceptance.harness import Terraform
from acceptance.provider_registry import (
    PLATFORMS,
    VERSION,
    Registry,
    network_mirror_config,
    registry_backend,
    signed_packages,
)
from backend.services.provider_packages import package_hash_v1
from release.provider_package import DEFAULT_WHEELS, build, package_name


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    packages = signed_packages(tmp_path_factory)
    with registry_backend(tmp_path_factory.mktemp("registry"), packages) as served:
        yield served


def _configuration(source: str) -> str:
    return f"""
        terraform {{
          required_providers {{
            gpucloud = {{ source = "{source}", version = "{VERSION}" }}
          }}
        }}
        resource "gpucloud_ssh_key" "ops" {{
          name       = "registry-install"
          public_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpucGxvdWQtcmVnaXN0cnktaW5zdGFsbC10ZXN0 ops"
        }}
        """


def _terraform(workdir: Path, registry: Registry, home: Path, **env: str) -> Terraform:
    """Terraform with an empty CLI configuration (no mirror, no overrides), its own HOME."""
    home.mkdir(parents=True, exist_ok=True)
    return Terraform(workdir, env={**registry.env, "HOME": str(home), **env})


def _directory_hash_v1(directory: Path) -> str:
    """`h1:` of an unpacked package directory (Go's dirhash.HashDir): what Terraform verifies."""
    names = sorted(path.relative_to(directory).as_posix() for path in directory.rglob("*") if path.is_file())
    lines = "".join(
        f"{hashlib.sha256((directory / name).read_bytes()).hexdigest()}  {name}\n" for name in names
    )
    return "h1:" + base64.b64encode(hashlib.sha256(lines.encode()).digest()).decode()


def _locked_hashes(terraform: Terraform) -> list[str]:
    return re.findall(r'"((?:h1|zh):[^"]+)"', (terraform.workdir / ".terraform.lock.hcl").read_text())


def test_acc_registry_install_init_and_plan(registry: Registry, tmp_path: Path) -> None:
    terraform = _terraform(tmp_path / "work", registry, tmp_path / "home")
    terraform.write_main(_configuration(f"{registry.host}/gpucloud/gpucloud"))
    init = terraform.init()
    installed = rf"Installed {re.escape(registry.host)}/gpucloud/gpucloud v{VERSION} \(self-signed, key ID"
    assert re.search(installed, init.stdout), init.stdout
    plan = terraform.plan()
    assert "gpucloud_ssh_key.ops will be created" in plan.stdout
    zip_path = registry.packages / package_name(VERSION, "linux_amd64")
    assert package_hash_v1(zip_path) in _locked_hashes(terraform)  # as Terraform hashes what it installed


def test_acc_registry_lock_file_verifies_across_install_paths(registry: Registry, tmp_path: Path) -> None:
    source = f"{registry.host}/gpucloud/gpucloud"
    first = _terraform(tmp_path / "alice" / "infra", registry, tmp_path / "alice")
    first.write_main(_configuration(source))
    first.run("providers", "lock", "-platform=linux_amd64", "-platform=darwin_arm64")
    hashes = _locked_hashes(first)
    for platform in PLATFORMS:  # h1: of both platforms' packages, zh: from the signed SHA256SUMS
        zip_path = registry.packages / package_name(VERSION, platform)
        assert package_hash_v1(zip_path) in hashes
        assert f"zh:{hashlib.sha256(zip_path.read_bytes()).hexdigest()}" in hashes

    # Another user, another path, a plugin cache: the committed lock file verifies as it is.
    cache = tmp_path / "bob" / "plugin-cache"
    cache.mkdir(parents=True)
    second = _terraform(tmp_path / "bob" / "checkout" / "infra", registry, tmp_path / "bob",
                        TF_PLUGIN_CACHE_DIR=str(cache))
    second.write_main(_configuration(source))
    shutil.copy(first.workdir / ".terraform.lock.hcl", second.workdir / ".terraform.lock.hcl")
    second.init("-lockfile=readonly")
    second.plan()  # runs the provider from the cached package directory
    # Running it wrote nothing into the package (no bytecode): it still has the hash of the zip...
    cached = cache / registry.host / "gpucloud" / "gpucloud" / VERSION / "linux_amd64"
    zip_path = registry.packages / package_name(VERSION, "linux_amd64")
    assert _directory_hash_v1(cached) == package_hash_v1(zip_path)
    # ...and a third checkout verifies and uses that cache entry.
    third = _terraform(tmp_path / "bob" / "other" / "infra", registry, tmp_path / "bob",
                       TF_PLUGIN_CACHE_DIR=str(cache))
    third.write_main(_configuration(source))
    shutil.copy(first.workdir / ".terraform.lock.hcl", third.workdir / ".terraform.lock.hcl")
    third.init("-lockfile=readonly")
    lock = ".terraform.lock.hcl"
    assert (first.workdir / lock).read_text() == (third.workdir / lock).read_text()


def test_acc_registry_network_mirror_is_the_team_story(registry: Registry, tmp_path: Path) -> None:
    """docs/installing.md's story: configurations keep `gpucloud/gpucloud`, a CLI configuration points
    Terraform at the backend's network mirror, the lock file is written once for the team's platforms
    with `terraform providers lock -net-mirror` and committed, and every init after that is read-only."""
    config = tmp_path / "mirror.tfrc"
    config.write_text(network_mirror_config(registry.mirror_url))
    source = "gpucloud/gpucloud"
    mirror = {"TF_CLI_CONFIG_FILE": str(config)}
    alice = _terraform(tmp_path / "alice" / "infra", registry, tmp_path / "alice", **mirror)
    alice.write_main(_configuration(source))
    alice.run("providers", "lock", f"-net-mirror={registry.mirror_url}",
              *(f"-platform={platform}" for platform in PLATFORMS))
    lock = (alice.workdir / ".terraform.lock.hcl").read_text()
    assert 'provider "registry.terraform.io/gpucloud/gpucloud"' in lock
    for platform in PLATFORMS:  # h1: of each platform's package, as Terraform hashes what it unpacks
        assert package_hash_v1(registry.packages / package_name(VERSION, platform)) in _locked_hashes(alice)

    # Bob's clone has the committed lock file: a read-only init installs from the mirror and verifies it.
    bob = _terraform(tmp_path / "bob" / "infra", registry, tmp_path / "bob", **mirror)
    bob.write_main(_configuration(source))
    shutil.copy(alice.workdir / ".terraform.lock.hcl", bob.workdir / ".terraform.lock.hcl")
    init = bob.init("-lockfile=readonly")
    assert f"Installed gpucloud/gpucloud v{VERSION}" in init.stdout
    assert "gpucloud_ssh_key.ops will be created" in bob.plan().stdout
    assert (bob.workdir / ".terraform.lock.hcl").read_text() == lock

    # The backend as the registry host (no CLI configuration) serves the same packages: the same h1:
    # hashes (the registry adds the zh: hashes of its signed SHA256SUMS; a mirror's lock has h1: only).
    host = _terraform(tmp_path / "carol" / "infra", registry, tmp_path / "carol")
    host.write_main(_configuration(f"{registry.host}/gpucloud/gpucloud"))
    host.run("providers", "lock", *(f"-platform={platform}" for platform in PLATFORMS))
    assert sorted(_locked_hashes(alice)) == sorted(h for h in _locked_hashes(host) if h.startswith("h1:"))


def test_acc_registry_package_rebuilds_byte_identical(registry: Registry, tmp_path: Path) -> None:
    rebuilt = build("linux_amd64", version=VERSION, out_dir=tmp_path / "again", wheels_dir=DEFAULT_WHEELS)
    assert rebuilt.read_bytes() == (registry.packages / rebuilt.name).read_bytes()
