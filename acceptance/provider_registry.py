"""The backend as a provider registry and network mirror over HTTPS, for the acceptance tests that install
the provider as teams do: real packages (linux_amd64 and darwin_arm64 zips built by
release/provider_package.py, wheels from PyPI cached in build/provider-wheels) with a SHA256SUMS signed by
a fresh gpg key, served by `gpucloud-backend serve --tls-cert/--tls-key` with a throwaway CA that Terraform
and the provider trust through SSL_CERT_FILE.

    with registry_backend(tmp_dir, packages) as registry:
        registry.host, registry.mirror_url, registry.env   # env: for Terraform and so the provider
"""

from __future__ import annotations

import contextlib
import datetime
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from acceptance.backend import Backend, Tls, running_backend
from release.provider_package import DEFAULT_WHEELS, build, project_version, sign

VERSION = project_version()
PLATFORMS = ("linux_amd64", "darwin_arm64")
_built: dict[str, Path] = {}  # the session's signed packages, built once for every module that needs them


@dataclass
class Registry:
    backend: Backend
    host: str  # localhost:PORT, the registry host in source addresses
    packages: Path
    ca: Path  # the CA that signed the backend's certificate
    env: dict[str, str]  # for Terraform (and so the provider): trust the CA, reach the API, no venv

    @property
    def mirror_url(self) -> str:
        """The network mirror's base URL, as a CLI configuration names it."""
        return f"https://{self.host}/v1/mirror/"


def throwaway_tls(directory: Path) -> Tls:
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
    directory.mkdir(parents=True, exist_ok=True)
    tls = Tls(cert=directory / "server.pem", key=directory / "server-key.pem", ca=directory / "ca.pem")
    tls.ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    tls.cert.write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    tls.key.write_bytes(server_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return tls


def _build_signed_packages(directory: Path, gnupg_home: Path) -> Path:
    for platform in PLATFORMS:
        build(platform, version=VERSION, out_dir=directory, wheels_dir=DEFAULT_WHEELS)
    gnupg_home.mkdir(mode=0o700)
    subprocess.run(["gpg", "--homedir", str(gnupg_home), "--batch", "--quiet", "--passphrase", "",
                    "--quick-gen-key", "gpucloud acceptance <acceptance@gpucloud.invalid>", "ed25519", "sign",
                    "never"], check=True, capture_output=True)
    try:
        sign(directory, version=VERSION, key="acceptance@gpucloud.invalid", gnupg_home=gnupg_home)
    finally:  # gpg started an agent for this home: it would outlive the test run
        subprocess.run(["gpgconf", "--homedir", str(gnupg_home), "--kill", "gpg-agent"], check=False,
                       capture_output=True)
    return directory


def signed_packages(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This session's signed packages of every platform in PLATFORMS (built on first use)."""
    if "packages" not in _built:
        root = tmp_path_factory.mktemp("provider-packages")
        _built["packages"] = _build_signed_packages(root / "packages", root / "gnupg")
    return _built["packages"]


def path_without_our_python() -> str:
    """PATH without this virtual environment: the package must run on the system's python3."""
    ours = str(Path(sys.prefix))
    return os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if not p.startswith(ours))


@contextlib.contextmanager
def registry_backend(
    root: Path, packages: Path, *, env: Mapping[str, str] | None = None
) -> Iterator[Registry]:
    """The backend over HTTPS serving `packages` (extra `GPUCLOUD_*` settings in `env`)."""
    tls = throwaway_tls(root / "tls")
    settings = {"GPUCLOUD_PROVIDER_PACKAGES_DIR": str(packages), **(env or {})}
    with running_backend(root / "data", env=settings, tls=tls) as backend:
        terraform_env = {**backend.provider_env, "SSL_CERT_FILE": str(tls.ca),
                         "PATH": path_without_our_python()}
        yield Registry(backend, backend.url.removeprefix("https://"), packages, tls.ca, terraform_env)


def network_mirror_config(mirror_url: str) -> str:
    """The CLI configuration docs/installing.md gives teams: gpucloud/gpucloud from the backend, every
    other provider from its registry."""
    return f"""
provider_installation {{
  network_mirror {{
    url     = "{mirror_url}"
    include = ["registry.terraform.io/gpucloud/gpucloud"]
  }}
  direct {{
    exclude = ["registry.terraform.io/gpucloud/gpucloud"]
  }}
}}
"""
