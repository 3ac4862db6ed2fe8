"""XID events: the NVIDIA driver's error reports, read from the kernel log.

The driver logs each one as `NVRM: Xid (PCI:0000:00:06): 79, pid=..., name=..., <text>`. The meanings
below are our short summaries of NVIDIA's XID catalogue for the codes a GPU cloud acts on; `hardware`
says whether the code points at the node (drain and repair it) rather than at one application.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass

from backend.node_agent.nvidia import GpuReading

XID_MEANINGS: dict[int, tuple[str, bool]] = {
    13: ("graphics engine exception (usually an application fault)", False),
    31: ("GPU memory page fault (usually an application fault)", False),
    43: ("GPU stopped processing (application fault)", False),
    45: ("preemptive cleanup after an earlier error", False),
    48: ("double-bit ECC error", True),
    61: ("internal micro-controller breakpoint", True),
    62: ("internal micro-controller halt", True),
    63: ("ECC page retirement or row remapping recorded", True),
    64: ("ECC page retirement or row remapping failed", True),
    74: ("NVLink error", True),
    79: ("GPU has fallen off the bus", True),
    92: ("high single-bit ECC error rate", True),
    94: ("contained ECC error", True),
    95: ("uncontained ECC error", True),
    119: ("GSP firmware did not answer (RPC timeout)", True),
    120: ("GSP firmware error", True),
}

_XID_LINE = re.compile(r"NVRM: Xid \(PCI:(?P<pci>[0-9A-Fa-f:.]+)\): (?P<code>\d+)(?:, (?P<detail>.*))?")
_DMESG_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class XidEvent:
    """One XID as the driver logged it, tied to a GPU index where the PCI address matches one."""

    code: int
    pci_bus_id: str
    gpu_index: int | None
    meaning: str
    hardware: bool
    detail: str
    logged_at: str | None


def parse_xid_lines(lines: Iterable[str], gpus: Iterable[GpuReading] = ()) -> list[XidEvent]:
    """XID events in kernel-log lines (`dmesg --time-format iso` adds the time before the message)."""
    index_by_bus = {_bus_key(gpu.pci_bus_id): gpu.index for gpu in gpus}
    events = []
    for line in lines:
        match = _XID_LINE.search(line)
        if match is None:
            continue
        code = int(match["code"])
        meaning, hardware = XID_MEANINGS.get(code, ("XID not in our catalogue: see NVIDIA's XID list", True))
        prefix = line[: match.start()].strip()
        events.append(
            XidEvent(
                code=code,
                pci_bus_id=match["pci"],
                gpu_index=index_by_bus.get(_bus_key(match["pci"])),
                meaning=meaning,
                hardware=hardware,
                detail=(match["detail"] or "").strip(),
                logged_at=prefix.split()[0] if prefix and prefix[0].isdigit() else None,
            )
        )
    return events


def read_xid_events(gpus: Iterable[GpuReading] = ()) -> tuple[list[XidEvent], str | None]:
    """XID events in this machine's kernel log, or the reason the log cannot be read."""
    dmesg = shutil.which("dmesg")
    if dmesg is None:
        return [], "dmesg not found"
    try:
        completed = subprocess.run(
            [dmesg, "--time-format", "iso"], capture_output=True, timeout=_DMESG_TIMEOUT_SECONDS, check=False
        )
    except subprocess.TimeoutExpired:
        return [], "dmesg did not answer"
    if completed.returncode != 0:
        return [], f"kernel log not readable: {completed.stderr.decode(errors='replace').strip()[:200]}"
    return parse_xid_lines(completed.stdout.decode(errors="replace").splitlines(), gpus), None


def _bus_key(pci_bus_id: str) -> str:
    """`00000000:00:06.0` (nvidia-smi) and `0000:00:06` (kernel log) name the same device."""
    *domain, bus, device = pci_bus_id.lower().split(":")
    try:
        return f"{int(domain[0] if domain else '0', 16)}:{int(bus, 16)}:{int(device.split('.', 1)[0], 16)}"
    except ValueError:
        return pci_bus_id.lower()
