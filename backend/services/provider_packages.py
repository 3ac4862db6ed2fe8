"""The provider packages the backend's registry and network mirror serve, read from one directory.

The directory is what `release.provider_package build` and `sign` write (docs/installing.md):

    terraform-provider-gpucloud_<version>_<os>_<arch>.zip
    terraform-provider-gpucloud_<version>_SHA256SUMS       "<sha256>  <zip name>" lines
    terraform-provider-gpucloud_<version>_SHA256SUMS.sig   detached OpenPGP signature of SHA256SUMS
    signing-key.asc                                        the public key (or the file settings name)

A version exists when its SHA256SUMS and signature exist; a platform when its zip is listed there and
present. Read on every request (a directory listing): new packages appear without a restart.

The signing key is served to anyone, so a key file holding any private key material (an armored private
block, or secret-key packets) is refused when the registry is built and whenever the key is read.
"""

from __future__ import annotations

import base64
import hashlib
import re
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path

TYPE_NAME = "gpucloud"
NAMESPACE = "gpucloud"
PROTOCOLS = ("6.0",)  # plugin protocol 6 only
_SUMS = re.compile(rf"^terraform-provider-{TYPE_NAME}_(?P<version>[^_/]+)_SHA256SUMS$")
_ZIP = re.compile(
    rf"^terraform-provider-{TYPE_NAME}_(?P<version>[^_/]+)_(?P<os>[a-z0-9]+)_(?P<arch>[a-z0-9]+)\.zip$"
)


@dataclass(frozen=True)
class Package:
    """One platform's zip of one version."""

    version: str
    os: str
    arch: str
    filename: str
    sha256: str  # as SHA256SUMS lists it

    @property
    def platform(self) -> str:
        return f"{self.os}_{self.arch}"


class SigningKeyError(ValueError):
    """The signing key file cannot be served; the message names the file and the fix."""


@dataclass(frozen=True)
class SigningKey:
    key_id: str
    ascii_armor: str


class ProviderPackages:
    """The packages in `directory` (None: the operator configured none; every version list is empty)."""

    def __init__(self, directory: Path | None, signing_key_file: Path | None = None) -> None:
        """Raises SigningKeyError when the signing key file exists and is not a public key alone (a
        missing file is not an error at start: packages may arrive later, and the key with them)."""
        self.directory = directory
        self.signing_key_file = signing_key_file or (directory / "signing-key.asc" if directory else None)
        self._h1_cache: dict[tuple[str, int, int], str] = {}
        self._lock = threading.Lock()
        if self.signing_key_file is not None and self.signing_key_file.is_file():
            self.signing_key()

    def versions(self) -> dict[str, list[Package]]:
        """Every signed version and its platforms, in no particular order."""
        if self.directory is None or not self.directory.is_dir():
            return {}
        found: dict[str, list[Package]] = {}
        names = {path.name for path in self.directory.iterdir()}
        for name in sorted(names):
            match = _SUMS.match(name)
            if match is None or f"{name}.sig" not in names:
                continue
            listed = self._listed(name)
            packages = [p for p in listed if p.version == match["version"] and p.filename in names]
            if packages:
                found[match["version"]] = packages
        return found

    def _listed(self, sums_name: str) -> list[Package]:
        assert self.directory is not None
        packages = []
        for line in (self.directory / sums_name).read_text().splitlines():
            digest, _, filename = line.partition("  ")
            match = _ZIP.match(filename.strip())
            if match and re.fullmatch(r"[0-9a-f]{64}", digest):
                packages.append(Package(match["version"], match["os"], match["arch"], match[0], digest))
        return packages

    def package(self, version: str, os: str, arch: str) -> Package | None:
        return next((p for p in self.versions().get(version, []) if (p.os, p.arch) == (os, arch)), None)

    def served_file(self, filename: str) -> Path | None:
        """The path of a zip, SHA256SUMS or signature of a signed version; None for any other name."""
        for version, packages in self.versions().items():
            sums = self.sums_filename(version)
            if filename in {sums, f"{sums}.sig", *(p.filename for p in packages)}:
                assert self.directory is not None
                return self.directory / filename
        return None

    @staticmethod
    def sums_filename(version: str) -> str:
        return f"terraform-provider-{TYPE_NAME}_{version}_SHA256SUMS"

    def signing_key(self) -> SigningKey:
        """The operator's public key. Raises FileNotFoundError, or SigningKeyError naming the file and
        the fix (a file that is no public key, or that holds private key material)."""
        if self.signing_key_file is None:
            raise FileNotFoundError("no provider packages directory is configured")
        armor = self.signing_key_file.read_text()
        try:
            refuse_private_key_material(armor)
            key_id = openpgp_key_id(armor)
        except ValueError as error:
            raise SigningKeyError(f"{self.signing_key_file}: {error}") from None
        return SigningKey(key_id=key_id, ascii_armor=armor)

    def h1(self, package: Package) -> str:
        """Terraform's `h1:` hash of the package (cached per file size and modification time)."""
        assert self.directory is not None
        path = self.directory / package.filename
        stat = path.stat()
        key = (package.filename, stat.st_size, stat.st_mtime_ns)
        with self._lock:
            cached = self._h1_cache.get(key)
        if cached is None:
            cached = package_hash_v1(path)
            with self._lock:
                self._h1_cache[key] = cached
        return cached


def package_hash_v1(zip_path: Path) -> str:
    """`h1:` as Terraform computes it for a zip (Go's dirhash.Hash1 over the archive's entries): the
    SHA-256 of sorted "<sha256 hex>  <name>" lines, base64."""
    summary = hashlib.sha256()
    with zipfile.ZipFile(zip_path) as archive:
        for name in sorted(archive.namelist()):
            summary.update(f"{hashlib.sha256(archive.read(name)).hexdigest()}  {name}\n".encode())
    return "h1:" + base64.b64encode(summary.digest()).decode()


_PRIVATE_BLOCK = re.compile(r"^-----BEGIN [A-Z0-9 ]*(PRIVATE|SECRET) KEY[A-Z ]*-----\s*$", re.MULTILINE)
_SECRET_KEY_TAGS = frozenset({5, 7})  # RFC 4880 5.5.1.3 secret key, 5.5.1.4 secret subkey
PUBLIC_ONLY_FIX = (
    "it would be served to anyone; put only the public key in it "
    "(`gpg --armor --export KEY_ID > signing-key.asc`) and keep the private key out of the packages directory"
)


def refuse_private_key_material(armor: str) -> None:
    """ValueError when `armor` holds a private key: an armored private block of any kind, or secret-key
    packets inside its public key block."""
    if _PRIVATE_BLOCK.search(armor):
        raise ValueError(f"the file holds a private key block; {PUBLIC_ONLY_FIX}")
    try:
        tags = set(_packet_tags(_public_block(armor)))
    except ValueError:
        return  # not a readable public block: openpgp_key_id says why
    if tags & _SECRET_KEY_TAGS:
        raise ValueError(f"the public key block holds secret key packets; {PUBLIC_ONLY_FIX}")


def _public_block(armor: str) -> bytes:
    """The binary packets of the first armored public key block."""
    lines = armor.strip().splitlines()
    try:
        start = lines.index("-----BEGIN PGP PUBLIC KEY BLOCK-----")
        end = lines.index("-----END PGP PUBLIC KEY BLOCK-----")
    except ValueError:
        raise ValueError(
            "not an ASCII-armored OpenPGP public key (export it with `gpg --armor --export`)"
        ) from None
    body = lines[start + 1 : end]
    blank = next((i for i, line in enumerate(body) if not line.strip()), -1)  # armor headers end here
    return base64.b64decode("".join(line for line in body[blank + 1 :] if not line.startswith("=")))


def _packets(data: bytes) -> list[tuple[int, bytes]]:
    """(tag, body) of each OpenPGP packet (RFC 4880 4.2); ValueError on a header it cannot read."""
    packets, at = [], 0
    while at < len(data):
        first = data[at]
        if not first & 0x80:
            raise ValueError("not an OpenPGP packet")
        if first & 0x40:  # new-format header
            tag, size, offset = first & 0x3F, data[at + 1], at + 2
            if 192 <= size < 224:
                size, offset = ((size - 192) << 8) + data[at + 2] + 192, at + 3
            elif size == 255:
                size, offset = int.from_bytes(data[at + 2 : at + 6], "big"), at + 6
            elif size >= 224:
                raise ValueError("partial packet lengths are not used by keys")
        else:  # old format: the length's width is in the low bits (3: to the end)
            tag, kind = (first >> 2) & 0x0F, first & 0x03
            if kind == 3:
                size, offset = len(data) - at - 1, at + 1
            else:
                width = (1, 2, 4)[kind]
                size, offset = int.from_bytes(data[at + 1 : at + 1 + width], "big"), at + 1 + width
        packets.append((tag, data[offset : offset + size]))
        at = offset + size
    return packets


def _packet_tags(data: bytes) -> list[int]:
    return [tag for tag, _ in _packets(data)]


def openpgp_key_id(armor: str) -> str:
    """The key id (16 hex digits) of the first public key in an ASCII-armored OpenPGP key (v4 keys:
    the last 8 bytes of the SHA-1 fingerprint, RFC 4880 12.2)."""
    packets = _packets(_public_block(armor))
    tag, packet = packets[0] if packets else (0, b"")
    if tag != 6 or not packet or packet[0] != 4:
        raise ValueError("the first packet is not a version 4 public key (gpg's default)")
    fingerprint = hashlib.sha1(b"\x99" + len(packet).to_bytes(2, "big") + packet).hexdigest()
    return fingerprint[-16:].upper()
