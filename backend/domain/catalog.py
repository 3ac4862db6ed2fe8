"""The cloud's catalog: regions, fabrics, instance types, prices and capacity pools.

Defaults follow `shared/reference/datacenter.md`; every number can be replaced by a JSON file named in
`GPUCLOUD_CATALOG_FILE` (same shape as `catalog_to_dict`; the runtime reads it at start and installs the
result with `use_catalog`). Pure: no I/O, no environment. Money is Decimal, never float.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

FABRIC_KINDS = ("infiniband", "efa", "ethernet")
NODES_PER_SCALABLE_UNIT = 32
CLUSTER_SUBNET_PREFIX = 22  # every cluster gets one /22 of private addresses
# A single-node cluster's `container` may name one of these aliases instead of an image reference; the
# operator maps them to the references of its choice in the catalog file (`container_aliases`).
DEFAULT_CONTAINER_ALIASES = {"base": "docker.io/library/ubuntu:22.04",
                             "pytorch": "nvcr.io/nvidia/pytorch:24.05-py3"}


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
    # The fabric's own part of its region's private block (cluster subnets of this fabric come from it);
    # None: the fabric draws from the region's block, less the blocks other fabrics of the region own.
    private_cidr: str | None = None

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
    """A region and its address plan: cluster subnets are carved from `private_cidr` (or from the
    fabric's own part of it), public IPs come from `public_cidr`. Blocks of different regions never
    overlap (`check_address_plan`); the defaults suit a one-region catalog only."""

    name: str
    display_name: str
    private_cidr: str = "10.0.0.0/8"
    public_cidr: str = "198.18.0.0/15"
    # The share of every pool of the region sold as spot capacity (interruptible, at the catalog's
    # spot discount); 0 sells no spot here.
    spot_capacity_share: Decimal = Decimal("0.25")


@dataclass(frozen=True)
class Catalog:
    regions: tuple[Region, ...]
    fabrics: tuple[Fabric, ...]
    instance_types: tuple[InstanceType, ...]
    # Minimum term in days -> fractional discount off on-demand for reserved capacity.
    reserved_discounts: Mapping[int, Decimal] = field(default_factory=dict)
    storage_usd_per_tib_hour: Decimal = Decimal("0.1122")
    # Fractional discount off on-demand for spot capacity (0.60 = spot costs 40 % of on-demand).
    spot_discount: Decimal = Decimal("0.60")
    # A reserved public IP per hour: while it waits unattached, and (the lower rate) while a cluster's
    # login node answers on it.
    reserved_ip_usd_per_hour: Decimal = Decimal("0.0050")
    reserved_ip_attached_usd_per_hour: Decimal = Decimal("0.0025")
    container_aliases: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_CONTAINER_ALIASES))

    def container_reference(self, container: str) -> str:
        """The image a single-node cluster's `container` runs: an alias's reference, else itself."""
        return self.container_aliases.get(container, container)

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

    def subnet_block(self, region: str, fabric: str) -> tuple[str, tuple[str, ...]]:
        """Where the subnets of clusters on `fabric` come from: (block, parts of it to skip): the
        fabric's own block, else the region's block less the blocks other fabrics of the region own."""
        found = self.fabric(region, fabric)
        if found is None:
            raise KeyError(f"{region}/{fabric}")
        if found.private_cidr is not None:
            return found.private_cidr, ()
        owned = tuple(f.private_cidr for f in self.fabrics_in(region) if f.private_cidr is not None)
        home = self.region(region)
        assert home is not None
        return home.private_cidr, owned

    def capacity(self, region: str, fabric: str, instance_type: str) -> int:
        found = self.fabric(region, fabric)
        return 0 if found is None else int(found.pools.get(instance_type, 0))

    def spot_capacity(self, region: str, fabric: str, instance_type: str) -> int:
        """Nodes of the pool sold as spot: the region's spot share of the pool's capacity, rounded down."""
        home = self.region(region)
        if home is None:
            return 0
        return int(self.capacity(region, fabric, instance_type) * home.spot_capacity_share)

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
    # Address plan (docs/engine.md): a /11 of 10.0.0.0/8 and a /18 of 198.18.0.0/15 per region, a /13
    # (512 cluster subnets) per fabric.
    regions = (
        Region("us-east-1", "US East (Virginia)", "10.0.0.0/11", "198.18.0.0/18"),
        Region("us-west-2", "US West (Oregon)", "10.32.0.0/11", "198.18.64.0/18"),
        Region("eu-north-1", "EU North (Finland)", "10.64.0.0/11", "198.18.128.0/18"),
    )
    fabrics = (
        Fabric("us-east-1", "ib-east-a", "infiniband", {"8xH100": 256, "8xH200": 64}, spines=16,
               private_cidr="10.0.0.0/13"),
        Fabric("us-east-1", "efa-east-a", "efa", {"8xH100-EFA": 64}, spines=8, private_cidr="10.8.0.0/13"),
        Fabric("us-east-1", "eth-east-a", "ethernet", {"1xH100": 64}, spines=2, leaves_per_su=1,
               private_cidr="10.16.0.0/13"),
        Fabric("us-west-2", "ib-west-a", "infiniband", {"8xH100": 64, "8xB200": 32}, spines=8,
               private_cidr="10.32.0.0/13"),
        Fabric("us-west-2", "eth-west-a", "ethernet", {"1xH100": 32}, spines=2, leaves_per_su=1,
               private_cidr="10.40.0.0/13"),
        Fabric("eu-north-1", "ib-north-a", "infiniband", {"8xH200": 128, "8xB200": 64}, spines=16,
               private_cidr="10.64.0.0/13"),
        Fabric("eu-north-1", "eth-north-a", "ethernet", {"1xH100": 32}, spines=2, leaves_per_su=1,
               private_cidr="10.72.0.0/13"),
    )
    discounts = {1: Decimal("0.10"), 7: Decimal("0.15"), 30: Decimal("0.25"), 60: Decimal("0.30"),
                 90: Decimal("0.35")}
    check_address_plan(regions, fabrics)
    return Catalog(regions, fabrics, types, discounts, Decimal("0.1122"), Decimal("0.60"))


def catalog_to_dict(catalog: Catalog) -> dict[str, Any]:
    """The JSON shape of a catalog file (Decimals as strings)."""
    return {
        "regions": [{**vars(r), "spot_capacity_share": str(r.spot_capacity_share)} for r in catalog.regions],
        "fabrics": [{**vars(f), "pools": dict(f.pools)} for f in catalog.fabrics],
        "instance_types": [
            {**vars(t), "interconnects": list(t.interconnects),
             "on_demand_usd_per_gpu_hour": str(t.on_demand_usd_per_gpu_hour)}
            for t in catalog.instance_types
        ],
        "reserved_discounts": {str(k): str(v) for k, v in catalog.reserved_discounts.items()},
        "storage_usd_per_tib_hour": str(catalog.storage_usd_per_tib_hour),
        "spot_discount": str(catalog.spot_discount),
        "reserved_ip_usd_per_hour": str(catalog.reserved_ip_usd_per_hour),
        "reserved_ip_attached_usd_per_hour": str(catalog.reserved_ip_attached_usd_per_hour),
        "container_aliases": dict(catalog.container_aliases),
    }


def catalog_from_dict(data: Mapping[str, Any]) -> Catalog:
    """Build a catalog from its JSON shape; raises ValueError on an inconsistent document."""
    try:
        regions = tuple(
            Region(**{**r, "spot_capacity_share": Decimal(str(r.get("spot_capacity_share", "0.25")))})
            for r in data["regions"]
        )
        fabrics = tuple(Fabric(**{**f, "pools": {k: int(v) for k, v in f["pools"].items()}})
                        for f in data["fabrics"])
        types = tuple(
            InstanceType(**{**t, "interconnects": tuple(t["interconnects"]),
                            "on_demand_usd_per_gpu_hour": Decimal(str(t["on_demand_usd_per_gpu_hour"]))})
            for t in data["instance_types"]
        )
        discounts = {int(k): Decimal(str(v)) for k, v in data.get("reserved_discounts", {}).items()}
        storage = Decimal(str(data.get("storage_usd_per_tib_hour", "0.1122")))
        spot_discount = Decimal(str(data.get("spot_discount", "0.60")))
        ip_prices = {key: Decimal(str(data[key])) for key in
                     ("reserved_ip_usd_per_hour", "reserved_ip_attached_usd_per_hour") if key in data}
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
    for region in regions:
        if not Decimal(0) <= region.spot_capacity_share <= Decimal(1):
            raise ValueError(f"region {region.name}: spot_capacity_share must be in [0, 1]")
    if not Decimal(0) <= spot_discount < Decimal(1):
        raise ValueError(f"spot_discount must be in [0, 1), got {spot_discount}")
    check_address_plan(regions, fabrics)
    aliases = {str(k): str(v) for k, v in data.get("container_aliases", DEFAULT_CONTAINER_ALIASES).items()}
    return Catalog(regions, fabrics, types, discounts, storage, spot_discount, **ip_prices,
                   container_aliases=aliases)


def _network(owner: str, field_name: str, value: object, max_prefix: int) -> ipaddress.IPv4Network:
    try:
        network = ipaddress.ip_network(str(value))
    except ValueError:
        raise ValueError(f"{owner}: {field_name} {value!r} is not an IPv4 network address "
                         f"such as 10.0.0.0/11") from None
    if not isinstance(network, ipaddress.IPv4Network):
        raise ValueError(f"{owner}: {field_name} {value} must be an IPv4 block")
    if network.prefixlen > max_prefix:
        raise ValueError(f"{owner}: {field_name} {value} is too small; use a /{max_prefix} or larger")
    return network


def check_address_plan(regions: tuple[Region, ...], fabrics: tuple[Fabric, ...]) -> None:
    """Raise ValueError unless every region has its own private and public blocks (no block overlaps
    any other) and every fabric's own block lies inside its region's and overlaps no other fabric's."""
    blocks: list[tuple[str, ipaddress.IPv4Network]] = []
    private: dict[str, ipaddress.IPv4Network] = {}
    for region in regions:
        owner = f"region {region.name}"
        private[region.name] = _network(owner, "private_cidr", region.private_cidr, CLUSTER_SUBNET_PREFIX)
        blocks.append((f"{owner} private_cidr", private[region.name]))
        blocks.append((f"{owner} public_cidr", _network(owner, "public_cidr", region.public_cidr, 30)))
    _refuse_overlaps(blocks, "give every region its own private and public blocks")
    for region in regions:
        owned: list[tuple[str, ipaddress.IPv4Network]] = []
        for fabric in (f for f in fabrics if f.region == region.name and f.private_cidr is not None):
            owner = f"fabric {fabric.name}"
            network = _network(owner, "private_cidr", fabric.private_cidr, CLUSTER_SUBNET_PREFIX)
            if not network.subnet_of(private[region.name]):
                raise ValueError(f"{owner}: private_cidr {network} lies outside region {region.name}'s "
                                 f"private_cidr {private[region.name]}; pick a part of it")
            owned.append((f"{owner} private_cidr", network))
        _refuse_overlaps(owned, "give every fabric its own part of the region's block")


def _refuse_overlaps(blocks: list[tuple[str, ipaddress.IPv4Network]], fix: str) -> None:
    for i, (name, network) in enumerate(blocks):
        for other_name, other in blocks[i + 1:]:
            if network.overlaps(other):
                raise ValueError(f"{other_name} {other} overlaps {name} {network}; {fix}")


_in_force: list[Catalog] = []  # the catalog `use_catalog` installed (none: the built-in one)


def use_catalog(catalog: Catalog | None) -> Catalog | None:
    """Install the catalog of this process (the runtime does, once at start; None: the built-in one);
    returns the one installed before, so a test can put it back."""
    previous = _in_force[0] if _in_force else None
    _in_force[:] = [catalog] if catalog is not None else []
    return previous


def default_catalog() -> Catalog:
    """The catalog in force: the one the runtime installed (from GPUCLOUD_CATALOG_FILE), else the
    built-in defaults."""
    if not _in_force:
        _in_force.append(_builtin_catalog())
    return _in_force[0]
