"""What the simulated datacenter's node agents report: GPU readings and XID events in the node agent's
own types, plausible and reproducible from the seed.

The GPUs a node's running jobs have allocated (the modelled Slurm schedule, `workload.snapshot`) are
busy: 80-99 % with most of their memory in use, hot and near their power limit; the others read P0 idle
values (the idle numbers are the real H200 node's, tests/backend/node_agent/data). A node's own job of a
15-minute slot asks for all its GPUs (70 %) or a few, in a busy slot (probability 0.75): `busy_gpus`. A
health watch that ends in a fault (see SimulatedDatacenter) shows as XID events: a warning XID on the
faulty GPU a quarter of the watch's span before the fault, then the fatal one at the fault, as a node
agent reading the kernel log would see them.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.node_agent.nvidia import GpuReading
from backend.node_agent.xid import XID_MEANINGS, XidEvent
from backend.provisioning.driver import NodeTelemetry, TelemetryTarget
from backend.store.engine_models import SimulatedOperation

SLOT = dt.timedelta(minutes=15)
BUSY_SHARE, WHOLE_NODE_SHARE = 0.75, 0.7
# HGX baseboard PCI bus ids of GPUs 0-7.
PCI_BUSES = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")
# Warning XID seen before each fatal one (row remapping before ECC errors, GSP timeouts before a GPU
# drops off the bus).
PRECURSOR = {48: 63, 94: 92, 79: 119}
_FAULT = re.compile(r"XID (\d+): .*GPU (\d+)")


@dataclass(frozen=True)
class GpuModel:
    name: str
    memory_total_mib: int
    power_limit_w: float
    max_sm_clock_mhz: int
    memory_clock_mhz: int


GPU_MODELS = {
    "H100": GpuModel("NVIDIA H100 80GB HBM3", 81559, 700.0, 1980, 2619),
    "H200": GpuModel("NVIDIA H200", 143771, 700.0, 1980, 3201),
    "B200": GpuModel("NVIDIA B200", 183359, 1000.0, 1965, 3996),
}


def gpu_model(instance_type: str) -> GpuModel:
    for key, model in GPU_MODELS.items():
        if key in instance_type:
            return model
    return GPU_MODELS["H100"]


def _uniform(*parts: object) -> float:
    digest = hashlib.sha256("|".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def busy_gpus(seed: int, cluster: str, node: str, attempt: int, gpu_count: int, at: dt.datetime) -> int:
    """How many GPUs the node's own job of the slot of `at` asks for (0: the node has none that slot);
    whether it runs, and where, is the schedule's (`workload`)."""
    slot = int(at.timestamp() // SLOT.total_seconds())
    if _uniform(seed, cluster, node, attempt, slot, "busy") >= BUSY_SHARE:
        return 0
    if gpu_count == 1 or _uniform(seed, cluster, node, attempt, slot, "whole") < WHOLE_NODE_SHARE:
        return gpu_count
    return 1 + int(_uniform(seed, cluster, node, attempt, slot, "size") * (gpu_count - 1))


def gpu_reading(seed: int, target: TelemetryTarget, index: int, at: dt.datetime, *, busy_count: int,
                faulted: int | None, fault_code: int | None) -> GpuReading:
    """One GPU at `at` (per-minute jitter); `busy_count`: GPUs the workload holds; `faulted`: the GPU
    index of a fault already happened."""
    model = gpu_model(target.instance_type)
    busy = index < busy_count
    minute = int(at.timestamp() // 60)
    jitter = _uniform(seed, target.instance_id, index, minute, "jitter")
    gone = faulted == index and fault_code == 79  # fallen off the bus: the driver reads nothing
    ecc_fault = faulted == index and fault_code in (48, 94)
    if busy and not gone:
        util, mem_util = 80 + int(jitter * 20), 35 + int(jitter * 30)
        used = int(model.memory_total_mib * (0.72 + 0.2 * jitter))
        temp, power = 62 + int(jitter * 14), round(model.power_limit_w * (0.78 + 0.18 * jitter), 2)
        # Power-capped under load, as the real H200 ran a bf16 matmul (1485-1500 MHz at 691 W).
        sm_clock = int(model.max_sm_clock_mhz * (0.72 + 0.15 * jitter))
    else:
        util, mem_util, used = 0, 0, 0
        temp, power, sm_clock = 30 + int(jitter * 4), round(85 + jitter * 9, 2), 345 + int(jitter * 75)
    return GpuReading(
        index=index, uuid=f"GPU-{hashlib.sha256(f'{target.instance_id}/{index}'.encode()).hexdigest()[:32]}",
        name=model.name, pci_bus_id=f"00000000:{PCI_BUSES[index % 8]}:00.0",
        utilization_pct=None if gone else util, memory_utilization_pct=None if gone else mem_util,
        memory_used_mib=None if gone else used, memory_total_mib=None if gone else model.memory_total_mib,
        temperature_c=None if gone else temp, power_draw_w=None if gone else power,
        power_limit_w=None if gone else model.power_limit_w, sm_clock_mhz=None if gone else sm_clock,
        memory_clock_mhz=None if gone else model.memory_clock_mhz,
        ecc_volatile_uncorrected=None if gone else int(ecc_fault), retired_pages=None,
        remapped_rows_uncorrectable=None if gone else int(ecc_fault),
        remapped_rows_pending=None if gone else False,
    )


def _event(code: int, gpu: int, at: dt.datetime, detail: str) -> XidEvent:
    meaning, hardware = XID_MEANINGS.get(code, ("XID not in our catalogue: see NVIDIA's XID list", True))
    return XidEvent(code=code, pci_bus_id=f"00000000:{PCI_BUSES[gpu % 8]}:00.0", gpu_index=gpu,
                    meaning=meaning, hardware=hardware, detail=detail,
                    logged_at=at.astimezone(dt.UTC).isoformat())


def health_watches(session: Session, targets: Sequence[TelemetryTarget]) -> dict[str, SimulatedOperation]:
    """The targets' current health watches, by token."""
    tokens = [t.watch_token for t in targets if t.watch_token]
    return {op.client_token: op for op in session.scalars(
        select(SimulatedOperation).where(SimulatedOperation.client_token.in_(tokens)))} if tokens else {}


def node_telemetry(seed: int, watch: SimulatedOperation | None, target: TelemetryTarget, now: dt.datetime,
                   *, allocated: int) -> NodeTelemetry:
    """One node's reading; `watch`: its current health watch (where its XID events come from);
    `allocated`: the GPUs its running jobs hold (the first ones of the node read busy)."""
    events: list[XidEvent] = []
    faulted, code = None, None
    if watch is not None and not watch.succeeded and watch.ready_at is not None and watch.reason:
        match = _FAULT.search(watch.reason)
        fault_at, started = watch.ready_at, watch.submitted_at
        if match is not None:
            fatal, gpu = int(match.group(1)), int(match.group(2))
            warning_at = fault_at - (fault_at - started) / 4
            if warning_at <= now:
                events.append(_event(PRECURSOR.get(fatal, 13), gpu, warning_at, "pid=, name=, Ch 00000008"))
            if fault_at <= now:
                events.append(_event(fatal, gpu, fault_at, watch.reason))
                faulted, code = gpu, fatal
    gpus = [gpu_reading(seed, target, i, now, busy_count=allocated, faulted=faulted, fault_code=code)
            for i in range(target.gpu_count)]
    return NodeTelemetry(read_at=now.astimezone(dt.UTC).isoformat(timespec="seconds"), gpus=gpus,
                         gpus_unavailable_reason=None, xid_events=events)
