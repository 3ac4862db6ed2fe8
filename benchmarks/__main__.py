"""`python -m benchmarks [NAME...]`: run every benchmark module (or the named ones) and print figures.

Adding a benchmark is one line in BENCHMARKS: a module under benchmarks/ with a `run()` that prints
its figures (a return value is ignored). A module that is missing or fails makes the exit code
non-zero; the others still run.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
import traceback

BENCHMARKS = [
    "launch",  # spawn to handshake line of the provider (benchmarks/launch.py, plugin helper)
    "package_launch",  # the self-contained provider zip vs the mirror launcher, same run
    "plan_apply",  # terraform plan/apply, test provider vs built-in terraform_data
    "backend_load",  # HTTP API throughput and latency on SQLite and PostgreSQL vs a bare ASGI app
    "engine_throughput",  # provisioning engine: clusters reconciled per second, 1 and 2 workers
    "day2_reads",  # GET nodes, metrics?window=1d and the cluster of a 64-node cluster, both stores
    "admission_fleet",  # per-cluster admission on top of 200 and 5,000 live clusters, and their ratio
    "local_driver",  # local driver (root): 2-node create, scale 2->3, delete; baseline git ref vs this tree
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help=f"benchmarks to run (default: all of {', '.join(BENCHMARKS)})")
    names = parser.parse_args(argv).names or BENCHMARKS
    unknown = sorted(set(names) - set(BENCHMARKS))
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
    failed: list[str] = []
    for name in names:
        print(f"== {name} ==", flush=True)
        started = time.monotonic()
        try:
            module = importlib.import_module(f"benchmarks.{name}")
            module.run()
        except Exception:
            traceback.print_exc()
            failed.append(name)
        print(f"   ({name}: {time.monotonic() - started:.1f}s)\n", flush=True)
    if failed:
        print(f"benchmarks FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
