"""GPU readings from NVIDIA's `nvidia-smi -q -x` XML, the same source DCGM's basic fields come from.

Only what the driver reports is returned: a field the driver answers `N/A` (or leaves out) is None,
never a guess, so a node without a reading is told apart from a node reading zero.
"""

from __future__ import annotations

import shutil
import subprocess
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from typing import TypeVar

Number = TypeVar("Number", int, float)

NVIDIA_SMI_TIMEOUT_SECONDS = 20.0


@dataclass(frozen=True)
class GpuReading:
    """One GPU at one moment, in the units the API serves (MiB, W, MHz, degrees C, percent)."""

    index: int
    uuid: str
    name: str
    pci_bus_id: str
    utilization_pct: int | None
    memory_utilization_pct: int | None
    memory_used_mib: int | None
    memory_total_mib: int | None
    temperature_c: int | None
    power_draw_w: float | None
    power_limit_w: float | None
    sm_clock_mhz: int | None
    memory_clock_mhz: int | None
    ecc_volatile_uncorrected: int | None
    retired_pages: int | None
    remapped_rows_uncorrectable: int | None
    remapped_rows_pending: bool | None


@dataclass(frozen=True)
class GpuInventory:
    """What a node's GPUs read, or why there is no reading (no driver, a hung driver)."""

    devices: tuple[GpuReading, ...]
    driver_version: str | None
    cuda_version: str | None
    unavailable_reason: str | None = None


def parse_nvidia_smi_xml(document: str | bytes) -> GpuInventory:
    """Parse the output of `nvidia-smi -q -x` (DTD v12 and v13 layouts)."""
    root = ElementTree.fromstring(document)
    devices = tuple(_parse_gpu(gpu, position) for position, gpu in enumerate(root.findall("gpu")))
    return GpuInventory(
        devices=devices,
        driver_version=_text(root, "driver_version"),
        cuda_version=_text(root, "cuda_version"),
    )


def read_gpus(*, nvidia_smi: str = "nvidia-smi") -> GpuInventory:
    """Run nvidia-smi on this machine; a machine without GPUs says so instead of reporting numbers."""
    executable = shutil.which(nvidia_smi)
    if executable is None:
        return _unavailable("nvidia-smi not found: no NVIDIA driver on this node")
    try:
        completed = subprocess.run(
            [executable, "-q", "-x"], capture_output=True, timeout=NVIDIA_SMI_TIMEOUT_SECONDS, check=False
        )
    except subprocess.TimeoutExpired:
        return _unavailable(f"nvidia-smi did not answer within {NVIDIA_SMI_TIMEOUT_SECONDS:.0f} s")
    if completed.returncode != 0:
        message = completed.stdout.decode(errors="replace").strip() or completed.stderr.decode(
            errors="replace"
        )
        return _unavailable(f"nvidia-smi failed (exit {completed.returncode}): {message.strip()[:200]}")
    try:
        return parse_nvidia_smi_xml(completed.stdout)
    except ElementTree.ParseError as exc:
        return _unavailable(f"nvidia-smi printed XML that does not parse: {exc}")


def _unavailable(reason: str) -> GpuInventory:
    return GpuInventory(devices=(), driver_version=None, cuda_version=None, unavailable_reason=reason)


def _parse_gpu(gpu: ElementTree.Element, position: int) -> GpuReading:
    return GpuReading(
        index=position,  # nvidia-smi lists GPUs in its index order (PCI order), not by minor number
        uuid=_text(gpu, "uuid") or "",
        name=_text(gpu, "product_name") or "",
        pci_bus_id=gpu.get("id") or _text(gpu, "pci/pci_bus_id") or "",
        utilization_pct=_int(gpu, "utilization/gpu_util"),
        memory_utilization_pct=_int(gpu, "utilization/memory_util"),
        memory_used_mib=_int(gpu, "fb_memory_usage/used"),
        memory_total_mib=_int(gpu, "fb_memory_usage/total"),
        temperature_c=_int(gpu, "temperature/gpu_temp"),
        # Hopper and newer report a one-second average (what `power.draw` means there) and an
        # instant value; older drivers have a single power_readings/power_draw.
        power_draw_w=_first_float(
            gpu,
            "gpu_power_readings/average_power_draw",
            "gpu_power_readings/instant_power_draw",
            "gpu_power_readings/power_draw",
            "power_readings/power_draw",
        ),
        power_limit_w=_first_float(
            gpu, "gpu_power_readings/current_power_limit", "power_readings/power_limit"
        ),
        sm_clock_mhz=_int(gpu, "clocks/sm_clock"),
        memory_clock_mhz=_int(gpu, "clocks/mem_clock"),
        ecc_volatile_uncorrected=_volatile_uncorrected(gpu),
        retired_pages=_retired_pages(gpu),
        remapped_rows_uncorrectable=_int(gpu, "remapped_rows/remapped_row_unc"),
        remapped_rows_pending=_yes_no(gpu, "remapped_rows/remapped_row_pending"),
    )


def _volatile_uncorrected(gpu: ElementTree.Element) -> int | None:
    volatile = gpu.find("ecc_errors/volatile")
    if volatile is None:
        return None
    legacy = volatile.find("double_bit/total")  # DTD v11/v12: single_bit / double_bit counters
    if legacy is not None:
        return _number(legacy.text, int)
    counts = [_number(child.text, int) for child in volatile if "uncorrectable" in child.tag]
    known = [count for count in counts if count is not None]
    return sum(known) if known else None


def _retired_pages(gpu: ElementTree.Element) -> int | None:
    counts = [
        _int(gpu, f"retired_pages/{cause}/retired_count")
        for cause in ("multiple_single_bit_retirement", "double_bit_retirement")
    ]
    known = [count for count in counts if count is not None]
    return sum(known) if known else None  # N/A on GPUs that remap rows instead (A100 and newer)


def _text(element: ElementTree.Element, path: str) -> str | None:
    found = element.find(path)
    if found is None or found.text is None:
        return None
    text = found.text.strip()
    return text or None


def _number(raw: str | None, kind: type[Number]) -> Number | None:
    if raw is None:
        return None
    value = raw.strip().split(" ", 1)[0]  # "143771 MiB", "31 C", "92.53 W", "0 %"
    try:
        return kind(float(value)) if kind is int else kind(value)
    except ValueError:
        return None  # "N/A", "[N/A]", "Not Supported", "Unknown Error"


def _int(element: ElementTree.Element, path: str) -> int | None:
    return _number(_text(element, path), int)


def _first_float(element: ElementTree.Element, *paths: str) -> float | None:
    for path in paths:
        value = _number(_text(element, path), float)
        if value is not None:
            return value
    return None


def _yes_no(element: ElementTree.Element, path: str) -> bool | None:
    return {"Yes": True, "No": False}.get(_text(element, path) or "")
