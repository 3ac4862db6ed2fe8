"""Rail-optimized fat tree: where a node slot sits and which slots a new cluster gets.

A pool (region, fabric, instance type) numbers its nodes 0..capacity-1 ("slots"); slot s sits in the
pool's scalable unit s // nodes_per_su. HCA i of every node in an SU is cabled to leaf i of that SU
(one leaf per rail); every leaf goes up to all spines. Placement keeps a cluster in as few SUs (so
as few leaves) as possible: one SU when any has room, else the fullest free SUs first.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from backend.domain.catalog import Fabric, InstanceType

MELLANOX_OUI = 0x946DAE
EXTRA_STORAGE_HCAS = 2  # front-end / storage ConnectX ports next to the compute rails


@dataclass(frozen=True)
class SlotPosition:
    fabric: str
    scalable_unit: int  # fabric-wide SU index
    position: int  # index of the node inside its SU


def slot_position(fabric: Fabric, instance_type: str, slot: int) -> SlotPosition:
    local_su, position = divmod(slot, fabric.nodes_per_su)
    return SlotPosition(fabric.name, fabric.first_su_of(instance_type) + local_su, position)


def leaf_name(fabric: Fabric, scalable_unit: int, rail: int) -> str:
    return f"{fabric.name}-su{scalable_unit:02d}-leaf{rail}"


def spine_names(fabric: Fabric) -> list[str]:
    return [f"{fabric.name}-spine{index:02d}" for index in range(fabric.spines)]


def choose_slots(fabric: Fabric, instance_type: str, taken: Iterable[int], count: int,
                 preferred_units: Iterable[int] = ()) -> list[int] | None:
    """`count` free slots of the pool on the fewest SUs, or None when the pool has too few free.

    `preferred_units` (pool-local SU indexes, e.g. where a cluster already runs) are filled first, so a
    replacement or scale-up stays next to its cluster. The rule over every slot of the pool; admission
    applies it on free-slot counters (`backend.provisioning.capacity.choose`, tested against this).
    """
    capacity = int(fabric.pools.get(instance_type, 0))
    used = set(taken)
    free_by_unit: dict[int, list[int]] = defaultdict(list)
    for slot in range(capacity):
        if slot not in used:
            free_by_unit[slot // fabric.nodes_per_su].append(slot)
    if sum(len(v) for v in free_by_unit.values()) < count:
        return None
    chosen: list[int] = []
    for unit in sorted(set(preferred_units)):
        take = free_by_unit.pop(unit, [])[: count - len(chosen)]
        chosen += take
    remaining = count - len(chosen)
    if remaining == 0:
        return chosen
    fitting = [u for u, free in free_by_unit.items() if len(free) >= remaining]
    if fitting:
        # Best fit: the SU with the least room that still holds the rest keeps big SUs whole.
        unit = min(fitting, key=lambda u: (len(free_by_unit[u]), u))
        return chosen + free_by_unit[unit][:remaining]
    for unit in sorted(free_by_unit, key=lambda u: (-len(free_by_unit[u]), u)):
        chosen += free_by_unit[unit][: count - len(chosen)]
        if len(chosen) == count:
            break
    return chosen


def hca_guid(fabric: Fabric, scalable_unit: int, position: int, port: int) -> str:
    """A stable port GUID for one HCA of one physical node (Mellanox OUI, fabric, SU, position, port)."""
    fabric_id = int.from_bytes(hashlib.sha256(f"{fabric.region}/{fabric.name}".encode()).digest()[:2], "big")
    value = (MELLANOX_OUI << 40) | (fabric_id << 24) | (scalable_unit << 12) | (position << 4) | port
    return f"0x{value:016x}"


def node_network(fabric: Fabric, itype: InstanceType, slot: int, partition_key: str | None) -> dict[str, Any]:
    """What a node publishes about its fabric: path through the tree and every HCA / EFA interface."""
    where = slot_position(fabric, itype.name, slot)
    out: dict[str, Any] = {
        "fabric": fabric.name,
        "fabric_kind": fabric.kind,
        "scalable_unit": where.scalable_unit,
        "position": where.position,
        "spines": spine_names(fabric),
    }
    if fabric.kind == "infiniband":
        hcas = [
            {
                "device": f"mlx5_{rail}", "port": 1, "rail": rail, "link": "NDR 400 Gb/s",
                "guid": hca_guid(fabric, where.scalable_unit, where.position, rail),
                "leaf": leaf_name(fabric, where.scalable_unit, rail), "role": "compute",
                "partition_key": partition_key,
            }
            for rail in range(itype.hca_count)
        ]
        hcas += [
            {
                "device": f"mlx5_{itype.hca_count + extra}", "port": 1, "rail": None, "link": "200 GbE",
                "guid": hca_guid(fabric, where.scalable_unit, where.position, itype.hca_count + extra),
                "leaf": None, "role": "storage", "partition_key": None,
            }
            for extra in range(EXTRA_STORAGE_HCAS)
        ]
        out["leaves"] = [leaf_name(fabric, where.scalable_unit, r) for r in range(itype.hca_count)]
        out["hcas"] = hcas
        out["partition_key"] = partition_key
    elif fabric.kind == "efa":
        out["leaves"] = [leaf_name(fabric, where.scalable_unit, r) for r in range(fabric.leaves_per_su)]
        out["efa_interfaces"] = [
            {"index": i, "device": f"rdmap{i}s0", "network_card": i, "bandwidth": "100 Gb/s"}
            for i in range(itype.efa_interfaces)
        ]
        out["placement_group"] = f"{fabric.name}-su{where.scalable_unit:02d}"
    else:
        out["leaves"] = [leaf_name(fabric, where.scalable_unit, 0)]
    return out
