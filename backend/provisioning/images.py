"""Container images for Slurm's `srun --container`: each image a cluster declares is pulled once into the
cluster's shared storage, unpacked as an OCI bundle and addressed by its manifest digest.

The store (one per cluster, on its shared storage, mounted read-only on every node):

    STORE/bundles/<digest hex>/   an OCI runtime bundle (config.json + rootfs/), never changed once there
    STORE/names/<name>            a relative symlink to ../bundles/<digest hex>: what /images/<name> shows
    STORE/tmp/, STORE/locks/      imports under way (same filesystem, so the final rename is atomic)

Pulling is skopeo's (registry protocol, TLS, credentials) and unpacking umoci's (`--rootless`: the files
belong to the importing user, no device nodes), both Debian packages. Importing by digest makes a second
import of the same content a no-op, and switching a name replaces one symlink atomically, so a job that
started on the old bundle keeps it until the garbage collector, told which digests jobs use, removes it.

The caller serializes the operations on one store (one worker per cluster): an import followed by
`switch` must not interleave with `collect_garbage`, which removes bundles no name points to.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import fcntl
import hashlib
import ipaddress
import json
import os
import platform
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend.domain.errors import Unprocessable
from backend.provisioning.driver import ImageOutcome

IMAGE_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")
DOCKER_HUB = "docker.io"
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_PATH_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_HOST = re.compile(rf"{_HOST_LABEL}(?:\.{_HOST_LABEL})*")
_INDEX_TYPES = {"application/vnd.oci.image.index.v1+json",
                "application/vnd.docker.distribution.manifest.list.v2+json"}
_SKOPEO_TIMEOUT_S = 120.0
_COPY_TIMEOUT_S = 3600.0
METADATA_FILE = "gpucloud-image.json"
# Go's names for the machines Python's platform.machine() reports.
_GOARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64",
           "ppc64le": "ppc64le", "s390x": "s390x"}


# ---------------------------------------------------------------------------------------------------
# References and names


class InvalidImageReference(Unprocessable):
    code = "invalid_image_reference"


@dataclass(frozen=True)
class ImageRef:
    """A registry image reference, normalized the way Docker does (`ubuntu:22.04` is
    docker.io/library/ubuntu:22.04, no tag means `latest`); `digest`, when given, wins over the tag."""

    registry: str  # host[:port]
    repository: str
    tag: str | None = None
    digest: str | None = None

    @property
    def host(self) -> str:
        """The registry's host without port (an IPv6 address without its brackets)."""
        if self.registry.startswith("["):
            return self.registry[1:self.registry.index("]")]
        return self.registry.rsplit(":", 1)[0] if ":" in self.registry else self.registry

    @property
    def name(self) -> str:
        return f"{self.registry}/{self.repository}"

    def at(self, digest: str) -> ImageRef:
        """This image pinned to one manifest: what is pulled is exactly what was inspected."""
        return dataclasses.replace(self, digest=digest)

    def transport(self) -> str:
        """The reference as skopeo's docker:// transport takes it (by digest when pinned)."""
        return f"docker://{self.name}@{self.digest}" if self.digest else f"docker://{self.name}:{self.tag}"

    def __str__(self) -> str:
        tag = f":{self.tag}" if self.tag else ""
        return f"{self.name}{tag}@{self.digest}" if self.digest else f"{self.name}{tag}"


def _bad_reference(reference: str, problem: str, fix: str, field_path: str) -> InvalidImageReference:
    return InvalidImageReference(f'container image "{reference}": {problem}; {fix}', field=field_path)


def _split_registry(reference: str, rest: str, field_path: str) -> tuple[str, str]:
    """(registry, repository path): the first component names a registry when it looks like a host
    (a dot, a port or `localhost`), as Docker decides."""
    first, _, remainder = rest.partition("/")
    if remainder and ("." in first or ":" in first or first == "localhost" or first.startswith("[")):
        _check_registry(reference, first, field_path)
        return first, remainder
    return DOCKER_HUB, rest if "/" in rest else f"library/{rest}"


def _check_registry(reference: str, registry: str, field_path: str) -> None:
    host, port = registry, ""
    if registry.startswith("["):
        host, _, port = registry[1:].partition("]")
        port = port.removeprefix(":")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise _bad_reference(reference, f"[{host}] is not an IPv6 address",
                                 "write the registry as [address]:port", field_path) from None
    elif ":" in registry:
        host, port = registry.rsplit(":", 1)
    if not registry.startswith("[") and not _HOST.fullmatch(host):
        raise _bad_reference(reference, f'"{host}" is not a registry host name',
                             "write host[:port]/repository:tag", field_path)
    if port and not (port.isdigit() and 1 <= int(port) <= 65535):
        raise _bad_reference(reference, f'"{port}" is not a port (1-65535)',
                             "write host:port/repository:tag", field_path)


def _check_repository(reference: str, repository: str, field_path: str) -> None:
    for component in repository.split("/"):
        if _PATH_COMPONENT.fullmatch(component):
            continue
        if _PATH_COMPONENT.fullmatch(component.lower()):
            raise _bad_reference(reference, "repository names are lowercase",
                                 f'write "{reference.replace(component, component.lower())}"', field_path)
        raise _bad_reference(reference, f'"{component}" is not a repository path component',
                             "use lowercase letters, digits and . _ - between them", field_path)


def check_registry_host(registry: str, *, field_path: str = "registry_credentials") -> str:
    """A registry as credentials name it: host[:port], as it appears at the start of a reference."""
    if not registry or "/" in registry or "://" in registry:
        raise InvalidImageReference(
            f'registry "{registry}" is not host[:port]: write it as it starts image references, e.g. '
            '"registry.internal:5000" or "ghcr.io"', field=f"{field_path}.{registry}")
    _check_registry(registry, registry, f"{field_path}.{registry}")
    return registry


def parse_image_ref(reference: str, *, field_path: str = "container_images") -> ImageRef:
    """Parse and validate one reference; the error names the reference and how to write it."""
    text = reference.strip()
    if not text:
        raise _bad_reference(reference, "the reference is empty", "write registry/repository:tag, "
                             "e.g. nvcr.io/nvidia/pytorch:24.05-py3", field_path)
    if "://" in text:
        raise _bad_reference(reference, "a reference has no scheme",
                             f'drop "{text.split("://")[0]}://"', field_path)
    rest, _, digest = text.partition("@")
    if digest and not _DIGEST.fullmatch(digest):
        raise _bad_reference(reference, f'"{digest}" is not a digest',
                             "pin with @sha256: and the 64 lowercase hex digits of the manifest", field_path)
    tag = None
    last = rest.rsplit("/", 1)[-1]
    if ":" in last and not last.startswith("["):
        rest, tag = rest.rsplit(":", 1)
        if not _TAG.fullmatch(tag):
            raise _bad_reference(reference, f'"{tag}" is not a tag',
                                 "tags are letters, digits, _ . - (up to 128, not starting with . or -)",
                                 field_path)
    if not rest:
        raise _bad_reference(reference, "the repository is missing", "write repository:tag", field_path)
    registry, repository = _split_registry(reference, rest, field_path)
    _check_repository(reference, repository, field_path)
    return ImageRef(registry, repository, tag if tag or digest else "latest", digest or None)


def check_image_name(name: str, *, field_path: str = "container_images") -> str:
    """The name under /images/: a path component the nodes show, so no slashes, dots first or capitals."""
    if not IMAGE_NAME.fullmatch(name):
        raise InvalidImageReference(
            f'container image name "{name}" is not valid: use 1-63 lowercase letters, digits, _ . - '
            f'starting with a letter or digit (it becomes /images/<name>)', field=f"{field_path}.{name}")
    return name


# ---------------------------------------------------------------------------------------------------
# Transport and credentials


@dataclass(frozen=True)
class RegistryCredentials:
    username: str
    password: str = field(repr=False)


@dataclass(frozen=True)
class TransportPolicy:
    """How to reach registries: verified HTTPS against the system CAs plus, when set, the operator's CA
    directory (`*.crt` files; skopeo's cert dir); a registry on a loopback address may speak plain HTTP
    (a registry on the controller itself), unless `plain_http_on_loopback` is off."""

    ca_dir: Path | None = None
    plain_http_on_loopback: bool = True

    def allows_plain_http(self, ref: ImageRef) -> bool:
        return self.plain_http_on_loopback and is_loopback(ref.host)

    def flags(self, ref: ImageRef, prefix: str) -> list[str]:
        """TLS flags for one side of a skopeo command (prefix "" for inspect, "src-" for copy)."""
        if self.allows_plain_http(ref):
            return [f"--{prefix}tls-verify=false"]
        ca = [f"--{prefix}cert-dir={self.ca_dir}"] if self.ca_dir is not None else []
        return [f"--{prefix}tls-verify=true", *ca]


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _auth_file_content(ref: ImageRef, creds: RegistryCredentials) -> str:
    token = base64.b64encode(f"{creds.username}:{creds.password}".encode()).decode()
    return json.dumps({"auths": {ref.registry: {"auth": token}}})


class _Skopeo:
    """skopeo for one image: a private 0700 directory holds the 0600 auth file (credentials never reach
    the command line, where `ps` shows them) and a signature policy of our own, so the host's
    containers configuration and a user's stored logins do not change what is pulled."""

    def __init__(self, ref: ImageRef, creds: RegistryCredentials | None, policy: TransportPolicy,
                 workdir: Path) -> None:
        self.ref, self.creds, self.policy = ref, creds, policy
        self._policy_file = workdir / "policy.json"
        self._policy_file.write_text(json.dumps({"default": [{"type": "insecureAcceptAnything"}]}))
        self._auth_file: Path | None = None
        self._secrets: list[str] = []
        if creds is not None:
            self._auth_file = workdir / "auth.json"
            fd = os.open(self._auth_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(_auth_file_content(ref, creds))
            token = base64.b64encode(f"{creds.username}:{creds.password}".encode()).decode()
            self._secrets = [s for s in (creds.password, token) if s]

    def _access(self, prefix: str) -> list[str]:
        auth = (f"--{prefix}authfile={self._auth_file}" if self._auth_file is not None
                else f"--{prefix}no-creds")
        return [*self.policy.flags(self.ref, prefix), auth]

    def inspect(self, *extra: str, ref: ImageRef | None = None) -> bytes:
        target = ref or self.ref
        return self._run(["inspect", *self._access(""), *extra, target.transport()], _SKOPEO_TIMEOUT_S)

    def copy_to_layout(self, layout: Path, tag: str) -> None:
        self._run(["copy", "--quiet", *self._access("src-"), self.ref.transport(), f"oci:{layout}:{tag}"],
                  _COPY_TIMEOUT_S)

    def _run(self, args: list[str], timeout: float) -> bytes:
        argv = ["skopeo", f"--policy={self._policy_file}", *args]
        try:
            done = _run_tool(argv, timeout)
        except subprocess.TimeoutExpired:
            raise ImageImportError("unreachable", f"image {self.ref}: registry {self.ref.registry} did "
                                   f"not answer within {timeout:.0f}s; check that it is up and reachable"
                                   ) from None
        if done.returncode != 0:
            raise classify_skopeo_failure(self.ref, self._redact(done.stderr.decode(errors="replace")),
                                          has_credentials=self.creds is not None, policy=self.policy)
        return done.stdout

    def _redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text


# ---------------------------------------------------------------------------------------------------
# Failures


class ImageImportError(Exception):
    """An image that cannot be imported; `reason` is stable (not_found, unauthorized, tls, unreachable,
    foreign_architecture, too_large, unsupported, tool_missing, failed) and the message names the image
    and the fix, never a credential."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def _last_error_line(stderr: str) -> str:
    """skopeo's fatal line without logrus's time/level decoration."""
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    last = lines[-1] if lines else "no error output"
    match = re.search(r'msg="(.*)"\s*$', last)
    return match.group(1).replace('\\"', '"') if match else last


def classify_skopeo_failure(ref: ImageRef, stderr: str, *, has_credentials: bool,
                            policy: TransportPolicy) -> ImageImportError:
    detail = _last_error_line(stderr)
    text = detail.lower()
    where = f"image {ref}"
    if "manifest unknown" in text or "name unknown" in text or "not found" in text:
        return ImageImportError("not_found", f"{where}: registry {ref.registry} has no such repository or "
                                f"{'digest' if ref.digest else 'tag'}; check the name and the "
                                f"{'digest' if ref.digest else 'tag'} (what `skopeo list-tags` shows)")
    if "unauthorized" in text or "authentication required" in text or "denied" in text:
        if has_credentials:
            return ImageImportError("unauthorized", f"{where}: registry {ref.registry} refused the "
                                    "credentials (wrong username or password, or no pull access); "
                                    "give the right ones")
        return ImageImportError("unauthorized", f"{where}: registry {ref.registry} needs credentials to pull "
                                "this image; give a username and password (or a token) for it")
    if "server gave http response to https client" in text:
        return ImageImportError("tls", f"{where}: registry {ref.registry} speaks plain HTTP, allowed only "
                                "on a loopback address; serve it over HTTPS")
    if "x509" in text or "certificate" in text or "tls:" in text:
        ca = (f"add its CA certificate (a .crt file) to {policy.ca_dir}" if policy.ca_dir
              else "configure a CA directory holding its CA certificate (a .crt file)")
        return ImageImportError("tls", f"{where}: the TLS certificate of registry {ref.registry} cannot be "
                                f"verified ({detail.rsplit(': ', 1)[-1]}); {ca}, or use a certificate "
                                "from a public CA")
    if any(s in text for s in ("connection refused", "no such host", "i/o timeout", "network is unreachable",
                               "no route to host", "connection reset")):
        return ImageImportError("unreachable", f"{where}: cannot reach registry {ref.registry} "
                                f"({detail.rsplit(': ', 1)[-1]}); check the host and port and that it runs")
    return ImageImportError("failed", f"{where}: skopeo failed: {detail}")


def _tool_missing(tool: str) -> ImageImportError:
    return ImageImportError("tool_missing", f"{tool} is not installed; install the Debian package {tool}")


def _run_tool(argv: Sequence[str], timeout: float) -> subprocess.CompletedProcess[bytes]:
    if shutil.which(argv[0]) is None:
        raise _tool_missing(argv[0])
    return subprocess.run(list(argv), capture_output=True, timeout=timeout, check=False,
                          stdin=subprocess.DEVNULL)


# ---------------------------------------------------------------------------------------------------
# Inspect


@dataclass(frozen=True)
class ImageInfo:
    ref: ImageRef
    digest: str  # of the platform's manifest (an index resolved to the one for `architecture`)
    architecture: str
    os: str
    compressed_bytes: int  # config + layers, as the registry stores them


def host_architecture() -> str:
    machine = platform.machine()
    return _GOARCH.get(machine.lower(), machine.lower())


def _json(raw: bytes, what: str, ref: ImageRef) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError:
        raise ImageImportError("unsupported", f"image {ref}: the registry's {what} is not JSON") from None
    if not isinstance(value, dict):
        raise ImageImportError("unsupported", f"image {ref}: the registry's {what} is not a JSON object")
    return value


def _platform_entry(ref: ImageRef, index: dict[str, Any], architecture: str) -> str:
    entries = [m for m in index.get("manifests", []) if isinstance(m, dict)]
    for entry in entries:
        platform_ = entry.get("platform") or {}
        if platform_.get("architecture") == architecture and platform_.get("os") == "linux":
            return str(entry["digest"])
    platforms = [m.get("platform") or {} for m in entries]
    offered = sorted({f"{p.get('os')}/{p.get('architecture')}" for p in platforms})
    raise ImageImportError("foreign_architecture", f"image {ref} has no linux/{architecture} variant (it "
                           f"offers {', '.join(offered) or 'none'}); use an image built for "
                           f"linux/{architecture}")


def inspect(ref: ImageRef, creds: RegistryCredentials | None = None, *,
            policy: TransportPolicy = TransportPolicy(), architecture: str | None = None,
            max_bytes: int | None = None) -> ImageInfo:
    """Resolve `ref` to the manifest for the nodes' architecture and check it fits: the architecture
    (a multi-platform index is resolved to its linux/<architecture> entry) and `max_bytes`."""
    with tempfile.TemporaryDirectory(prefix="gpucloud-skopeo-") as workdir:
        return _inspect(_Skopeo(ref, creds, policy, Path(workdir)), architecture or host_architecture(),
                        max_bytes)


def _inspect(skopeo: _Skopeo, architecture: str, max_bytes: int | None) -> ImageInfo:
    ref = skopeo.ref
    raw = skopeo.inspect("--raw")
    manifest = _json(raw, "manifest", ref)
    if manifest.get("schemaVersion") == 1:
        raise ImageImportError("unsupported", f"image {ref} has a Docker schema 1 manifest, which is no "
                               "longer supported; push it again with a current docker or skopeo")
    digest = "sha256:" + hashlib.sha256(raw).hexdigest()
    if manifest.get("mediaType") in _INDEX_TYPES or "manifests" in manifest:
        digest = _platform_entry(ref, manifest, architecture)
        raw = skopeo.inspect("--raw", ref=ref.at(digest))
        manifest = _json(raw, "manifest", ref)
    pinned = ref.at(digest)
    config = _json(skopeo.inspect("--raw", "--config", ref=pinned), "image configuration", ref)
    found_os, found_arch = str(config.get("os", "")), str(config.get("architecture", ""))
    if (found_os, found_arch) != ("linux", architecture):
        raise ImageImportError("foreign_architecture", f"image {ref} is built for {found_os}/{found_arch}, "
                               f"the nodes run linux/{architecture}; use an image built for "
                               f"linux/{architecture}")
    blobs = [manifest.get("config") or {}, *(manifest.get("layers") or [])]
    size = sum(int(blob.get("size", 0)) for blob in blobs if isinstance(blob, dict))
    if max_bytes is not None and size > max_bytes:
        raise ImageImportError("too_large", f"image {ref} is {human_size(size)} compressed, over the "
                               f"{human_size(max_bytes)} allowed for an image; use a smaller image or raise "
                               "the limit")
    return ImageInfo(pinned, digest, found_arch, found_os, size)


def human_size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"


# ---------------------------------------------------------------------------------------------------
# Import


@dataclass(frozen=True)
class ImportedImage:
    digest: str
    bundle: Path
    size_bytes: int  # on disk, unpacked
    reused: bool  # the bundle was already there: nothing was pulled


def _hex(digest: str) -> str:
    if not _DIGEST.fullmatch(digest):
        raise ValueError(f"not a sha256 digest: {digest!r}")
    return digest.removeprefix("sha256:")


def bundle_path(store_dir: Path, digest: str) -> Path:
    return store_dir / "bundles" / _hex(digest)


def _prepare_store(store_dir: Path) -> None:
    for sub in ("bundles", "names", "tmp", "locks"):
        (store_dir / sub).mkdir(parents=True, exist_ok=True)
    for sub in ("", "bundles", "names", "locks"):  # every node's jobs read these, whoever they run as
        os.chmod(store_dir / sub, 0o755)


@contextlib.contextmanager
def _digest_lock(store_dir: Path, digest: str, *, blocking: bool = True) -> Iterator[bool]:
    """An flock per digest: two imports of one image unpack it once; GC skips an import under way."""
    # Readable by all: a job's runtime wrapper on a node holds a shared lock on its bundle's digest.
    fd = os.open(store_dir / "locks" / f"{_hex(digest)}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def _reuse(bundle: Path, digest: str) -> ImportedImage:
    metadata = json.loads((bundle / METADATA_FILE).read_text())
    return ImportedImage(digest, bundle, int(metadata["size_bytes"]), reused=True)


def import_image(ref: ImageRef, creds: RegistryCredentials | None, store_dir: Path, *,
                 max_bytes: int | None = None, policy: TransportPolicy = TransportPolicy(),
                 architecture: str | None = None) -> ImportedImage:
    """Pull `ref` once into `store_dir/bundles/<digest hex>`; an image already there (same digest) is
    reused at once, without pulling (a reference pinned by digest without asking the registry)."""
    _prepare_store(store_dir)
    if ref.digest and (bundle_path(store_dir, ref.digest) / METADATA_FILE).exists():
        return _reuse(bundle_path(store_dir, ref.digest), ref.digest)
    with tempfile.TemporaryDirectory(prefix="gpucloud-skopeo-") as private:
        skopeo = _Skopeo(ref, creds, policy, Path(private))
        info = _inspect(skopeo, architecture or host_architecture(), max_bytes)
        bundle = bundle_path(store_dir, info.digest)
        if (bundle / METADATA_FILE).exists():
            return _reuse(bundle, info.digest)
        with _digest_lock(store_dir, info.digest):
            if (bundle / METADATA_FILE).exists():  # imported by another worker while we waited
                return _reuse(bundle, info.digest)
            skopeo.ref = info.ref  # pull the manifest inspected, even if the tag moved since
            return _pull_and_unpack(skopeo, info, store_dir, bundle)


def _pull_and_unpack(skopeo: _Skopeo, info: ImageInfo, store_dir: Path, bundle: Path) -> ImportedImage:
    work = Path(tempfile.mkdtemp(prefix=f"import-{_hex(info.digest)}-", dir=store_dir / "tmp"))
    try:
        skopeo.copy_to_layout(work / "layout", "image")
        unpacked = work / "bundle"
        done = _run_tool(["umoci", "unpack", "--rootless", "--image", f"{work / 'layout'}:image",
                          str(unpacked)], _COPY_TIMEOUT_S)
        if done.returncode != 0:
            raise ImageImportError("failed", f"image {info.ref}: umoci could not unpack it: "
                                   f"{done.stderr.decode(errors='replace').strip()[-500:]}")
        _make_shareable(unpacked)
        size = _disk_usage(unpacked)
        (unpacked / METADATA_FILE).write_text(json.dumps({
            "reference": str(info.ref), "digest": info.digest, "architecture": info.architecture,
            "compressed_bytes": info.compressed_bytes, "size_bytes": size}, indent=1) + "\n")
        os.chmod(unpacked / METADATA_FILE, 0o644)
        os.rename(unpacked, bundle)  # atomic: a bundle is either whole or absent
        return ImportedImage(info.digest, bundle, size, reused=False)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _make_shareable(bundle: Path) -> None:
    """Every job user reads the bundle and nobody writes it: world-readable (directories traversable,
    executables executable), no group/other write bits; the root filesystem read-only for the runtime,
    with a tmpfs on /tmp (Slurm binds a batch step's script and I/O under /tmp/slurm)."""
    os.chmod(bundle, 0o755)
    for directory, dirs, files in os.walk(bundle):
        for entry in (*dirs, *files):
            path = os.path.join(directory, entry)
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                continue
            wanted = stat.S_IMODE(mode) & ~0o022 | 0o444
            if stat.S_ISDIR(mode):
                wanted |= 0o711  # the importer can still remove it (the nodes mount it read-only)
            elif mode & stat.S_IXUSR:
                wanted |= 0o111
            if wanted != stat.S_IMODE(mode):
                os.chmod(path, wanted)
    _adapt_runtime_config(bundle / "config.json")


def _adapt_runtime_config(config_file: Path) -> None:
    config = json.loads(config_file.read_text())
    config.setdefault("root", {"path": "rootfs"})["readonly"] = True
    mounts = config.setdefault("mounts", [])
    if not any(m.get("destination") == "/tmp" for m in mounts):
        mounts.append({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
                       "options": ["nosuid", "nodev", "mode=1777"]})
    # umoci --rootless maps container root to the importing user; the job's user differs, and a
    # rootless runtime maps whoever starts it when the configuration names no mapping.
    linux = config.get("linux", {})
    linux.pop("uidMappings", None)
    linux.pop("gidMappings", None)
    config_file.write_text(json.dumps(config, indent=1) + "\n")
    os.chmod(config_file, 0o644)


def _disk_usage(root: Path) -> int:
    """Bytes allocated, as `du` counts them (hard links once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for directory, dirs, files in os.walk(root):
        for entry in (*dirs, *files):
            info = os.lstat(os.path.join(directory, entry))
            if (info.st_dev, info.st_ino) not in seen:
                seen.add((info.st_dev, info.st_ino))
                total += info.st_blocks * 512
    return total


# ---------------------------------------------------------------------------------------------------
# Names and garbage collection


def switch(store_dir: Path, name: str, digest: str) -> Path:
    """Point `names/<name>` at the bundle of `digest`: a new symlink renamed over the old one, so a
    reader sees the old bundle or the new one, and a job already on the old bundle keeps it."""
    check_image_name(name)
    bundle = bundle_path(store_dir, digest)
    if not (bundle / METADATA_FILE).exists():
        raise ImageImportError("not_found", f"image {name}: no bundle for {digest} in {store_dir}; import it "
                               "first")
    link = store_dir / "names" / name
    temporary = store_dir / "names" / f".{name}.{os.getpid()}.{os.urandom(4).hex()}"
    os.symlink(os.path.join("..", "bundles", _hex(digest)), temporary)
    try:
        os.replace(temporary, link)
    except OSError:
        temporary.unlink(missing_ok=True)
        raise
    return link


def named_digests(store_dir: Path) -> dict[str, str]:
    """name -> digest for every name in the store."""
    names: dict[str, str] = {}
    directory = store_dir / "names"
    if not directory.is_dir():
        return names
    for link in directory.iterdir():
        if link.is_symlink() and IMAGE_NAME.fullmatch(link.name):
            names[link.name] = "sha256:" + Path(os.readlink(link)).name
    return names


def collect_garbage(store_dir: Path, in_use: set[str]) -> list[str]:
    """Remove the bundles no name points to and no running job uses (`in_use`: digests), and what
    crashed imports left behind; returns the digests removed."""
    if not (store_dir / "bundles").is_dir():
        return []
    keep = set(named_digests(store_dir).values()) | set(in_use)
    removed: list[str] = []
    for bundle in sorted((store_dir / "bundles").iterdir()):
        digest = f"sha256:{bundle.name}"
        if digest in keep or not _DIGEST.fullmatch(digest):
            continue
        # A job's container holds a shared lock on its bundle's digest while it runs (the nodes' runtime
        # wrapper, node_config.containers): such a bundle stays until the job ends.
        with _digest_lock(store_dir, digest, blocking=False) as free:
            if not free:
                continue
            doomed = store_dir / "tmp" / f"gc-{bundle.name}-{os.urandom(4).hex()}"
            os.rename(bundle, doomed)  # gone from bundles/ at once; the slow delete happens out of sight
        shutil.rmtree(doomed, ignore_errors=True)
        removed.append(digest)
    _remove_abandoned_imports(store_dir)
    return removed


def _remove_abandoned_imports(store_dir: Path) -> None:
    """Work directories of imports that died: their digest's lock is free (a live import holds it)."""
    for leftover in (store_dir / "tmp").iterdir():
        match = re.fullmatch(r"(?:import|gc)-([0-9a-f]{64})-.*", leftover.name)
        if match is None:
            continue
        with _digest_lock(store_dir, f"sha256:{match.group(1)}", blocking=False) as free:
            if free:
                shutil.rmtree(leftover, ignore_errors=True)


# ---------------------------------------------------------------------------------------------------
# A cluster's declared images, carried out on its store


def sync_store(store_dir: Path, wanted: Sequence[tuple[str, str]],
               credentials: Mapping[str, RegistryCredentials], *,
               policy: TransportPolicy = TransportPolicy()) -> tuple[ImageOutcome, ...]:
    """Make the store show `wanted` ((name, reference) pairs): import each image, switch its name when it
    arrived (a failed one keeps what its name showed), remove the names not wanted any more and the
    bundles nothing uses. One outcome per wanted image; an error names it as the API declares it."""
    _prepare_store(store_dir)
    outcomes = []
    for name, reference in wanted:
        try:
            ref = parse_image_ref(reference)
            free = shutil.disk_usage(store_dir).free  # what the store's file system can still take
            imported = import_image(ref, credentials.get(ref.registry), store_dir, max_bytes=free,
                                    policy=policy)
            switch(store_dir, name, imported.digest)
        except (ImageImportError, InvalidImageReference) as exc:
            message = exc.message if isinstance(exc, ImageImportError) else exc.detail
            outcomes.append(ImageOutcome(name, reference, error=f'container_images["{name}"]: {message}'))
        else:
            outcomes.append(ImageOutcome(name, reference, imported.digest, imported.size_bytes))
    names = {name for name, _ in wanted}
    for stale in set(named_digests(store_dir)) - names:
        (store_dir / "names" / stale).unlink(missing_ok=True)
    collect_garbage(store_dir, in_use=set())
    return tuple(outcomes)
