"""`terraform plan` / `apply` wall time: the test provider against Terraform's own floor.

For 1, 50 and 200 resources, the same configuration shape is run with the test-only provider's
`conformance_simple` (installed from a filesystem mirror, launched by Terraform over TLS like any
provider) and with Terraform's built-in `terraform_data` (no provider process at all), interleaved in
the same invocation so both see the same machine load. Terraform 1.11 from PATH, default
`-parallelism`. Per repetition, on a fresh state: `plan` (N creates), `apply` (N creates), `re-plan`
(refresh of N existing resources: N ReadResource calls), then an untimed `destroy`. Medians printed.

Environment: BENCH_REPETITIONS (default 5), BENCH_SIZES (default "1,50,200"),
BENCH_PROFILE=1 also profiles the provider (py-spy) during a plan and re-plan of the largest size.
"""

from __future__ import annotations

import os
import shutil
import statistics
from pathlib import Path

from acceptance.harness import Terraform
from benchmarks.stats import table

REPO_ROOT = Path(__file__).resolve().parents[1]
WORKSPACE = REPO_ROOT / ".bench" / "plan_apply"
OPERATIONS = ("plan", "apply", "re-plan")
RATIO_TARGET = 2.0  # at the largest size

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


def _sizes() -> list[int]:
    return [int(size) for size in os.environ.get("BENCH_SIZES", "1,50,200").split(",")]


def _repetitions() -> int:
    return int(os.environ.get("BENCH_REPETITIONS", "5"))


def write_conformance_mirror(directory: Path) -> Path:
    """The test provider's mirror entry, written exactly as the acceptance suite writes it."""
    from provider.plugin.install import write_mirror

    write_mirror(directory, namespace="gpucloud", type_name="conformance", version="0.1.0",
                 launch_module="acceptance.conformance.main")
    return directory


def prepare(count: int, mirror: Path) -> dict[str, Terraform]:
    """Two initialised working directories for `count` resources: built-in and test provider."""
    builtin = Terraform(WORKSPACE / f"terraform_data-{count}", mirror=None)
    builtin.write_main(BUILTIN_CONFIG.format(count=count))
    provider = Terraform(WORKSPACE / f"conformance_simple-{count}", mirror=mirror)
    provider.write_main(PROVIDER_CONFIG.format(count=count))
    for tf in (builtin, provider):
        tf.init()
    return {"terraform_data": builtin, "conformance_simple": provider}


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


def run() -> None:
    shutil.rmtree(WORKSPACE, ignore_errors=True)
    mirror = write_conformance_mirror(WORKSPACE / "mirror")
    sizes, repetitions = _sizes(), _repetitions()
    load_before = os.getloadavg()[0]
    samples = measure({count: prepare(count, mirror) for count in sizes}, repetitions)
    medians = {key: statistics.median(seconds) for key, seconds in samples.items()}
    print(f"Terraform 1.11 from PATH; median of {repetitions} runs; default -parallelism (10); "
          f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after, {os.cpu_count()} CPUs")
    rows: list[list[str]] = []
    for count in sizes:
        for operation in OPERATIONS:
            builtin = medians[count, "terraform_data", operation]
            provider = medians[count, "conformance_simple", operation]
            rows.append([str(count), operation, f"{builtin * 1000:.0f}", f"{provider * 1000:.0f}",
                         f"{provider / builtin:.2f}x"])
    print(table(["resources", "command", "terraform_data ms", "conformance_simple ms", "ratio"], rows))
    smallest, largest = min(sizes), max(sizes)
    for operation in OPERATIONS:
        ratio = _ms(medians, largest, "conformance_simple", operation) / _ms(
            medians, largest, "terraform_data", operation)
        verdict = "meets" if ratio <= RATIO_TARGET else "MISSES"
        print(f"{operation} at {largest}: {ratio:.2f}x, {verdict} the target of <= {RATIO_TARGET:.1f}x")
    if largest > smallest:
        print(f"\ncost model: fixed = time at {smallest}; per resource = slope from {smallest} to {largest}")
        rows = []
        for operation in OPERATIONS:
            for kind in ("terraform_data", "conformance_simple"):
                fixed, top = _ms(medians, smallest, kind, operation), _ms(medians, largest, kind, operation)
                rows.append([operation, kind, f"{fixed:.0f}", f"{(top - fixed) / (largest - smallest):.2f}"])
        print(table(["command", "kind", "fixed ms", "per resource ms"], rows))
    print(f"\nprovider processes Terraform starts per command ({largest} resources): "
          + ", ".join(f"{operation} {launches}" for operation, launches in
                      count_launches(prepare(largest, mirror)["conformance_simple"]).items()))
    if os.environ.get("BENCH_PROFILE") == "1":
        from benchmarks.provider_profile import profile_plan

        profile_plan(prepare(largest, mirror)["conformance_simple"], WORKSPACE / "profile")
