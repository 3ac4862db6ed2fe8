"""The CPU layout Slurm needs to bind GPUs to cores, from sysfs: sockets, cores per socket, threads per core,
and for each GPU the cores of the NUMA node it is attached to.

Cores are numbered as Slurm's `gres.conf` wants them (its `Cores=`): logical indices, socket by socket,
which is hwloc's `Core L#` order (lstopo), not the kernel's `core_id`. A layout Slurm cannot describe
(sockets with different core counts, cores with different thread counts) is not reported.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

SYS = Path("/sys")


@dataclass(frozen=True)
class CpuLayout:
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    # A GPU's PCI bus id as nvidia-smi writes it -> the logical cores of its NUMA node as a Slurm range
    # ("0-27,56-83"); a GPU whose NUMA node the kernel does not know is left out.
    gpu_cores: dict[str, str] = field(default_factory=dict)


def read_cpu_layout(gpu_bus_ids: tuple[str, ...] = (), sys: Path = SYS) -> CpuLayout | None:
    """The online CPUs' layout and the GPUs' cores; None where sysfs lacks it or Slurm could not say it."""
    cpus_dir = sys / "devices" / "system" / "cpu"
    try:
        online = parse_cpu_list((cpus_dir / "online").read_text())
        core_of = {}  # CPU -> (its package, its core's kernel id)
        for cpu in online:
            topology = cpus_dir / f"cpu{cpu}" / "topology"
            core_of[cpu] = (int((topology / "physical_package_id").read_text()),
                            int((topology / "core_id").read_text()))
    except (OSError, ValueError):
        return None
    if not core_of:
        return None
    first_cpu: dict[tuple[int, int], int] = {}
    for cpu, core in sorted(core_of.items()):
        first_cpu.setdefault(core, cpu)
    package_first = {package: min(cpu for (p, _), cpu in first_cpu.items() if p == package)
                     for package, _ in first_cpu}
    # hwloc orders packages, then the cores within each, by their first CPU.
    ordered = sorted(first_cpu, key=lambda core: (package_first[core[0]], first_cpu[core]))
    index = {core: position for position, core in enumerate(ordered)}
    per_socket = Counter(package for package, _ in ordered)
    threads = Counter(core_of.values())
    if len(set(per_socket.values())) != 1 or len(set(threads.values())) != 1:
        return None
    gpu_cores = {}
    single_node = _numa_nodes(sys) <= 1  # every CPU is as near to every GPU
    for bus_id in gpu_bus_ids:
        node_cpus = list(core_of) if single_node else _numa_cpus(sys, bus_id)
        cores = sorted({index[core_of[cpu]] for cpu in node_cpus if cpu in core_of})
        if cores:
            gpu_cores[bus_id] = slurm_range(cores)
    return CpuLayout(len(per_socket), next(iter(per_socket.values())), next(iter(threads.values())),
                     gpu_cores)


def _numa_nodes(sys: Path) -> int:
    """How many NUMA nodes are online (1 where the kernel has no NUMA support)."""
    try:
        return len(parse_cpu_list((sys / "devices" / "system" / "node" / "online").read_text()))
    except (OSError, ValueError):
        return 1


def _numa_cpus(sys: Path, bus_id: str) -> list[int]:
    """The CPUs of the NUMA node the PCI device `bus_id` hangs off ([] when unknown)."""
    try:
        domain, rest = bus_id.split(":", 1)
        device = f"{int(domain, 16):04x}:{rest.lower()}"  # nvidia-smi's 8-digit domain, sysfs' 4
        node = int((sys / "bus" / "pci" / "devices" / device / "numa_node").read_text())
        if node < 0:
            return []
        return parse_cpu_list((sys / "devices" / "system" / "node" / f"node{node}" / "cpulist").read_text())
    except (OSError, ValueError):
        return []


def parse_cpu_list(text: str) -> list[int]:
    """The kernel's CPU list format ("0-3,8,10-11") as numbers."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus.extend(range(int(first), int(last or first) + 1))
    return cpus


def slurm_range(numbers: Iterable[int]) -> str:
    """Numbers as Slurm writes a list of them (cores, array tasks): [5, 0, 1, 2] -> "0-2,5"."""
    runs: list[list[int]] = []
    for number in sorted(set(numbers)):
        if runs and number == runs[-1][1] + 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
