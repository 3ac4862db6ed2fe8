"""Launch time of the self-contained provider package against today's filesystem-mirror launcher.

Both run on the same interpreter (the package's launcher is pointed at it with GPUCLOUD_PYTHON, so a
`python3` shim on PATH does not count), with the environment Terraform sets, launches interleaved so
that machine load hits both alike:

- mirror launcher: `install --mirror`'s script, exec'ing this venv's Python on the venv's packages
  (bytecode cached in the venv);
- package: this machine's zip built by release/provider_package.py (wheels from PyPI, cached in
  build/provider-wheels) and unpacked as Terraform unpacks it, shipped bytecode only.

Figures: spawn -> handshake line, and spawn -> health check answered over mutual TLS (the server and the
provider loaded), and the CPU time the process used to get there (user + system: what the start-up
costs, unlike wall time nearly unaffected by other load on the machine). Also the package's size and
whether a rebuild is byte-identical.
"""

from __future__ import annotations

import hashlib
import os
import resource
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

LAUNCHES = 25
MEASURES = {
    "handshake_ms": "spawn -> handshake line",
    "ready_ms": "spawn -> health check (mTLS)",
    "ready_cpu_ms": "CPU time of the process to that point",  # steady on a loaded machine
}


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _unpack(zip_path: Path, directory: Path) -> Path:
    """Unpack as Terraform does (modes kept); returns the executable."""
    with zipfile.ZipFile(zip_path) as archive:
        for info in archive.infolist():
            target = directory / info.filename
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(archive.read(info))
            target.chmod((info.external_attr >> 16) & 0o777)
    return next(directory.glob("terraform-provider-gpucloud_v*"))


def run(launches: int = LAUNCHES) -> dict[str, Any]:
    from benchmarks.launch import _summary, _time_handshakes, _time_ready
    from benchmarks.stats import table
    from provider.plugin.install import terraform_platform, write_mirror
    from release.provider_package import DEFAULT_WHEELS, build
    from tests.provider.plugin.launching import make_client_certificate, terraform_environment

    client_cert = make_client_certificate()
    env = terraform_environment(client_cert)
    env.pop("PYTHONPATH", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as on a user's machine
    env["GPUCLOUD_PYTHON"] = os.path.realpath(sys.executable)
    platform = terraform_platform()
    with tempfile.TemporaryDirectory(prefix="bench-package-") as scratch:
        root = Path(scratch)
        started = time.perf_counter()
        package = build(platform, version="0.0.0", out_dir=root / "one", wheels_dir=DEFAULT_WHEELS)
        build_s = time.perf_counter() - started
        again = build(platform, version="0.0.0", out_dir=root / "two", wheels_dir=DEFAULT_WHEELS)
        identical = package.read_bytes() == again.read_bytes()
        digest = hashlib.sha256(package.read_bytes()).hexdigest()
        size_mb = package.stat().st_size / 1e6
        launchers = {
            "mirror launcher (today)": write_mirror(
                root / "mirror", namespace="gpucloud", type_name="gpucloud", version="0.0.0",
                launch_module="provider.plugin.main",
            ),
            "package (zip, unpacked)": _unpack(package, root / "unpacked"),
        }
        handshakes: dict[str, list[float]] = {name: [] for name in launchers}
        ready: dict[str, list[float]] = {name: [] for name in launchers}
        cpu: dict[str, list[float]] = {name: [] for name in launchers}
        for launcher in launchers.values():
            _time_handshakes(launcher, env, 3)  # warm the page cache (and the venv's bytecode cache)
        for _ in range(launches):  # interleaved: load on the machine affects both alike
            for name, launcher in launchers.items():
                handshakes[name] += _time_handshakes(launcher, env, 1)
                before = _children_cpu_s()
                ready[name] += _time_ready(launcher, env, client_cert, 1)
                cpu[name].append(_children_cpu_s() - before)
    figures: dict[str, Any] = {
        name: {"handshake_ms": _summary(handshakes[name]), "ready_ms": _summary(ready[name]),
               "ready_cpu_ms": _summary(cpu[name])}
        for name in launchers
    }
    rows = []
    for name, values in figures.items():
        for measure, label in MEASURES.items():
            summary = values[measure]
            rows.append([name, label, *(f"{summary[key]:.1f}" for key in ("median", "p90", "min"))])
    print(f"provider package vs mirror launcher, {launches} interleaved launches each, {platform} (ms)")
    print(table(["launcher", "measure", "median", "p90", "min"], rows))
    mirror, zipped = figures["mirror launcher (today)"], figures["package (zip, unpacked)"]
    for measure in MEASURES:
        ratio = zipped[measure]["median"] / mirror[measure]["median"]
        figures[f"{measure}_package_to_mirror_ratio"] = round(ratio, 2)
    figures.update(build_s=round(build_s, 1), identical_rebuild=identical, size_mb=round(size_mb, 1))
    print(
        f"package/mirror median: handshake {figures['handshake_ms_package_to_mirror_ratio']}x, "
        f"ready {figures['ready_ms_package_to_mirror_ratio']}x, ready CPU "
        f"{figures['ready_cpu_ms_package_to_mirror_ratio']}x; build {build_s:.1f} s; "
        f"rebuild byte-identical: {identical} (sha256 {digest[:16]}), {size_mb:.1f} MB"
    )
    return figures


def main() -> None:
    run()


if __name__ == "__main__":
    main()
