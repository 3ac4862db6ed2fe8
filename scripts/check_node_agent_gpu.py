"""Compare the node agent's GPU reading with `nvidia-smi --query-gpu` on a machine that has GPUs.

Run on a real GPU node (not in CI: CI has no GPU): `python3 scripts/check_node_agent_gpu.py [OUT_DIR]`.
For each phase (idle, then under a matrix-multiply load when PyTorch is there) it reads nvidia-smi's
CSV, then the agent, then the CSV again, and checks every field of the agent against the two CSV
readings around it: identity fields exactly, counters and sizes exactly, moving values (utilisation,
power, temperature, clocks) within the range of the two CSV readings widened by a tolerance.
Exits 1 on any mismatch; writes the raw readings to OUT_DIR when given.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backend.node_agent.nvidia import GpuReading, read_gpus

QUERY = {  # agent field -> nvidia-smi --query-gpu field
    "index": "index",
    "uuid": "uuid",
    "name": "name",
    "pci_bus_id": "pci.bus_id",
    "utilization_pct": "utilization.gpu",
    "memory_utilization_pct": "utilization.memory",
    "memory_used_mib": "memory.used",
    "memory_total_mib": "memory.total",
    "temperature_c": "temperature.gpu",
    "power_draw_w": "power.draw",
    "power_limit_w": "power.limit",
    "sm_clock_mhz": "clocks.sm",
    "memory_clock_mhz": "clocks.mem",
    "ecc_volatile_uncorrected": "ecc.errors.uncorrected.volatile.total",
}
EXACT = {"index", "memory_total_mib", "power_limit_w", "ecc_volatile_uncorrected"}  # and the strings
TOLERANCE = {  # absolute slack beyond the two surrounding CSV readings
    "utilization_pct": 15,
    "memory_utilization_pct": 15,
    "memory_used_mib": 64,
    "temperature_c": 2,
    "power_draw_w": 60.0,
    "sm_clock_mhz": 200,
    "memory_clock_mhz": 200,
}
LOAD = """
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + float(__import__("sys").argv[1])
while time.time() < end:
    for _ in range(20):
        a @ b
    torch.cuda.synchronize()
"""


def query_csv() -> list[dict[str, str]]:
    fields = ",".join(QUERY.values())
    out = subprocess.run(
        ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout
    rows = csv.reader(io.StringIO(out))
    return [dict(zip(QUERY, (cell.strip() for cell in row), strict=True)) for row in rows]


def as_number(raw: str) -> float | None:
    try:
        return float(raw)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def compare(before: dict[str, str], agent: GpuReading, after: dict[str, str]) -> list[str]:
    problems = []
    for field in QUERY:
        ours: Any = getattr(agent, field)
        if field in ("uuid", "name", "pci_bus_id"):
            if ours != before[field]:
                problems.append(f"{field}: agent {ours!r} != nvidia-smi {before[field]!r}")
            continue
        low, high = as_number(before[field]), as_number(after[field])
        if low is None or high is None:
            if ours is not None:
                problems.append(f"{field}: agent {ours!r} but nvidia-smi has no value ({before[field]!r})")
            continue
        low, high = min(low, high), max(low, high)
        slack = 0 if field in EXACT else TOLERANCE[field]
        if ours is None or not (low - slack <= ours <= high + slack):
            problems.append(f"{field}: agent {ours!r} outside nvidia-smi [{low}, {high}] +/- {slack}")
    return problems


def phase(name: str, out_dir: Path | None) -> tuple[list[str], list[tuple[str, str, str, str]]]:
    before = query_csv()
    started = time.perf_counter()
    inventory = read_gpus()
    agent_seconds = time.perf_counter() - started
    after = query_csv()
    if out_dir:
        agent = [vars(device) for device in inventory.devices]
        (out_dir / f"{name}.json").write_text(json.dumps({"before": before, "agent": agent, "after": after}))
    if inventory.unavailable_reason:
        return [f"{name}: agent found no GPUs: {inventory.unavailable_reason}"], []
    problems = [] if len(inventory.devices) == len(before) else [f"{name}: GPU count differs"]
    rows = []
    for b, gpu, a in zip(before, inventory.devices, after, strict=False):
        problems += [f"{name} gpu{gpu.index} {p}" for p in compare(b, gpu, a)]
        for field in ("utilization_pct", "memory_used_mib", "temperature_c", "power_draw_w", "sm_clock_mhz"):
            seen = f"{b[field]} .. {a[field]}"
            rows.append((f"{name} gpu{gpu.index}", field, seen, str(getattr(gpu, field))))
    print(f"{name}: agent read {len(inventory.devices)} GPU(s) in {agent_seconds * 1000:.0f} ms")
    return problems, rows


def main() -> int:
    out_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else None
    if shutil.which("nvidia-smi") is None:
        print("nvidia-smi not found: run this on a node with NVIDIA GPUs")
        return 2
    problems, rows = phase("idle", out_dir)
    if importlib.util.find_spec("torch") is None:
        print("PyTorch not here: load phase not run")
    else:
        load = subprocess.Popen([sys.executable, "-c", LOAD, "25"])
        time.sleep(12)  # warm-up and clocks settled
        more, load_rows = phase("load", out_dir)
        problems, rows = problems + more, rows + load_rows
        load.wait(timeout=60)
    print(f"{'phase':<12} {'field':<18} {'nvidia-smi before .. after':<28} agent")
    for row in rows:
        print(f"{row[0]:<12} {row[1]:<18} {row[2]:<28} {row[3]}")
    for problem in problems:
        print("MISMATCH", problem)
    print("node agent vs nvidia-smi:", "OK" if not problems else f"{len(problems)} mismatch(es)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
