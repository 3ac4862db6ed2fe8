"""Installing the provider as Terraform installs any provider: from the backend's registry over HTTPS.

One backend for the module serves HTTPS (`serve --tls-cert/--tls-key`, a throwaway CA that Terraform and
the provider trust through SSL_CERT_FILE) with real packages: linux_amd64 and darwin_arm64 zips built by
release/provider_package.py (wheels from PyPI, cached in build/provider-wheels), SHA256SUMS signed with
a fresh gpg key. Terraform runs with no CLI configuration (registry) or a `network_mirror` block, and
the provider runs on the system's python3 with no Python environment of ours on PATH.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from acceptance.backend import Backend, Tls, running_backend
from acceptance.harness import Terraform
from backend.services.provider_packages import package_hash_v1
from release.provider_package import DEFAULT_WHEELS, build, package_name, project_version, sign

VERSION = project_version()
PLATFORMS = ("linux_amd64", "darwin_arm64")


@dataclass
class Registry:
    backend: Backend
    host: str  # localhost:PORT, the registry host in source addresses
    packages: Path
    env: dict[str, str]  # for Terraform (and so the provider): trust the CA, reach the API, no venv


def _throwaway_tls(directory: Path) -> Tls:
    """A CA and a certificate for `localhost` signed by it (what `SSL_CERT_FILE` makes Go trust)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    day = datetime.timedelta(days=1)

    def name(common_name: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])

    def certificate(subject: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Name,
                    signer: ec.EllipticCurvePrivateKey, *, ca: bool) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder().subject_name(name(subject)).issuer_name(issuer)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - day).not_valid_after(now + day)
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            san = x509.SubjectAlternativeName([x509.DNSName("localhost")])
            builder = builder.add_extension(san, critical=False)
        return builder.sign(signer, hashes.SHA256())

    ca_key, server_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_cert = certificate("gpucloud test CA", ca_key, name("gpucloud test CA"), ca_key, ca=True)
    server_cert = certificate("localhost", server_key, ca_cert.subject, ca_key, ca=False)
    tls = Tls(cert=directory / "server.pem", key=directory / "server-key.pem", ca=directory / "ca.pem")
    tls.ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    tls.cert.write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    tls.key.write_bytes(server_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return tls


def _signed_packages(directory: Path, gnupg_home: Path) -> Path:
    for platform in PLATFORMS:
        build(platform, version=VERSION, out_dir=directory, wheels_dir=DEFAULT_WHEELS)
    gnupg_home.mkdir(mode=0o700)
    subprocess.run(["gpg", "--homedir", str(gnupg_home), "--batch", "--quiet", "--passphrase", "",
                    "--quick-gen-key", "gpucloud acceptance <acceptance@gpucloud.invalid>", "ed25519", "sign",
                    "never"], check=True, capture_output=True)
    sign(directory, version=VERSION, key="acceptance@gpucloud.invalid", gnupg_home=gnupg_home)
    return directory


def _path_without_our_python() -> str:
    """PATH without this virtual environment: the package must run on the system's python3."""
    ours = str(Path(sys.prefix))
    return os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if not p.startswith(ours))


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    root = tmp_path_factory.mktemp("registry")
    packages = _signed_packages(root / "packages", root / "gnupg")
    tls = _throwaway_tls(root)
    settings = {"GPUCLOUD_PROVIDER_PACKAGES_DIR": str(packages)}
    with running_backend(root / "data", env=settings, tls=tls) as backend:
        env = {**backend.provider_env, "SSL_CERT_FILE": str(tls.ca), "PATH": _path_without_our_python()}
        yield Registry(backend, backend.url.removeprefix("https://"), packages, env)


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


def test_acc_registry_network_mirror(registry: Registry, tmp_path: Path) -> None:
    config = tmp_path / "mirror.tfrc"
    config.write_text(f"""
provider_installation {{
  network_mirror {{
    url     = "https://{registry.host}/v1/mirror/"
    include = ["registry.terraform.io/gpucloud/gpucloud"]
  }}
  direct {{
    exclude = ["registry.terraform.io/gpucloud/gpucloud"]
  }}
}}
""")
    terraform = _terraform(tmp_path / "work", registry, tmp_path / "home", TF_CLI_CONFIG_FILE=str(config))
    terraform.write_main(_configuration("gpucloud/gpucloud"))
    init = terraform.init()
    assert f"Installed gpucloud/gpucloud v{VERSION}" in init.stdout
    zip_path = registry.packages / package_name(VERSION, "linux_amd64")
    assert package_hash_v1(zip_path) in _locked_hashes(terraform)
    terraform.plan()


def test_acc_registry_package_rebuilds_byte_identical(registry: Registry, tmp_path: Path) -> None:
    rebuilt = build("linux_amd64", version=VERSION, out_dir=tmp_path / "again", wheels_dir=DEFAULT_WHEELS)
    assert rebuilt.read_bytes() == (registry.packages / rebuilt.name).read_bytes()
