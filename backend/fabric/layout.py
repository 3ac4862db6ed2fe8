"""A cluster's placed layout: the input every artifact generator reads (pure data)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from backend.domain.catalog import Fabric, InstanceType


@dataclass(frozen=True)
class NodeLayout:
    name: str
    index: int
    slot: int
    scalable_unit: int
    private_ip: str
    public_ip: str | None = None


@dataclass(frozen=True)
class ClusterLayout:
    cluster_id: str
    name: str
    region: str
    orchestrator: str
    interconnect: str
    instance_type: InstanceType
    fabric: Fabric
    subnet: str
    partition_key: str | None
    nodes: tuple[NodeLayout, ...]
    jumphost_ip: str | None = None
    public_ip: str | None = None
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def multi_node(self) -> bool:
        return self.jumphost_ip is not None

    @property
    def controller(self) -> str:
        """The host running slurmctld / the Kubernetes API: the jumphost, or the single node."""
        if self.multi_node:
            return f"{self.name}-jumphost"
        return self.nodes[0].name if self.nodes else f"{self.name}-0"

    @property
    def controller_ip(self) -> str:
        if self.jumphost_ip is not None:
            return self.jumphost_ip
        return self.nodes[0].private_ip if self.nodes else ""


def hostlist(names: Iterable[str]) -> str:
    """Slurm hostlist expression: ["c-0", "c-1", "c-3"] -> "c-[0-1,3]"; names must share one prefix."""
    indexed: dict[str, list[int]] = {}
    plain: list[str] = []
    for name in names:
        match = re.fullmatch(r"(.*?)(\d+)", name)
        if match is None:
            plain.append(name)
            continue
        indexed.setdefault(match.group(1), []).append(int(match.group(2)))
    parts = list(plain)
    for prefix, numbers in indexed.items():
        numbers.sort()
        ranges: list[str] = []
        start = prev = numbers[0]
        for n in [*numbers[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            ranges.append(str(start) if start == prev else f"{start}-{prev}")
            if n is not None:
                start = prev = n
        parts.append(f"{prefix}[{','.join(ranges)}]" if len(numbers) > 1 else f"{prefix}{numbers[0]}")
    return ",".join(parts)
