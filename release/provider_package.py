"""The provider as Terraform installs any provider: one self-contained zip per platform, reproducible.

    python -m release.provider_package build [--platform linux_amd64 ...] [--out dist/provider]
    python -m release.provider_package sign --key KEY [--out dist/provider]
    python -m release.provider_package lock          refresh the pinned hashes of the dependencies

`terraform-provider-gpucloud_<version>_<os>_<arch>.zip` holds

    terraform-provider-gpucloud_v<version>   a /bin/sh launcher: `python3 -I -S` on lib/ beside it
    lib/                                     the provider package, its pure-Python dependencies and the
                                             platform's binary wheels (every supported CPython: their
                                             extension modules carry the version in their file names,
                                             so one tree serves them all), with bytecode for the build's
                                             CPython (unchecked-hash .pyc: never rewritten)
    licenses/<distribution>/                 the dependencies' licence files

It needs `python3` (CPython 3.11 to 3.14) on the user's machine and nothing of ours. The same commit
builds the same bytes: the dependencies are pinned by hash (release/provider-requirements.txt), entries
are sorted with fixed timestamps and permissions, bytecode is compiled with a fixed hash seed and names
paths inside the package only, and no directory entries are written (Terraform's `h1:` hash of a zip
would count them, the hash of the unpacked directory would not).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TYPE_NAME = "gpucloud"
REQUIREMENTS = Path(__file__).with_name("provider-requirements.txt")
DEFAULT_OUT = REPO / "dist" / "provider"
DEFAULT_WHEELS = REPO / "build" / "provider-wheels"
PYTHON_VERSIONS = ("3.11", "3.12", "3.13", "3.14")
# pip's --platform tags per Terraform platform: manylinux2014 (glibc 2.17) and macOS 11, as the wheels
# of msgpack and protobuf are published.
PLATFORM_TAGS = {
    "linux_amd64": ("manylinux_2_17_x86_64", "manylinux2014_x86_64"),
    "linux_arm64": ("manylinux_2_17_aarch64", "manylinux2014_aarch64"),
    "darwin_arm64": ("macosx_11_0_arm64",),
}
ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # the earliest a zip can say: no build time leaks in
BOOT_MODULE = "gpucloud_provider_boot"
# Parts of the provider the plugin never imports (the CLI is `pip install gpucloud`; the gRPC client
# stubs need grpcio, which the plugin does not: it serves with provider/plugin/http2.py).
EXCLUDED_SOURCE = ("provider/cli/",)
EXCLUDED_SUFFIX = "_pb2_grpc.py"
SHA256SUMS = "terraform-provider-{type}_{version}_SHA256SUMS"


def project_version() -> str:
    """The version in pyproject.toml (the package's version unless --version says otherwise)."""
    return str(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"])


def package_name(version: str, platform: str) -> str:
    return f"terraform-provider-{TYPE_NAME}_{version}_{platform}.zip"


def launcher_text(version: str, platform: str) -> str:
    """The executable Terraform runs. `-I` keeps PYTHON* variables and Terraform's working directory
    out of the imports, `-S` skips `site`; `${0%/*}` is this package's directory (Terraform runs the
    executable by its full path), so nothing of the build machine is named."""
    return (
        "#!/bin/sh\n"
        f"# {TYPE_NAME}/{TYPE_NAME} {version} for {platform}: the provider runs on python3 (CPython "
        f"{PYTHON_VERSIONS[0]} to {PYTHON_VERSIONS[-1]};\n"
        "# GPUCLOUD_PYTHON names another interpreter) from lib/ beside this file.\n"
        'case $0 in */*) here=${0%/*} ;; *) here=. ;; esac\n'
        'exec "${GPUCLOUD_PYTHON:-python3}" -I -S -c '
        f"'import sys; sys.path.append(sys.argv.pop(1)); import {BOOT_MODULE}' "
        '"$here/lib" "$@"\n'
    )


def boot_module_text(cache_tag: str, version: str, platform: str, build_digest: str) -> str:
    """Checks the interpreter, keeps bytecode out of the package directory, starts the provider.
    `build_digest` names the package's contents (`content_digest`): it keys the warm daemon."""
    description = f"{TYPE_NAME}/{TYPE_NAME} {version} {platform} package {build_digest}"
    supported = ", ".join(repr((3, int(v.split(".")[1]))) for v in PYTHON_VERSIONS)
    return f'''"""Start the gpucloud provider from this package (written by release/provider_package.py)."""
import sys

if sys.implementation.name != "cpython" or sys.version_info[:2] not in ({supported}):
    sys.stderr.write(
        "terraform-provider-{TYPE_NAME}: needs CPython {PYTHON_VERSIONS[0]} to {PYTHON_VERSIONS[-1]}, but "
        + sys.executable + " is " + sys.implementation.name + " " + sys.version.split()[0]
        + ". Install one and put it on PATH as python3, or name it in GPUCLOUD_PYTHON.\\n"
    )
    raise SystemExit(1)
if sys.implementation.cache_tag == {cache_tag!r}:
    # This interpreter's bytecode ships in the package. Write none: lock files hold the directory's hash.
    sys.dont_write_bytecode = True
else:
    # Another CPython: compile once into the user's cache, never into the package directory.
    import os

    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    sys.pycache_prefix = os.path.join(cache, "gpucloud-provider", "pycache")

# Served warm when it can be (a per-user daemon that forks a pre-imported provider per launch, the same
# path as the mirror launcher's: provider/plugin/warm_client.py), else cold in this process.
import hashlib  # not json: it imports `re`, milliseconds on every launch
import os.path

from provider.plugin.warm_client import launch

paths = [os.path.abspath(sys.path[-1])]  # this package's lib/ (the daemon runs in /)
# One daemon per user, build and interpreter: not per copy of the package (Terraform unpacks one into
# every working directory) nor per `python3` on PATH (shims and venvs of one CPython share its binary).
interpreter = os.path.realpath(sys.executable)
key = hashlib.sha256("\\0".join([{description!r}, "provider.plugin.main", interpreter, sys.version]).encode())
launch("provider.plugin.main", key.hexdigest()[:24], paths)
'''


# --- dependencies -------------------------------------------------------------------------------------


def pinned_requirements(path: Path = REQUIREMENTS) -> list[str]:
    """`name==version` of every pinned dependency."""
    return re.findall(r"^([A-Za-z0-9_.\-]+==[^\s\\]+)", path.read_text(), flags=re.MULTILINE)


def _pip_download(
    destination: Path, platform: str, python: str, requirements: Sequence[str], *, hashes: bool,
    offline: bool = False,
) -> None:
    abi = "cp" + python.replace(".", "")
    command = [
        sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
        "--only-binary=:all:", "--implementation", "cp", "--python-version", python,
        "--abi", abi, "--abi", "abi3", "--abi", "none", "--dest", str(destination),
    ]
    for tag in PLATFORM_TAGS[platform]:
        command += ["--platform", tag]
    command += ["--require-hashes", "-r", str(REQUIREMENTS)] if hashes else list(requirements)
    if offline:
        command += ["--no-index", "--find-links", str(destination)]
    destination.mkdir(parents=True, exist_ok=True)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL if offline else None)


def download_wheels(platform: str, wheels_dir: Path) -> list[Path]:
    """The pinned wheels of `platform` for every supported CPython (pip skips those already there)."""
    pinned = set(re.findall(r"--hash=sha256:([0-9a-f]{64})", REQUIREMENTS.read_text()))
    found: list[Path] = []
    for python in PYTHON_VERSIONS:
        destination = wheels_dir / platform / python
        try:  # what an earlier build downloaded, checked against the hashes: no index lookups
            _pip_download(destination, platform, python, [], hashes=True, offline=True)
        except subprocess.CalledProcessError:
            _pip_download(destination, platform, python, [], hashes=True)
        # Only pinned files: the cache may still hold wheels of versions pinned before.
        found += [wheel for wheel in sorted(destination.glob("*.whl"))
                  if hashlib.sha256(wheel.read_bytes()).hexdigest() in pinned]
    return found


def lock(wheels_dir: Path) -> None:
    """Rewrite provider-requirements.txt with the hashes of every wheel any target needs."""
    pins = pinned_requirements()
    hashes: dict[str, set[str]] = {pin: set() for pin in pins}
    with tempfile.TemporaryDirectory(dir=wheels_dir.parent if wheels_dir.parent.exists() else None) as tmp:
        for platform in PLATFORM_TAGS:
            for python in PYTHON_VERSIONS:
                destination = Path(tmp) / platform / python
                _pip_download(destination, platform, python, pins, hashes=False)
                for wheel in destination.glob("*.whl"):
                    name = wheel.name.split("-")[0].lower().replace("_", "-")
                    pin = next(p for p in pins if p.split("==")[0].lower().replace("_", "-") == name)
                    hashes[pin].add(hashlib.sha256(wheel.read_bytes()).hexdigest())
    lines = [
        "# The provider package's dependencies (release/provider_package.py), pinned with the hash of every",
        "# wheel a target platform uses. Edit the versions, then: python -m release.provider_package lock",
    ]
    for pin in sorted(pins, key=str.lower):
        lines.append(pin + " \\")
        lines += [f"    --hash=sha256:{digest} \\" for digest in sorted(hashes[pin])]
        lines[-1] = lines[-1].removesuffix(" \\")
    REQUIREMENTS.write_text("\n".join(lines) + "\n")


# --- the package tree ---------------------------------------------------------------------------------


def _distribution(wheel: Path) -> str:
    return wheel.name.split("-")[0].lower().replace("_", "-")


def wheel_files(wheels: Iterable[Path]) -> dict[str, bytes]:
    """What the wheels install, under lib/ (licences under licenses/); identical paths must agree."""
    files: dict[str, bytes] = {}
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                if name.endswith("/") or "__pycache__/" in name or name.endswith((".pyc", ".pyi")):
                    continue
                top, _, rest = name.partition("/")
                if top.endswith(".dist-info"):
                    if not re.search(r"(LICEN[CS]E|COPYING|NOTICE|AUTHORS)", rest, re.IGNORECASE):
                        continue
                    target = f"licenses/{_distribution(wheel)}/{rest.removeprefix('licenses/')}"
                elif top.endswith(".data"):
                    raise ValueError(f"{wheel.name}: .data directories are not supported ({name})")
                else:
                    target = f"lib/{name}"
                content = archive.read(name)
                if files.setdefault(target, content) != content:
                    raise ValueError(f"{target} differs between wheels (last: {wheel.name})")
    return files


def provider_files() -> dict[str, bytes]:
    """The provider package as committed (git's list of files), without the CLI and type stubs."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "provider"], check=True, capture_output=True
    ).stdout.decode().split("\0")
    files = {}
    for name in filter(None, listed):
        if name.startswith(EXCLUDED_SOURCE) or name.endswith(EXCLUDED_SUFFIX):
            continue
        if not name.endswith((".py", ".json")):
            continue
        files[f"lib/{name}"] = (REPO / name).read_bytes()
    return files


_COMPILE = """
import json, py_compile, sys
root = sys.argv[1]
for name in json.load(sys.stdin):
    py_compile.compile(
        f"{root}/{name}", dfile=name, doraise=True,
        invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
    )
"""


def compile_bytecode(files: dict[str, bytes]) -> None:
    """Add an unchecked-hash .pyc beside every module, for this interpreter (sys.executable).
    A fresh process with a fixed hash seed: set and frozenset constants are marshalled in hash order."""
    sources = sorted(name for name in files if name.endswith(".py"))
    with tempfile.TemporaryDirectory() as staging:
        for name in sources:
            path = Path(staging, name)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(files[name])
        subprocess.run(
            [sys.executable, "-I", "-c", _COMPILE, staging],
            input=json.dumps(sources), text=True, check=True, env={**os.environ, "PYTHONHASHSEED": "0"},
        )
        for path in Path(staging).rglob("*.pyc"):
            files[path.relative_to(staging).as_posix()] = path.read_bytes()


def content_digest(files: dict[str, bytes]) -> str:
    """A short hash of the package's files: two builds of one version that differ never share a daemon."""
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return digest.hexdigest()[:16]


def write_zip(path: Path, files: dict[str, bytes], executables: Iterable[str]) -> None:
    """Sorted entries, fixed date, fixed modes, no directory entries: the same files give the same bytes."""
    executable = set(executables)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=ZIP_DATE)
            info.create_system = 3  # Unix: the mode bits below are honoured when Terraform unpacks
            mode = 0o755 if name in executable or name.endswith(".so") else 0o644
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            # Extension modules are most of the bytes and gain little from harder work.
            archive.writestr(info, files[name], compresslevel=1 if name.endswith(".so") else 9)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_bytes(buffer.getvalue())
    temporary.replace(path)


def build(platform: str, *, version: str, out_dir: Path, wheels_dir: Path) -> Path:
    """Build the package of one platform; returns the zip's path."""
    if platform not in PLATFORM_TAGS:
        raise ValueError(f"unknown platform {platform!r}; known: {', '.join(PLATFORM_TAGS)}")
    files = wheel_files(download_wheels(platform, wheels_dir))
    files.update(provider_files())
    # The bytecode is compiled by this interpreter (sys.executable), so its tag is known beforehand.
    boot = boot_module_text(sys.implementation.cache_tag, version, platform, content_digest(files))
    files[f"lib/{BOOT_MODULE}.py"] = boot.encode()
    compile_bytecode(files)
    launcher = f"terraform-provider-{TYPE_NAME}_v{version}"
    files[launcher] = launcher_text(version, platform).encode()
    path = out_dir / package_name(version, platform)
    write_zip(path, files, [launcher])
    return path


# --- signing ------------------------------------------------------------------------------------------


def sign(out_dir: Path, *, version: str, key: str, gnupg_home: Path | None = None) -> Path:
    """SHA256SUMS over the version's zips, its detached signature (gpg, binary) and the public key
    (`signing-key.asc`, ASCII armor): what the backend's registry serves. Returns the SHA256SUMS path."""
    zips = sorted(out_dir.glob(f"terraform-provider-{TYPE_NAME}_{version}_*.zip"))
    if not zips:
        raise FileNotFoundError(f"no packages of version {version} in {out_dir}: build them first")
    sums = out_dir / SHA256SUMS.format(type=TYPE_NAME, version=version)
    sums.write_text("".join(f"{hashlib.sha256(z.read_bytes()).hexdigest()}  {z.name}\n" for z in zips))
    gpg = ["gpg", "--batch", "--yes", "--quiet"]
    if gnupg_home is not None:
        gpg += ["--homedir", str(gnupg_home)]
    subprocess.run([*gpg, "--local-user", key, "--output", f"{sums}.sig", "--detach-sign", str(sums)],
                   check=True)
    subprocess.run([*gpg, "--armor", "--output", str(out_dir / "signing-key.asc"), "--export", key],
                   check=True)
    return sums


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m release.provider_package", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    build_command = commands.add_parser("build", help="build provider packages")
    build_command.add_argument("--platform", action="append", choices=sorted(PLATFORM_TAGS),
                               help="Terraform platform (repeatable; default: this machine's)")
    for command in (build_command, commands.add_parser("sign", help="write and sign SHA256SUMS")):
        command.add_argument("--version", default=None, help="default: pyproject.toml's")
        command.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    build_command.add_argument("--wheels", type=Path, default=DEFAULT_WHEELS, help="download cache")
    commands.choices["sign"].add_argument("--key", required=True, help="gpg key id, fingerprint or e-mail")
    commands.add_parser("lock", help="refresh the hashes in provider-requirements.txt").add_argument(
        "--wheels", type=Path, default=DEFAULT_WHEELS)
    args = parser.parse_args(argv)
    if args.command == "lock":
        lock(args.wheels)
        return 0
    version = args.version or project_version()
    if args.command == "sign":
        print(sign(args.out, version=version, key=args.key))
        return 0
    if args.platform is None:
        from provider.plugin.install import terraform_platform

        args.platform = [terraform_platform()]
    for platform in args.platform:
        path = build(platform, version=version, out_dir=args.out, wheels_dir=args.wheels)
        print(f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
