"""The provider registry and network mirror protocols: what Terraform reads, without an API key.

The packages directory is made here (a small zip, SHA256SUMS, an opaque signature file and a real gpg
public key from tests/backend/data); acceptance/test_acc_registry_install.py runs `terraform init`
against real signed packages.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from backend.services.provider_packages import (
    ProviderPackages,
    SigningKeyError,
    openpgp_key_id,
    package_hash_v1,
)

KEY = Path(__file__).parent / "data" / "provider-signing-key.asc"
KEY_ID = "06B89690182B287F"  # `gpg --list-keys --with-colons` of that key
ZIP = "terraform-provider-gpucloud_0.2.0_linux_amd64.zip"
SUMS = "terraform-provider-gpucloud_0.2.0_SHA256SUMS"


@pytest.fixture
def packages(tmp_path: Path) -> Path:
    directory = tmp_path / "packages"
    directory.mkdir()
    with zipfile.ZipFile(directory / ZIP, "w") as archive:
        archive.writestr("terraform-provider-gpucloud_v0.2.0", "#!/bin/sh\n")
        archive.writestr("lib/a.py", "A = 1\n")
    digest = hashlib.sha256((directory / ZIP).read_bytes()).hexdigest()
    (directory / SUMS).write_text(f"{digest}  {ZIP}\n")
    (directory / f"{SUMS}.sig").write_bytes(b"signature")
    # Unsigned: no .sig, so version 0.3.0 is not offered.
    (directory / "terraform-provider-gpucloud_0.3.0_SHA256SUMS").write_text(f"{digest}  {ZIP}\n")
    (directory / "signing-key.asc").write_text(KEY.read_text())
    return directory


@pytest.fixture
def registry(client: TestClient, packages: Path) -> TestClient:
    client.app.state.gpucloud.provider_packages = ProviderPackages(packages)  # type: ignore[attr-defined]
    return client


def test_provider_registry_discovery_versions_and_download(registry: TestClient, packages: Path) -> None:
    assert registry.get("/.well-known/terraform.json").json() == {"providers.v1": "/v1/providers/"}
    versions = registry.get("/v1/providers/gpucloud/gpucloud/versions").json()
    platforms = [{"os": "linux", "arch": "amd64"}]
    assert versions == {"versions": [{"version": "0.2.0", "protocols": ["6.0"], "platforms": platforms}]}
    download = registry.get("/v1/providers/gpucloud/gpucloud/0.2.0/download/linux/amd64").json()
    assert download["filename"] == ZIP
    assert download["shasum"] == hashlib.sha256((packages / ZIP).read_bytes()).hexdigest()
    assert download["signing_keys"]["gpg_public_keys"][0]["key_id"] == KEY_ID
    assert download["signing_keys"]["gpg_public_keys"][0]["ascii_armor"] == KEY.read_text()
    for url in (download["download_url"], download["shasums_url"], download["shasums_signature_url"]):
        assert registry.get(url).content == (packages / url.rsplit("/", 1)[1]).read_bytes()


def test_provider_registry_refuses_what_it_does_not_serve(registry: TestClient, packages: Path) -> None:
    assert registry.get("/v1/providers/hashicorp/aws/versions").status_code == 404
    assert registry.get("/v1/providers/gpucloud/gpucloud/0.2.0/download/darwin/arm64").status_code == 404
    assert registry.get("/v1/providers/gpucloud/gpucloud/0.3.0/download/linux/amd64").status_code == 404
    # Only the files of signed versions are served, never anything else in the directory.
    assert registry.get("/v1/provider-packages/signing-key.asc").status_code == 404
    unsigned = "terraform-provider-gpucloud_0.3.0_SHA256SUMS"
    assert registry.get(f"/v1/provider-packages/{unsigned}").status_code == 404
    assert registry.get("/v1/provider-packages/..%2Fsecret").status_code == 404


def test_provider_network_mirror_index_and_hashes(registry: TestClient, packages: Path) -> None:
    base = "/v1/mirror/registry.terraform.io/gpucloud/gpucloud"
    assert registry.get(f"{base}/index.json").json() == {"versions": {"0.2.0": {}}}
    archives = registry.get(f"{base}/0.2.0.json").json()["archives"]
    digest = hashlib.sha256((packages / ZIP).read_bytes()).hexdigest()
    assert archives == {"linux_amd64": {"url": f"/v1/provider-packages/{ZIP}",
                                        "hashes": [package_hash_v1(packages / ZIP), f"zh:{digest}"]}}
    assert registry.get(f"{base}/9.9.9.json").status_code == 404


def test_package_hash_v1_is_go_dirhash_hash1(tmp_path: Path) -> None:
    # dirhash.Hash1: sha256 over sorted "<file sha256 hex>  <name>\n" lines, base64 with "h1:".
    path = tmp_path / "p.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("b", "2")
        archive.writestr("a/x", "1")
    lines = "".join(f"{hashlib.sha256(c).hexdigest()}  {n}\n" for n, c in (("a/x", b"1"), ("b", b"2")))
    assert package_hash_v1(path) == "h1:" + base64.b64encode(hashlib.sha256(lines.encode()).digest()).decode()


def test_openpgp_key_id_of_an_armored_key_and_a_clear_error_otherwise() -> None:
    assert openpgp_key_id(KEY.read_text()) == KEY_ID
    with pytest.raises(ValueError, match="gpg --armor --export"):
        openpgp_key_id("ssh-ed25519 AAAA...")


def _with_secret_packet(armor: str) -> str:
    """The key's armor with its first packet re-tagged as a secret key (tag 5), as a careless export of
    a secret key into a file labelled public would be."""
    lines = armor.strip().splitlines()
    start = lines.index("-----BEGIN PGP PUBLIC KEY BLOCK-----")
    end = lines.index("-----END PGP PUBLIC KEY BLOCK-----")
    body = [line for line in lines[start + 1 : end] if line.strip() and not line.startswith("=")]
    data = bytearray(base64.b64decode("".join(body)))
    data[0] = (data[0] & ~0x3C) | (5 << 2) if not data[0] & 0x40 else 0xC0 | 5
    encoded = base64.b64encode(bytes(data)).decode()
    wrapped = [encoded[i : i + 64] for i in range(0, len(encoded), 64)]
    return "\n".join([lines[start], "", *wrapped, lines[end]])


PRIVATE_BLOCK = "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQVYBGZ...\n-----END PGP PRIVATE KEY BLOCK-----\n"


@pytest.mark.parametrize("content", ["public+private", "private", "secret packet"])
def test_provider_registry_refuses_a_signing_key_file_with_private_key_material(
    packages: Path, content: str
) -> None:
    key_file = packages / "signing-key.asc"
    key_file.write_text({"public+private": KEY.read_text() + PRIVATE_BLOCK, "private": PRIVATE_BLOCK,
                         "secret packet": _with_secret_packet(KEY.read_text())}[content])
    with pytest.raises(SigningKeyError) as err:  # at start: the registry is not built
        ProviderPackages(packages)
    message = str(err.value)
    assert str(key_file) in message and "gpg --armor --export" in message, message
    assert "private key" in message or "secret key" in message


def test_provider_registry_never_serves_a_private_key_added_after_start(
    registry: TestClient, packages: Path
) -> None:
    url = "/v1/providers/gpucloud/gpucloud/0.2.0/download/linux/amd64"
    assert registry.get(url).status_code == 200
    (packages / "signing-key.asc").write_text(KEY.read_text() + PRIVATE_BLOCK)
    refused = registry.get(url)
    assert refused.status_code == 503 and refused.json()["code"] == "signing_key_unavailable"
    assert "PRIVATE" not in refused.text and "lQVYBGZ" not in refused.text
