"""The cloud's catalog: regions, fabrics, instance types, prices and capacity pools.

Defaults follow `shared/reference/datacenter.md`; every number can be replaced by a JSON file named in
`GPUCLOUD_CATALOG_FILE` (same shape as `catalog_to_dict`). Money is Decimal, never float.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

FABRIC_KINDS = ("infiniband", "efa", "ethernet")
NODES_PER_SCALABLE_UNIT = 32


@dataclass(frozen=True)
class InstanceType:
    """A node shape sold with a fixed GPU count."""

    name: str
    gpu_model: str
    gpu_short_name: str  # Slurm GRES type and Kubernetes product label stem, e.g. "h100"
    gpu_count: int
    gpu_memory_mib: int
    vcpu: int
    ram_gib: int
    local_nvme: str
    network: str
    interconnects: tuple[str, ...]  # fabric kinds this shape can sit on; the first is the default
    on_demand_usd_per_gpu_hour: Decimal
    sockets: int = 2
    threads_per_core: int = 2
    hca_count: int = 0  # InfiniBand HCAs, one per GPU ("rails")
    efa_interfaces: int = 0

    @property
    def fabric_capable(self) -> bool:
        """True for the 8-GPU shapes with a GPU fabric: only these can form multi-node clusters."""
        return self.gpu_count == 8 and any(kind != "ethernet" for kind in self.interconnects)

    @property
    def default_interconnect(self) -> str:
        return self.interconnects[0]

    @property
    def on_demand_usd_per_node_hour(self) -> Decimal:
        return self.on_demand_usd_per_gpu_hour * self.gpu_count

    @property
    def cores_per_socket(self) -> int:
        return self.vcpu // (self.sockets * self.threads_per_core)


@dataclass(frozen=True)
class Fabric:
    """A network fabric of one region: a rail-optimized fat tree of scalable units (SUs).

    `pools` maps instance type -> node count installed on this fabric (the capacity limit). Each pool
    fills whole SUs of `nodes_per_su` nodes, in the order listed; every SU has `leaves_per_su` leaf
    switches (one per rail) and every leaf connects to all `spines`.
    """

    region: str
    name: str
    kind: str
    pools: Mapping[str, int]
    spines: int = 16
    leaves_per_su: int = 8
    nodes_per_su: int = NODES_PER_SCALABLE_UNIT

    @property
    def scalable_units(self) -> int:
        return sum(-(-count // self.nodes_per_su) for count in self.pools.values())

    @property
    def leaves(self) -> int:
        return self.scalable_units * self.leaves_per_su

    def first_su_of(self, instance_type: str) -> int:
        """Index of the first scalable unit that holds `instance_type` nodes."""
        su = 0
        for name, count in self.pools.items():
            if name == instance_type:
                return su
            su += -(-count // self.nodes_per_su)
        raise KeyError(instance_type)


@dataclass(frozen=True)
class Region:
    name: str
    display_name: str
    # Private subnets of clusters are carved from this block; public IPs come from `public_cidr`.
    private_cidr: str = "10.0.0.0/8"
    public_cidr: str = "198.18.0.0/15"


@dataclass(frozen=True)
class Catalog:
    regions: tuple[Region, ...]
    fabrics: tuple[Fabric, ...]
    instance_types: tuple[InstanceType, ...]
    # Minimum term in days -> fractional discount off on-demand for reserved capacity.
    reserved_discounts: Mapping[int, Decimal] = field(default_factory=dict)
    storage_usd_per_tib_hour: Decimal = Decimal("0.1122")

    def region(self, name: str) -> Region | None:
        return next((r for r in self.regions if r.name == name), None)

    def instance_type(self, name: str) -> InstanceType | None:
        return next((t for t in self.instance_types if t.name == name), None)

    def fabric(self, region: str, name: str) -> Fabric | None:
        return next((f for f in self.fabrics if f.region == region and f.name == name), None)

    def fabrics_in(self, region: str) -> list[Fabric]:
        return [f for f in self.fabrics if f.region == region]

    def interconnects_in(self, region: str) -> list[str]:
        """Fabric kinds present in a region, in catalog order, without duplicates."""
        kinds: list[str] = []
        for fabric in self.fabrics_in(region):
            if fabric.kind not in kinds:
                kinds.append(fabric.kind)
        return kinds

    def pools_for(self, region: str, instance_type: str, interconnect: str) -> list[Fabric]:
        """Fabrics of a region that carry `instance_type` nodes on an `interconnect` fabric."""
        return [
            f for f in self.fabrics_in(region) if f.kind == interconnect and f.pools.get(instance_type, 0) > 0
        ]

    def capacity(self, region: str, fabric: str, instance_type: str) -> int:
        found = self.fabric(region, fabric)
        return 0 if found is None else int(found.pools.get(instance_type, 0))

    def reserved_discount(self, duration_days: int) -> Decimal:
        """The discount of the longest term threshold that `duration_days` reaches (0 below all)."""
        best = Decimal(0)
        for min_days, discount in sorted(self.reserved_discounts.items()):
            if duration_days >= min_days:
                best = discount
        return best


_H100 = "H100 SXM 80GB"


def _builtin_catalog() -> Catalog:
    types = (
        InstanceType(
            name="1xH100", gpu_model=_H100, gpu_short_name="h100", gpu_count=1, gpu_memory_mib=81559,
            vcpu=26, ram_gib=225, local_nvme="2.75 TiB", network="Ethernet 25 Gb/s",
            interconnects=("ethernet",), on_demand_usd_per_gpu_hour=Decimal("4.29"), sockets=1,
        ),
        InstanceType(
            name="8xH100", gpu_model=_H100, gpu_short_name="h100", gpu_count=8, gpu_memory_mib=81559,
            vcpu=208, ram_gib=1800, local_nvme="8 x 3.84 TB",
            network="8 x NDR 400 Gb/s InfiniBand + 2 x 200 GbE", interconnects=("infiniband",),
            on_demand_usd_per_gpu_hour=Decimal("3.99"), hca_count=8,
        ),
        InstanceType(
            name="8xH100-EFA", gpu_model=_H100, gpu_short_name="h100", gpu_count=8, gpu_memory_mib=81559,
            vcpu=192, ram_gib=2048, local_nvme="8 x 3.84 TB", network="32 x EFA, 3200 Gb/s",
            interconnects=("efa",), on_demand_usd_per_gpu_hour=Decimal("6.88"), efa_interfaces=32,
        ),
        InstanceType(
            name="8xH200", gpu_model="H200 SXM 141GB", gpu_short_name="h200", gpu_count=8,
            gpu_memory_mib=143771, vcpu=224, ram_gib=2048, local_nvme="8 x 3.84 TB",
            network="8 x NDR 400 Gb/s InfiniBand + 2 x 200 GbE", interconnects=("infiniband",),
            on_demand_usd_per_gpu_hour=Decimal("5.40"), hca_count=8,
        ),
        InstanceType(
            name="8xB200", gpu_model="B200 180GB", gpu_short_name="b200", gpu_count=8, gpu_memory_mib=182784,
            vcpu=240, ram_gib=2900, local_nvme="22 TiB",
            network="8 x NDR 400 Gb/s InfiniBand + 2 x 200 GbE", interconnects=("infiniband",),
            on_demand_usd_per_gpu_hour=Decimal("8.50"), hca_count=8,
        ),
    )
    regions = (
        Region("us-east-1", "US East (Virginia)"),
        Region("us-west-2", "US West (Oregon)"),
        Region("eu-north-1", "EU North (Finland)"),
    )
    fabrics = (
        Fabric("us-east-1", "ib-east-a", "infiniband", {"8xH100": 256, "8xH200": 64}, spines=16),
        Fabric("us-east-1", "efa-east-a", "efa", {"8xH100-EFA": 64}, spines=8),
        Fabric("us-east-1", "eth-east-a", "ethernet", {"1xH100": 64}, spines=2, leaves_per_su=1),
        Fabric("us-west-2", "ib-west-a", "infiniband", {"8xH100": 64, "8xB200": 32}, spines=8),
        Fabric("us-west-2", "eth-west-a", "ethernet", {"1xH100": 32}, spines=2, leaves_per_su=1),
        Fabric("eu-north-1", "ib-north-a", "infiniband", {"8xH200": 128, "8xB200": 64}, spines=16),
        Fabric("eu-north-1", "eth-north-a", "ethernet", {"1xH100": 32}, spines=2, leaves_per_su=1),
    )
    discounts = {1: Decimal("0.10"), 7: Decimal("0.15"), 30: Decimal("0.25"), 60: Decimal("0.30"),
                 90: Decimal("0.35")}
    return Catalog(regions, fabrics, types, discounts, Decimal("0.1122"))


def catalog_to_dict(catalog: Catalog) -> dict[str, Any]:
    """The JSON shape of a catalog file (Decimals as strings)."""
    return {
        "regions": [vars(r).copy() for r in catalog.regions],
        "fabrics": [{**vars(f), "pools": dict(f.pools)} for f in catalog.fabrics],
        "instance_types": [
            {**vars(t), "interconnects": list(t.interconnects),
             "on_demand_usd_per_gpu_hour": str(t.on_demand_usd_per_gpu_hour)}
            for t in catalog.instance_types
        ],
        "reserved_discounts": {str(k): str(v) for k, v in catalog.reserved_discounts.items()},
        "storage_usd_per_tib_hour": str(catalog.storage_usd_per_tib_hour),
    }


def catalog_from_dict(data: Mapping[str, Any]) -> Catalog:
    """Build a catalog from its JSON shape; raises ValueError on an inconsistent document."""
    try:
        regions = tuple(Region(**r) for r in data["regions"])
        fabrics = tuple(Fabric(**{**f, "pools": {k: int(v) for k, v in f["pools"].items()}})
                        for f in data["fabrics"])
        types = tuple(
            InstanceType(**{**t, "interconnects": tuple(t["interconnects"]),
                            "on_demand_usd_per_gpu_hour": Decimal(str(t["on_demand_usd_per_gpu_hour"]))})
            for t in data["instance_types"]
        )
        discounts = {int(k): Decimal(str(v)) for k, v in data.get("reserved_discounts", {}).items()}
        storage = Decimal(str(data.get("storage_usd_per_tib_hour", "0.1122")))
    except (KeyError, TypeError) as exc:
        raise ValueError(f"invalid catalog document: {exc}") from exc
    region_names = {r.name for r in regions}
    type_names = {t.name for t in types}
    for fabric in fabrics:
        if fabric.region not in region_names:
            raise ValueError(f"fabric {fabric.name}: unknown region {fabric.region}")
        if fabric.kind not in FABRIC_KINDS:
            raise ValueError(f"fabric {fabric.name}: kind must be one of {', '.join(FABRIC_KINDS)}")
        unknown = set(fabric.pools) - type_names
        if unknown:
            raise ValueError(f"fabric {fabric.name}: unknown instance types {sorted(unknown)}")
    return Catalog(regions, fabrics, types, discounts, storage)


_cache: dict[str, Catalog] = {}


def default_catalog() -> Catalog:
    """The catalog in force: the file named in GPUCLOUD_CATALOG_FILE, else the built-in defaults."""
    path = os.environ.get("GPUCLOUD_CATALOG_FILE", "")
    if path not in _cache:
        if path:
            _cache[path] = catalog_from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
        else:
            _cache[path] = _builtin_catalog()
    return _cache[path]
