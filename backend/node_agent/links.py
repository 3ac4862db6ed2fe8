"""NVLink and InfiniBand link state: `nvidia-smi nvlink -s` (each GPU's links, active with their speed
or `<inactive>`) and the kernel's InfiniBand sysfs (`/sys/class/infiniband/<hca>/ports/<n>/state` and
`phys_state`).

`nvidia-smi -q -x` has no per-link NVLink state (its `<fabric>` block is the NVSwitch fabric of
multi-node NVLink systems, N/A on an HGX board), hence the separate command. A node without NVLink (one
GPU, PCIe cards) prints nothing there, and a node without InfiniBand has no sysfs class: both say so
instead of reporting links.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NVIDIA_SMI_TIMEOUT_SECONDS = 20.0
INFINIBAND_SYSFS = Path("/sys/class/infiniband")
_GPU_LINE = re.compile(r"^GPU (\d+):")
_LINK_LINE = re.compile(r"^\s*Link (\d+):\s*(.*)$")


@dataclass(frozen=True)
class NvLinkGpu:
    """One GPU's NVLink links: how many, how many active, which are down (`<inactive>`)."""

    gpu_index: int
    links_total: int
    links_active: int
    down_links: tuple[int, ...]


@dataclass(frozen=True)
class IbPort:
    """One InfiniBand port as the kernel reports it (`state` ACTIVE / INIT / ARMED / DOWN, `phys_state`
    LinkUp / Polling / Disabled / ...)."""

    device: str
    port: int
    state: str | None
    phys_state: str | None
    rate: str | None
    link_layer: str | None

    @property
    def down(self) -> bool:
        """Not ACTIVE, unless switched off on purpose (`Disabled`: an unused port is not a fault)."""
        return self.state != "ACTIVE" and self.phys_state != "Disabled"


@dataclass(frozen=True)
class LinkReading:
    """The node's NVLink and InfiniBand links, or why each could not be read."""

    nvlink: tuple[NvLinkGpu, ...]
    nvlink_unavailable_reason: str | None
    infiniband: tuple[IbPort, ...]
    infiniband_unavailable_reason: str | None

    def down_reason(self) -> str | None:
        """The first link down, in words (None: every link read is up)."""
        for gpu in self.nvlink:
            if gpu.down_links:
                links = ", ".join(str(link) for link in gpu.down_links)
                noun = "link" if len(gpu.down_links) == 1 else "links"
                return f"GPU {gpu.gpu_index}: NVLink {noun} {links} down"
        for port in self.infiniband:
            if port.down:
                return f"InfiniBand {port.device} port {port.port} {port.state} ({port.phys_state})"
        return None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LinkReading:
        """Back from the agent's JSON (`dataclasses.asdict`)."""
        return cls(
            nvlink=tuple(NvLinkGpu(g["gpu_index"], g["links_total"], g["links_active"],
                                   tuple(g["down_links"])) for g in data.get("nvlink") or ()),
            nvlink_unavailable_reason=data.get("nvlink_unavailable_reason"),
            infiniband=tuple(IbPort(**port) for port in data.get("infiniband") or ()),
            infiniband_unavailable_reason=data.get("infiniband_unavailable_reason"),
        )


def parse_nvlink_status(text: str) -> tuple[NvLinkGpu, ...]:
    """`nvidia-smi nvlink -s`: a `GPU <i>: <name> (UUID: ...)` line, then one `Link <n>: <speed>` line
    per link, `<inactive>` for a link that is down."""
    gpus: list[NvLinkGpu] = []
    index: int | None = None
    links: dict[int, bool] = {}

    def flush() -> None:
        if index is not None:
            down = tuple(sorted(n for n, active in links.items() if not active))
            gpus.append(NvLinkGpu(index, len(links), len(links) - len(down), down))

    for line in text.splitlines():
        gpu = _GPU_LINE.match(line)
        if gpu is not None:
            flush()
            index, links = int(gpu.group(1)), {}
            continue
        link = _LINK_LINE.match(line)
        if link is not None and index is not None:
            links[int(link.group(1))] = "inactive" not in link.group(2).lower()
    flush()
    return tuple(gpus)


def read_nvlink(*, nvidia_smi: str = "nvidia-smi") -> tuple[tuple[NvLinkGpu, ...], str | None]:
    """Each GPU's links from `nvidia-smi nvlink -s`, or why there are none to report."""
    executable = shutil.which(nvidia_smi)
    if executable is None:
        return (), "nvidia-smi not found: no NVIDIA driver on this node"
    try:
        done = subprocess.run([executable, "nvlink", "-s"], capture_output=True,
                              timeout=NVIDIA_SMI_TIMEOUT_SECONDS, check=False)
    except subprocess.TimeoutExpired:
        return (), f"nvidia-smi nvlink did not answer within {NVIDIA_SMI_TIMEOUT_SECONDS:.0f} s"
    output = done.stdout.decode(errors="replace")
    if done.returncode != 0:
        message = output.strip() or done.stderr.decode(errors="replace").strip()
        return (), f"nvidia-smi nvlink failed (exit {done.returncode}): {message[:200]}"
    gpus = tuple(gpu for gpu in parse_nvlink_status(output) if gpu.links_total)
    return gpus, None if gpus else "no NVLink links reported (one GPU, or GPUs without NVLink)"


def _sysfs_value(path: Path) -> str | None:
    """`4: ACTIVE` -> `ACTIVE`, `400 Gb/sec (4X NDR)` as it is; None where the file is missing."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    number, colon, name = text.partition(":")
    return name.strip() if colon and number.strip().isdigit() else (text or None)


def read_infiniband(root: Path = INFINIBAND_SYSFS) -> tuple[tuple[IbPort, ...], str | None]:
    """Every port of every InfiniBand device in sysfs, or why there are none."""
    if not root.is_dir():
        return (), f"no InfiniBand devices ({root} absent)"
    ports = []
    for device in sorted(root.iterdir(), key=lambda p: p.name):
        port_dirs = [p for p in (device / "ports").glob("*") if p.name.isdigit()]
        for port in sorted(port_dirs, key=lambda p: int(p.name)):
            ports.append(IbPort(device.name, int(port.name), _sysfs_value(port / "state"),
                                _sysfs_value(port / "phys_state"), _sysfs_value(port / "rate"),
                                _sysfs_value(port / "link_layer")))
    return tuple(ports), None if ports else f"no InfiniBand ports under {root}"


def read_links(*, has_gpus: bool, nvidia_smi: str = "nvidia-smi", infiniband: Path = INFINIBAND_SYSFS
               ) -> LinkReading:
    """NVLink (asked only where there are GPUs) and InfiniBand link state of this node."""
    nvlink, nvlink_reason = read_nvlink(nvidia_smi=nvidia_smi) if has_gpus else ((), "no GPUs read")
    ports, ib_reason = read_infiniband(infiniband)
    return LinkReading(nvlink, nvlink_reason, ports, ib_reason)
