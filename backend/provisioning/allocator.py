"""Allocation of node slots, partition keys, subnets and IPs as rows with unique keys.

Choosing a free value and inserting it happen under a lock row per pool (an UPDATE, which is a row
lock on PostgreSQL and takes the write lock on SQLite), so concurrent creates on several API replicas
and workers never race; the unique constraint on (kind, pool, value) is the backstop.

Pools: slots per (region, fabric, instance type), partition keys per (region, fabric). Addresses are
unique everywhere, not per region: subnets and public IPs sit in the one pool `ADDRESS_POOL` (regions'
blocks are disjoint, so the lock per region suffices), private IPs in the pool of their subnet. Values
are chosen against every pool of their kind, so rows a store kept from before the address plan (0004)
are never handed out again either.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from sqlalchemy import delete, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from backend.domain.catalog import Catalog, Fabric
from backend.fabric import addressing
from backend.fabric.topology import choose_slots
from backend.store.engine_models import Allocation, EngineLock

SLOT, PARTITION_KEY, SUBNET = "slot", "partition_key", "subnet"
PUBLIC_IP, PRIVATE_IP = "public_ip", "private_ip"
ADDRESS_POOL = "global"  # the pool of every subnet and public IP, whatever its region and fabric


def pool_name(region: str, fabric: str, instance_type: str) -> str:
    return f"{region}/{fabric}/{instance_type}"


def lock(session: Session, name: str) -> None:
    """Hold the named lock row until the transaction ends (created on first use)."""
    bump = update(EngineLock).where(EngineLock.name == name).values(version=EngineLock.version + 1)
    if session.execute(bump).rowcount:  # type: ignore[attr-defined]
        return
    dialect = session.get_bind().dialect.name
    insert_fn = pg_insert if dialect == "postgresql" else sqlite_insert
    session.execute(insert_fn(EngineLock).values(name=name, version=0).on_conflict_do_nothing())
    session.execute(bump)


def values_in(session: Session, kind: str, pool: str) -> list[str]:
    return list(session.scalars(select(Allocation.value).where(Allocation.kind == kind,
                                                               Allocation.pool == pool)))


def taken_slots(session: Session, fabric: Fabric, instance_type: str) -> set[int]:
    return {int(v) for v in values_in(session, SLOT, pool_name(fabric.region, fabric.name, instance_type))}


def add(session: Session, *, kind: str, pool: str, value: str, cluster_id: str, node_id: str | None,
        now: dt.datetime) -> None:
    session.add(Allocation(kind=kind, pool=pool, value=value, cluster_id=cluster_id, node_id=node_id,
                           created_at=now))
    session.flush()  # the unique constraint speaks now, not at commit


def free_by_fabric(session: Session, catalog: Catalog, region: str, instance_type: str,
                   interconnect: str) -> dict[str, int]:
    """Free nodes of `instance_type` per fabric of the region with this interconnect."""
    return {
        f.name: int(f.pools.get(instance_type, 0)) - len(taken_slots(session, f, instance_type))
        for f in catalog.pools_for(region, instance_type, interconnect)
    }


def place(session: Session, catalog: Catalog, *, region: str, instance_type: str, interconnect: str,
          count: int, fabric_name: str | None = None, preferred_units: Iterable[int] = ()
          ) -> tuple[Fabric, list[int]] | None:
    """Lock the candidate pools and pick `count` slots on one fabric using the fewest SUs; None if no
    fabric has room. `fabric_name` pins the fabric (scale-up and replacement stay on theirs)."""
    candidates = sorted(catalog.pools_for(region, instance_type, interconnect), key=lambda f: f.name)
    if fabric_name is not None:
        candidates = [f for f in candidates if f.name == fabric_name]
    best: tuple[int, int, Fabric, list[int]] | None = None
    for fabric in candidates:
        lock(session, "pool:" + pool_name(region, fabric.name, instance_type))
        taken = taken_slots(session, fabric, instance_type)
        slots = choose_slots(fabric, instance_type, taken, count, preferred_units)
        if slots is None:
            continue
        units = len({s // fabric.nodes_per_su for s in slots})
        free = int(fabric.pools[instance_type]) - len(taken)
        if best is None or (units, -free) < (best[0], best[1]):
            best = (units, -free, fabric, slots)
    return None if best is None else (best[2], best[3])


def values_of_kind(session: Session, kind: str) -> list[str]:
    """Every held value of `kind`, whatever its pool."""
    return list(session.scalars(select(Allocation.value).where(Allocation.kind == kind)))


def next_addresses(session: Session, catalog: Catalog, region: str, fabric: str, *,
                   override: str | None = None) -> tuple[str, str] | None:
    """Lock the region's addresses and choose (subnet, public IP) for a cluster on `fabric`: the first
    free /22 of the fabric's block (or of `override`, a block every region shares) and the first free
    address of the region's public block, held by no cluster anywhere; None when either has run out."""
    lock(session, f"addresses:{region}")
    if override is not None:
        lock(session, "addresses:shared-override")  # regions draw from one block: serialise them
    block, skip = (override, ()) if override is not None else catalog.subnet_block(region, fabric)
    subnet = addressing.next_subnet(block, values_of_kind(session, SUBNET), skip)
    home = catalog.region(region)
    assert home is not None
    public_ip = addressing.next_public_address(home.public_cidr, values_of_kind(session, PUBLIC_IP))
    return None if subnet is None or public_ip is None else (subnet, public_ip)


def next_private_ip(session: Session, subnet: str, first_offset: int) -> str:
    """The first free address of `subnet` from `first_offset` up (the jumphost's is `.4` on any
    subnet allocated since 0004; a subnet two clusters shared before may have it taken)."""
    used = set(values_in(session, PRIVATE_IP, subnet))
    offset = first_offset
    while addressing.subnet_address(subnet, offset) in used:
        offset += 1
    return addressing.subnet_address(subnet, offset)


def hand_over(session: Session, kind: str, *, from_node: str, to_node: str) -> None:
    """Give a node's allocations of `kind` to another node (an in-place repair keeps the address)."""
    session.execute(update(Allocation).where(Allocation.node_id == from_node, Allocation.kind == kind)
                    .values(node_id=to_node).execution_options(synchronize_session=False))


def release_node(session: Session, node_id: str) -> None:
    session.execute(delete(Allocation).where(Allocation.node_id == node_id))


def release_cluster(session: Session, cluster_id: str) -> None:
    session.execute(delete(Allocation).where(Allocation.cluster_id == cluster_id))
