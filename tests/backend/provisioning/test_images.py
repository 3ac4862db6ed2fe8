"""Importing container images (`backend/provisioning/images.py`): references and transport rules, then
real pulls from Debian's docker-registry on loopback (one plain, one behind htpasswd, one on TLS with a
CA of the test's own) of a small busybox image the test builds with umoci and pushes with skopeo."""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
import json
import os
import shutil
import socket
import stat
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from backend.provisioning import images
from backend.provisioning.images import (
    ImageImportError,
    ImageRef,
    InvalidImageReference,
    RegistryCredentials,
    TransportPolicy,
    parse_image_ref,
)

HOST = images.host_architecture()  # what `umoci new` builds for, and what the nodes run
OTHER = "arm64" if HOST != "arm64" else "amd64"
TOOLS = {"skopeo": "skopeo", "umoci": "umoci", "docker-registry": "docker-registry",
         "htpasswd": "apache2-utils", "busybox": "busybox-static"}


# ---------------------------------------------------------------------------------------------------
# References, names, transport


@pytest.mark.parametrize(("reference", "registry", "repository", "tag", "digest", "canonical"), [
    ("nvcr.io/nvidia/pytorch:24.05-py3", "nvcr.io", "nvidia/pytorch", "24.05-py3", None,
     "nvcr.io/nvidia/pytorch:24.05-py3"),
    ("ghcr.io/org/img@sha256:" + "a" * 64, "ghcr.io", "org/img", None, "sha256:" + "a" * 64,
     "ghcr.io/org/img@sha256:" + "a" * 64),
    ("registry.internal:5000/team/train:v3", "registry.internal:5000", "team/train", "v3", None,
     "registry.internal:5000/team/train:v3"),
    ("127.0.0.1:5000/x:y", "127.0.0.1:5000", "x", "y", None, "127.0.0.1:5000/x:y"),
    ("ubuntu:22.04", "docker.io", "library/ubuntu", "22.04", None, "docker.io/library/ubuntu:22.04"),
    ("ubuntu", "docker.io", "library/ubuntu", "latest", None, "docker.io/library/ubuntu:latest"),
    ("nvidia/cuda:12.4.1-base-ubuntu22.04", "docker.io", "nvidia/cuda", "12.4.1-base-ubuntu22.04", None,
     "docker.io/nvidia/cuda:12.4.1-base-ubuntu22.04"),
    ("localhost/x", "localhost", "x", "latest", None, "localhost/x:latest"),
    ("[::1]:5000/a/b:c", "[::1]:5000", "a/b", "c", None, "[::1]:5000/a/b:c"),
])
def test_references_parse_the_way_docker_reads_them(reference: str, registry: str, repository: str,
                                                    tag: str | None, digest: str | None,
                                                    canonical: str) -> None:
    ref = parse_image_ref(reference)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (registry, repository, tag, digest)
    assert str(ref) == canonical
    assert parse_image_ref(str(ref)) == ref


@pytest.mark.parametrize(("reference", "says"), [
    ("", "write registry/repository:tag"),
    ("docker://ubuntu:22.04", 'drop "docker://"'),
    ("Ubuntu:22.04", 'write "ubuntu:22.04"'),
    ("ghcr.io/org/img@sha256:abc", "64 lowercase hex digits"),
    ("ghcr.io/org/img:-bad", "is not a tag"),
    ("registry.internal:99999/x:1", "is not a port"),
    ("ghcr.io/org/im%g:1", "lowercase letters, digits"),
    ("[nothost]:5000/x:1", "is not an IPv6 address"),
])
def test_a_bad_reference_is_named_with_the_fix(reference: str, says: str) -> None:
    with pytest.raises(InvalidImageReference) as raised:
        parse_image_ref(reference, field_path="container_images.train")
    assert f'container image "{reference}"' in raised.value.detail
    assert says in raised.value.detail
    assert raised.value.field == "container_images.train"


def test_image_names_are_single_lowercase_path_components() -> None:
    for good in ("pytorch", "train-v3", "a", "x_1.2", "a" * 63):
        assert images.check_image_name(good) == good
    for bad in ("", "Pytorch", "-x", ".hidden", "a/b", "a" * 64, "with space"):
        with pytest.raises(InvalidImageReference, match="/images/<name>"):
            images.check_image_name(bad)


def test_only_loopback_registries_may_speak_plain_http(tmp_path: Path) -> None:
    policy = TransportPolicy(ca_dir=tmp_path)
    for loopback in ("127.0.0.1:5000/x:1", "127.3.4.5/x:1", "localhost:5000/x:1", "[::1]:5000/x:1"):
        assert policy.flags(parse_image_ref(loopback), "src-") == ["--src-tls-verify=false"]
    for remote in ("nvcr.io/nvidia/pytorch:24.05-py3", "10.0.0.5:5000/x:1", "localhost.example.com/x:1"):
        assert policy.flags(parse_image_ref(remote), "") == ["--tls-verify=true", f"--cert-dir={tmp_path}"]
    assert TransportPolicy().flags(parse_image_ref("ghcr.io/a/b:1"), "") == ["--tls-verify=true"]
    strict = TransportPolicy(plain_http_on_loopback=False)
    assert strict.flags(parse_image_ref("127.0.0.1:5000/x:1"), "") == ["--tls-verify=true"]


def test_credentials_travel_in_a_private_auth_file_only(tmp_path: Path) -> None:
    ref = parse_image_ref("registry.internal:5000/team/train:v3")
    skopeo = images._Skopeo(ref, RegistryCredentials("alice", "s3cret"), TransportPolicy(), tmp_path)
    access = skopeo._access("src-")
    assert not any("s3cret" in arg or "alice" in arg for arg in access)
    auth_file = tmp_path / "auth.json"
    assert f"--src-authfile={auth_file}" in access
    assert stat.S_IMODE(auth_file.stat().st_mode) == 0o600
    entry = json.loads(auth_file.read_text())["auths"]["registry.internal:5000"]
    assert entry == {"auth": "YWxpY2U6czNjcmV0"}  # base64("alice:s3cret"), docker config.json's form
    assert "s3cret" not in repr(RegistryCredentials("alice", "s3cret"))
    anonymous = images._Skopeo(ref, None, TransportPolicy(), tmp_path / "..")
    assert "--no-creds" in anonymous._access("")


# ---------------------------------------------------------------------------------------------------
# Registries on loopback and a test image


def _require_tools() -> None:
    missing = [f"{tool} (Debian package {package})" for tool, package in TOOLS.items()
               if not shutil.which(tool)]
    if missing:
        pytest.fail(f"the image import tests need {', '.join(missing)}: apt-get install them (.ci/run does)")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Registry:
    port: int
    process: subprocess.Popen[bytes]
    scheme: str = "http"

    def ref(self, path: str) -> ImageRef:
        return parse_image_ref(f"127.0.0.1:{self.port}/{path}")


def _start_registry(root: Path, extra: str = "", scheme: str = "http") -> Registry:
    port = _free_port()
    root.mkdir(parents=True)
    config = root / "config.yml"
    config.write_text(f"version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n"
                      f"    rootdirectory: {root / 'data'}\nhttp:\n  addr: 127.0.0.1:{port}\n{extra}")
    with (root / "registry.log").open("wb") as log:  # the registry keeps its own descriptor
        process = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=log, stderr=log)
    deadline = time.monotonic() + 120  # a ceiling: only a registry that never listens reaches it
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return Registry(port, process, scheme)
        except OSError:
            if process.poll() is not None:
                break
            time.sleep(0.05)
    process.kill()
    pytest.fail(f"docker-registry did not start: {(root / 'registry.log').read_text()}")


def _stop(registry: Registry) -> None:
    registry.process.terminate()
    registry.process.wait(timeout=10)


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{' '.join(argv)}: {done.stderr}"


def _build_layout(layout: Path, work: Path) -> None:
    """An OCI layout with tags 1 and 2: busybox plus /etc/marker saying "one" or "two"."""
    _run("umoci", "init", "--layout", str(layout))
    _run("umoci", "new", "--image", f"{layout}:base")
    for tag, marker in (("1", "one"), ("2", "two")):
        bundle = work / f"bundle-{tag}"
        _run("umoci", "unpack", "--rootless", "--image", f"{layout}:base", str(bundle))
        rootfs = bundle / "rootfs"
        (rootfs / "bin").mkdir()
        (rootfs / "etc").mkdir()
        busybox = shutil.which("busybox")
        assert busybox is not None
        shutil.copy(busybox, rootfs / "bin" / "busybox")
        (rootfs / "bin" / "sh").symlink_to("busybox")
        (rootfs / "etc" / "marker").write_text(f"{marker}\n")
        (rootfs / "etc" / "secret").write_text("private to root in the image\n")
        os.chmod(rootfs / "etc" / "secret", 0o600)
        _run("umoci", "repack", "--image", f"{layout}:{tag}", str(bundle))
        _run("umoci", "config", "--image", f"{layout}:{tag}", "--config.cmd", "/bin/busybox")
    _run("umoci", "config", "--image", f"{layout}:1", "--tag", "other", "--architecture", OTHER)
    _add_index(layout, "multi", {"1": HOST, "other": OTHER})


def _add_index(layout: Path, tag: str, platforms: dict[str, str]) -> None:
    """A multi-platform image index over tags of the layout (as `docker buildx` pushes them)."""
    index = json.loads((layout / "index.json").read_text())
    by_tag = {m["annotations"]["org.opencontainers.image.ref.name"]: m for m in index["manifests"]}
    entries = [{"mediaType": by_tag[t]["mediaType"], "digest": by_tag[t]["digest"], "size": by_tag[t]["size"],
                "platform": {"architecture": arch, "os": "linux"}} for t, arch in platforms.items()]
    raw = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                      "manifests": entries}).encode()
    digest = hashlib.sha256(raw).hexdigest()
    (layout / "blobs" / "sha256" / digest).write_bytes(raw)
    index["manifests"].append({"mediaType": "application/vnd.oci.image.index.v1+json",
                               "digest": f"sha256:{digest}", "size": len(raw),
                               "annotations": {"org.opencontainers.image.ref.name": tag}})
    (layout / "index.json").write_text(json.dumps(index))


def _push(layout: Path, tag: str, registry: Registry, path: str, *creds: str) -> None:
    _run("skopeo", "--insecure-policy", "copy", "--quiet", "--all", "--dest-tls-verify=false", *creds,
         f"oci:{layout}:{tag}", f"docker://127.0.0.1:{registry.port}/{path}")


def _tls_files(directory: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 that it signed: (ca.crt, server cert, server key)."""
    now = dt.datetime.now(dt.UTC)

    def certificate(subject: str, key: ec.EllipticCurvePrivateKey, issuer: str,
                    issuer_key: ec.EllipticCurvePrivateKey, ca: bool) -> x509.Certificate:
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
                   .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - dt.timedelta(minutes=5))
                   .not_valid_after(now + dt.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if not ca:
            loopback = x509.IPAddress(ipaddress.ip_address("127.0.0.1"))
            builder = builder.add_extension(x509.SubjectAlternativeName([loopback]), critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    ca_key, server_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_cert = certificate("test registry CA", ca_key, "test registry CA", ca_key, ca=True)
    server_cert = certificate("127.0.0.1", server_key, "test registry CA", ca_key, ca=False)
    directory.mkdir()
    (directory / "cas").mkdir()
    (directory / "cas" / "ca.crt").write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    (directory / "server.pem").write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    (directory / "server.key").write_bytes(server_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return directory / "cas", directory / "server.pem", directory / "server.key"


@dataclass
class Registries:
    plain: Registry
    private: Registry
    tls: Registry
    ca_dir: Path
    digests: dict[str, str]  # tag -> manifest digest as skopeo reports it


@pytest.fixture(scope="module")
def registries(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registries]:
    _require_tools()
    root = tmp_path_factory.mktemp("registries")
    layout = root / "layout"
    _build_layout(layout, root)
    htpasswd = subprocess.run(["htpasswd", "-Bbn", "alice", "s3cret"], capture_output=True, text=True,
                              check=True).stdout
    (root / "htpasswd").write_text(htpasswd)
    ca_dir, cert, key = _tls_files(root / "tls")
    plain = _start_registry(root / "plain")
    started = [plain]
    try:
        private = _start_registry(root / "private", f"auth:\n  htpasswd:\n    realm: test\n"
                                  f"    path: {root / 'htpasswd'}\n")
        started.append(private)
        tls = _start_registry(root / "tls-registry", f"  tls:\n    certificate: {cert}\n    key: {key}\n",
                              scheme="https")
        started.append(tls)
        for tag in ("1", "2", "multi"):
            _push(layout, tag, plain, f"team/x:{tag}")
        _push(layout, "1", private, "team/x:1", "--dest-creds=alice:s3cret")
        _run("skopeo", "--insecure-policy", "copy", "--quiet", f"--dest-cert-dir={ca_dir}",
             f"oci:{layout}:1", f"docker://127.0.0.1:{tls.port}/team/x:1")
        digests = {}
        for tag in ("1", "2"):
            shown = subprocess.run(["skopeo", "inspect", "--tls-verify=false",
                                    f"docker://127.0.0.1:{plain.port}/team/x:{tag}"],
                                   capture_output=True, text=True, check=True).stdout
            digests[tag] = json.loads(shown)["Digest"]
        yield Registries(plain, private, tls, ca_dir, digests)
    finally:
        for registry in started:
            _stop(registry)


# ---------------------------------------------------------------------------------------------------
# Inspect


def test_inspect_resolves_digest_platform_and_size(registries: Registries) -> None:
    info = images.inspect(registries.plain.ref("team/x:1"))
    assert info.digest == registries.digests["1"]
    assert (info.os, info.architecture) == ("linux", HOST)
    assert info.ref.digest == info.digest  # what import pulls is pinned to what was inspected
    busybox_size = Path(shutil.which("busybox") or "").stat().st_size
    assert busybox_size // 4 < info.compressed_bytes < busybox_size  # compressed config + layers


def test_a_multi_platform_index_resolves_to_the_nodes_platform(registries: Registries,
                                                               tmp_path: Path) -> None:
    ref = registries.plain.ref("team/x:multi")
    host = images.inspect(ref, architecture=HOST)
    other = images.inspect(ref, architecture=OTHER)
    assert host.digest == registries.digests["1"]  # the index entry, not the index's own digest
    assert other.architecture == OTHER and other.digest not in (host.digest, registries.digests["2"])
    with pytest.raises(ImageImportError) as raised:
        images.inspect(ref, architecture="s390x")
    assert raised.value.reason == "foreign_architecture"
    offered = ", ".join(sorted([f"linux/{HOST}", f"linux/{OTHER}"]))
    assert raised.value.message == (f"image {ref} has no linux/s390x variant (it offers {offered}); "
                                    "use an image built for linux/s390x")
    # Content addressed: the index's amd64 entry is the bundle tag 1 already gave.
    first = images.import_image(registries.plain.ref("team/x:1"), None, tmp_path)
    again = images.import_image(ref, None, tmp_path)
    assert (again.bundle, again.reused) == (first.bundle, True)


def test_a_foreign_architecture_is_refused(registries: Registries) -> None:
    with pytest.raises(ImageImportError) as raised:
        images.inspect(registries.plain.ref("team/x:1"), architecture=OTHER)
    assert raised.value.reason == "foreign_architecture"
    assert str(registries.plain.ref("team/x:1")) in raised.value.message
    assert f"built for linux/{HOST}, the nodes run linux/{OTHER}" in raised.value.message


def test_an_image_over_the_budget_is_refused(registries: Registries, tmp_path: Path) -> None:
    with pytest.raises(ImageImportError) as raised:
        images.import_image(registries.plain.ref("team/x:1"), None, tmp_path, max_bytes=100_000)
    assert raised.value.reason == "too_large"
    assert f"image {registries.plain.ref('team/x:1')} is " in raised.value.message
    assert "over the 97.7 KiB allowed" in raised.value.message
    assert list((tmp_path / "bundles").iterdir()) == []


def test_a_missing_tag_says_so(registries: Registries) -> None:
    with pytest.raises(ImageImportError) as raised:
        images.inspect(registries.plain.ref("team/x:nope"))
    assert raised.value.reason == "not_found"
    assert f"image 127.0.0.1:{registries.plain.port}/team/x:nope" in raised.value.message
    assert "check the name and the tag" in raised.value.message


def test_credentials_wrong_or_missing_say_which(registries: Registries) -> None:
    ref = registries.private.ref("team/x:1")
    with pytest.raises(ImageImportError) as wrong:
        images.inspect(ref, RegistryCredentials("alice", "guess-again"))
    assert wrong.value.reason == "unauthorized"
    assert f"image {ref}: registry {ref.registry} refused the credentials" in wrong.value.message
    assert "guess-again" not in wrong.value.message
    with pytest.raises(ImageImportError) as missing:
        images.inspect(ref)
    assert missing.value.reason == "unauthorized"
    assert "needs credentials to pull this image" in missing.value.message
    assert images.inspect(ref, RegistryCredentials("alice", "s3cret")).digest == registries.digests["1"]


def test_a_registry_not_running_is_unreachable() -> None:
    ref = parse_image_ref(f"127.0.0.1:{_free_port()}/team/x:1")
    with pytest.raises(ImageImportError) as raised:
        images.inspect(ref)
    assert raised.value.reason == "unreachable"
    assert f"image {ref}: cannot reach registry {ref.registry} (connection refused)" in (
        raised.value.message)


def test_tls_is_verified_against_the_operators_ca_directory(registries: Registries) -> None:
    ref = registries.tls.ref("team/x:1")
    strict = TransportPolicy(plain_http_on_loopback=False)
    with pytest.raises(ImageImportError) as raised:
        images.inspect(ref, policy=strict)
    assert raised.value.reason == "tls"
    assert f"image {ref}: the TLS certificate of registry {ref.registry} cannot be verified" in (
        raised.value.message)
    assert "configure a CA directory" in raised.value.message
    trusted = TransportPolicy(ca_dir=registries.ca_dir, plain_http_on_loopback=False)
    assert images.inspect(ref, policy=trusted).digest == registries.digests["1"]
    with pytest.raises(ImageImportError) as plain:  # the plain registry, when HTTPS is required
        images.inspect(registries.plain.ref("team/x:1"), policy=strict)
    assert plain.value.reason == "tls" and "speaks plain HTTP" in plain.value.message


# ---------------------------------------------------------------------------------------------------
# Import, switch, garbage collection


def test_import_unpacks_a_shareable_bundle_once(registries: Registries, tmp_path: Path) -> None:
    ref = registries.plain.ref("team/x:1")
    imported = images.import_image(ref, None, tmp_path)
    digest = registries.digests["1"]
    assert (imported.digest, imported.reused) == (digest, False)
    assert imported.bundle == tmp_path / "bundles" / digest.removeprefix("sha256:")
    rootfs = imported.bundle / "rootfs"
    assert (rootfs / "etc" / "marker").read_text() == "one\n"
    assert os.access(rootfs / "bin" / "busybox", os.X_OK)
    assert stat.S_IMODE((rootfs / "etc" / "secret").stat().st_mode) == 0o644  # readable by every job
    assert stat.S_IMODE(imported.bundle.stat().st_mode) == 0o755
    config = json.loads((imported.bundle / "config.json").read_text())
    assert config["root"] == {"path": "rootfs", "readonly": True}
    assert {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
            "options": ["nosuid", "nodev", "mode=1777"]} in config["mounts"]
    assert "uidMappings" not in config["linux"]
    assert imported.size_bytes >= (rootfs / "bin" / "busybox").stat().st_size
    metadata = json.loads((imported.bundle / images.METADATA_FILE).read_text())
    assert metadata["digest"] == digest and metadata["reference"] == str(ref.at(digest))
    assert list((tmp_path / "tmp").iterdir()) == []

    inode = imported.bundle.stat().st_ino
    again = images.import_image(ref, None, tmp_path)
    assert (again.digest, again.bundle, again.size_bytes, again.reused) == (
        digest, imported.bundle, imported.size_bytes, True)
    assert imported.bundle.stat().st_ino == inode
    # Pinned by digest and already here: no registry is asked (this one does not exist).
    nowhere = parse_image_ref(f"127.0.0.1:{_free_port()}/team/x@{digest}")
    assert images.import_image(nowhere, None, tmp_path).reused


def test_import_with_credentials(registries: Registries, tmp_path: Path) -> None:
    imported = images.import_image(registries.private.ref("team/x:1"), RegistryCredentials("alice", "s3cret"),
                                   tmp_path)
    assert (imported.bundle / "rootfs" / "etc" / "marker").read_text() == "one\n"
    with pytest.raises(ImageImportError) as raised:
        images.import_image(registries.private.ref("team/x:2"), RegistryCredentials("alice", "nope"),
                            tmp_path)
    assert raised.value.reason == "unauthorized"


def test_switch_keeps_the_old_bundle_for_running_jobs_until_collected(registries: Registries,
                                                                     tmp_path: Path) -> None:
    one = images.import_image(registries.plain.ref("team/x:1"), None, tmp_path)
    two = images.import_image(registries.plain.ref("team/x:2"), None, tmp_path)
    link = images.switch(tmp_path, "train", one.digest)
    assert link == tmp_path / "names" / "train"
    assert os.readlink(link) == f"../bundles/{one.digest.removeprefix('sha256:')}"
    with (link / "rootfs" / "etc" / "marker").open() as opened_by_a_job:
        images.switch(tmp_path, "train", two.digest)
        assert (link / "rootfs" / "etc" / "marker").read_text() == "two\n"
        assert images.named_digests(tmp_path) == {"train": two.digest}
        assert [p.name for p in (tmp_path / "names").iterdir()] == ["train"]  # no temporary link left
        assert images.collect_garbage(tmp_path, in_use={one.digest}) == []
        assert one.bundle.is_dir()
        assert images.collect_garbage(tmp_path, in_use=set()) == [one.digest]
        assert not one.bundle.exists() and two.bundle.is_dir()
        assert opened_by_a_job.read() == "one\n"
    assert list((tmp_path / "tmp").iterdir()) == []


def test_switch_needs_an_imported_bundle_and_a_valid_name(tmp_path: Path) -> None:
    with pytest.raises(ImageImportError, match="import it first"):
        images.switch(tmp_path, "train", "sha256:" + "b" * 64)
    with pytest.raises(InvalidImageReference):
        images.switch(tmp_path, "../escape", "sha256:" + "b" * 64)


def test_garbage_collection_removes_what_a_crashed_import_left(tmp_path: Path) -> None:
    images._prepare_store(tmp_path)
    leftover = tmp_path / "tmp" / f"import-{'c' * 64}-x1"
    (leftover / "layout").mkdir(parents=True)
    with images._digest_lock(tmp_path, "sha256:" + "d" * 64):
        running = tmp_path / "tmp" / f"import-{'d' * 64}-x2"
        running.mkdir()
        assert images.collect_garbage(tmp_path, in_use=set()) == []
        assert running.exists()  # its import holds the lock
    assert not leftover.exists()
