"""CPU and memory of the node from /proc (Linux), present on every node, GPUs or not."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class HostReading:
    """The machine's CPU and memory as the node agent reads them from /proc (null: not reported)."""

    cpu_count: int
    load_1m: float | None
    memory_total_mib: int | None
    memory_available_mib: int | None


def read_host(proc: Path = Path("/proc")) -> HostReading:
    """Load average and memory as the kernel reports them; None where /proc lacks the file."""
    meminfo = _meminfo_kib(proc / "meminfo")
    try:
        load_1m: float | None = float((proc / "loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        load_1m = None
    return HostReading(
        cpu_count=os.cpu_count() or 1,
        load_1m=load_1m,
        memory_total_mib=_mib(meminfo.get("MemTotal")),
        memory_available_mib=_mib(meminfo.get("MemAvailable")),
    )


def _meminfo_kib(path: Path) -> dict[str, int]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    values = {}
    for line in lines:
        name, _, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isdigit():
            values[name] = int(fields[0])
    return values


def _mib(kib: int | None) -> int | None:
    return None if kib is None else kib // 1024
