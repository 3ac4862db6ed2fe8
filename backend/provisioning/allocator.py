"""Allocation of node slots, partition keys, subnets and IPs as rows with unique keys.

Choosing a free value and inserting it happen under a lock row per pool (an UPDATE, which is a row
lock on PostgreSQL and takes the write lock on SQLite), so concurrent creates on several API replicas
and workers never race; the unique constraint on (kind, pool, value) is the backstop.

Pools: slots per (region, fabric, instance type), partition keys per (region, fabric). Addresses are
unique everywhere, not per region: subnets and public IPs sit in the one pool `ADDRESS_POOL` (regions'
blocks are disjoint, so the lock per region suffices), private IPs in the pool of their subnet. Values
are chosen against every pool of their kind, so rows a store kept from before the address plan (0004)
are never handed out again either. Reserved IPs (`reserved_ips`, 0013) are public addresses held by a
project rather than a cluster: a public IP is chosen against them too, under the same region lock.

Nothing here reads every held value (admission must not slow as the fleet grows): slots are chosen on
free-slot counters per pool and SU (`capacity`), partition keys, subnets and public IPs by probing the
allocation rows from a next-free pointer per block (`AllocationCursor`), which then moves past the value
handed out. A released value is handed out again when the pointer comes round to it.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Callable, Iterable

from sqlalchemy import ColumnElement, delete, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from backend.domain.catalog import Catalog, Fabric
from backend.fabric import addressing
from backend.provisioning import capacity, pool_hosts, reservations
from backend.store.engine_models import Allocation, AllocationCursor, EngineLock
from backend.store.models import ReservedIp

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


def add(session: Session, *, kind: str, pool: str, value: str, cluster_id: str, node_id: str | None,
        now: dt.datetime) -> None:
    """Insert an allocation row (slots: `add_slots`)."""
    if kind == SLOT:
        raise ValueError("node slots are counted as they are added: use add_slots")
    session.add(Allocation(kind=kind, pool=pool, value=value, cluster_id=cluster_id, node_id=node_id,
                           created_at=now))
    session.flush()  # the unique constraint speaks now, not at commit


def add_slots(session: Session, *, pool: str, slots: list[tuple[int, str]], cluster_id: str,
              now: dt.datetime) -> None:
    """Insert the slot rows of new nodes ((slot, node id) pairs; under the pool's lock, which `place`
    took) and take them off the free-slot counters."""
    session.add_all([Allocation(kind=SLOT, pool=pool, value=str(slot), cluster_id=cluster_id, node_id=node_id,
                                created_at=now) for slot, node_id in slots])
    session.flush()  # the unique constraint speaks now, not at commit
    capacity.taken(session, pool, [slot for slot, _ in slots])


def free_by_fabric(session: Session, catalog: Catalog, region: str, instance_type: str, interconnect: str,
                   reservation_id: str | None = None, *, now: dt.datetime) -> dict[str, int]:
    """Free nodes of `instance_type` per fabric of the region with this interconnect, less what
    capacity reservations hold there at `now` (but `reservation_id`'s)."""
    free = {}
    for f in catalog.pools_for(region, instance_type, interconnect):
        pool = pool_name(region, f.name, instance_type)
        held = reservations.held_undrawn(session, pool, now, except_reservation=reservation_id)
        free[f.name] = max(0, capacity.free_nodes(session, f, instance_type, pool) - held)
    return free


def place(session: Session, catalog: Catalog, *, region: str, instance_type: str, interconnect: str,
          count: int, now: dt.datetime, fabric_name: str | None = None, preferred_units: Iterable[int] = (),
          reservation_id: str | None = None) -> tuple[Fabric, list[int]] | None:
    """Lock the candidate pools and pick `count` slots on one fabric using the fewest SUs; None if no
    fabric has room. `fabric_name` pins the fabric (scale-up and replacement stay on theirs). Slots
    capacity reservations hold (at `now`) are not free, but to a cluster drawing from `reservation_id`."""
    candidates = sorted(catalog.pools_for(region, instance_type, interconnect), key=lambda f: f.name)
    if fabric_name is not None:
        candidates = [f for f in candidates if f.name == fabric_name]
    best: tuple[int, int, Fabric, list[int]] | None = None
    for fabric in candidates:
        pool = pool_name(region, fabric.name, instance_type)
        lock(session, "pool:" + pool)
        geometry = (int(fabric.pools[instance_type]), fabric.nodes_per_su)
        counters = capacity.counters(session, pool, *geometry)
        held = reservations.held_undrawn(session, pool, now, except_reservation=reservation_id)
        if counters.free - held < count:
            continue
        try:
            slots = capacity.choose(session, counters, count, list(preferred_units))
        except capacity.StaleCounters:
            counters = capacity.recount(session, pool, *geometry)
            slots = capacity.choose(session, counters, count, list(preferred_units))
        if slots is None:
            continue
        units = len({s // fabric.nodes_per_su for s in slots})
        if best is None or (units, -counters.free) < (best[0], best[1]):
            best = (units, -counters.free, fabric, slots)
    return None if best is None else (best[2], best[3])


def reserve(session: Session, catalog: Catalog, *, region: str, instance_type: str, interconnect: str,
            count: int, now: dt.datetime) -> Fabric | None:
    """Lock the candidate pools and choose the fabric a new capacity reservation of `count` nodes holds
    them on (the one with the most room left); None if none has `count` free that no other
    reservation holds. The caller stores the reservation in this transaction, under the locks."""
    best: tuple[int, Fabric] | None = None
    for fabric in sorted(catalog.pools_for(region, instance_type, interconnect), key=lambda f: f.name):
        pool = pool_name(region, fabric.name, instance_type)
        lock(session, "pool:" + pool)
        geometry = (int(fabric.pools[instance_type]), fabric.nodes_per_su)
        held = reservations.held_undrawn(session, pool, now)
        room = capacity.counters(session, pool, *geometry).free - held
        if room >= count and (best is None or room > best[0]):
            best = (room, fabric)
    return None if best is None else best[1]


PROBE_BATCH = 64  # candidates checked against the allocation rows per query


def next_free(session: Session, *, cursor: str, kind: str, pool: str | None, first: int, last: int,
              value_of: Callable[[int], str], skip: Callable[[int], int] = lambda n: n,
              held_elsewhere: Callable[[list[str]], set[str]] | None = None) -> str | None:
    """The first value of `kind` held in no pool (in `pool` if given) at or after the cursor's position
    in the numbered range `first..last`, wrapping round once; moves the cursor past it. `skip(n)` says
    where a number in a range not to hand out ends (n itself when it is allowed); `held_elsewhere`,
    which of some values are held outside the allocation rows. None when every number is held. Caller
    holds the lock that serialises the range."""
    mark = session.get(AllocationCursor, cursor)
    start = mark.position if mark is not None and first <= mark.position <= last else first
    number, seen = start, 0
    size = last - first + 1
    while seen < size:
        batch: dict[str, int] = {}
        while seen < size and len(batch) < PROBE_BATCH:
            allowed = skip(number)
            if allowed != number:  # jump over the excluded range (wrapping if it runs to the end)
                seen += allowed - number
                number = allowed if allowed <= last else first
                continue
            batch[value_of(number)] = number
            seen += 1
            number = number + 1 if number < last else first
        held = capacity.held_values(session, kind, list(batch), pool)
        if held_elsewhere is not None:
            held |= held_elsewhere(list(batch))
        for value, found in batch.items():
            if value not in held:
                position = found + 1 if found < last else first
                if mark is None:
                    session.add(AllocationCursor(name=cursor, position=position))
                else:
                    mark.position = position
                return value
    return None


def next_partition_key(session: Session, fabric: Fabric) -> tuple[str, str] | None:
    """Lock the fabric's partition keys and choose the next free one: (pool, key), or None."""
    pool = f"{fabric.region}/{fabric.name}"
    lock(session, f"pkeys:{pool}")
    key = next_free(session, cursor=f"{PARTITION_KEY}:{pool}", kind=PARTITION_KEY, pool=pool,
                    first=addressing.PKEY_MIN, last=addressing.PKEY_MAX, value_of=addressing.format_pkey)
    return None if key is None else (pool, key)


def _next_subnet(session: Session, block: str, skip: Iterable[str]) -> str | None:
    network = ipaddress.ip_network(block)
    size = 2 ** (addressing.SUBNET_PREFIX - network.prefixlen)
    step = 2 ** (32 - addressing.SUBNET_PREFIX)
    base = int(network.network_address)
    excluded = []  # (first, end) subnet numbers of each skipped block that overlaps this one
    for other in (ipaddress.ip_network(s) for s in skip):
        lo = max(int(other.network_address), base)
        hi = min(int(other.broadcast_address), int(network.broadcast_address))
        if lo <= hi:
            excluded.append(((lo - base) // step, (hi - base) // step + 1))

    def skip_to(number: int) -> int:
        return next((end for first, end in excluded if first <= number < end), number)

    return next_free(session, cursor=f"{SUBNET}:{block}", kind=SUBNET, pool=None, first=0, last=size - 1,
                     value_of=lambda n: f"{ipaddress.ip_address(base + n * step)}/{addressing.SUBNET_PREFIX}",
                     skip=skip_to)


def _reserved(session: Session, values: list[str]) -> set[str]:
    return set(session.scalars(select(ReservedIp.address).where(ReservedIp.address.in_(values))))


def next_public_ip(session: Session, block: str) -> str | None:
    """The next address of the public `block` held by no cluster and reserved by no project (caller
    holds the region's address lock: `lock_region_addresses`)."""
    network = ipaddress.ip_network(block)
    base, size = int(network.network_address), network.num_addresses
    first, last = (1, size - 2) if size > 2 else (0, size - 1)  # as `hosts()`: /31 and /32 have no broadcast
    return next_free(session, cursor=f"{PUBLIC_IP}:{block}", kind=PUBLIC_IP, pool=None, first=first,
                     last=last, value_of=lambda n: str(ipaddress.ip_address(base + n)),
                     held_elsewhere=lambda values: _reserved(session, values))


def lock_region_addresses(session: Session, region: str) -> None:
    """Serialise the choice of the region's public addresses (floating and reserved) and subnets."""
    lock(session, f"addresses:{region}")


def next_addresses(session: Session, catalog: Catalog, region: str, fabric: str, *,
                   override: str | None = None, public: bool = True) -> tuple[str, str | None] | None:
    """Lock the region's addresses and choose (subnet, public IP) for a cluster on `fabric`: the next
    free /22 of the fabric's block (or of `override`, a block every region shares) and the next free
    address of the region's public block, held by no cluster anywhere (None with `public` False: the
    cluster takes a reserved IP); None when either has run out."""
    lock_region_addresses(session, region)
    if override is not None:
        lock(session, "addresses:shared-override")  # regions draw from one block: serialise them
    block, skip = (override, ()) if override is not None else catalog.subnet_block(region, fabric)
    home = catalog.region(region)
    assert home is not None
    subnet = _next_subnet(session, block, skip)
    public_ip = next_public_ip(session, home.public_cidr) if public else None
    return None if subnet is None or (public and public_ip is None) else (subnet, public_ip)


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


def _release(session: Session, condition: ColumnElement[bool]) -> None:
    """Delete allocation rows and give their slots back to the free-slot counters (under the pools'
    locks, taken before the rows are touched, in the order admission takes them)."""
    pools = session.scalars(select(Allocation.pool).where(condition, Allocation.kind == SLOT).distinct())
    for pool in sorted(pools):
        lock(session, "pool:" + pool)
    rows = session.execute(delete(Allocation).where(condition)
                           .returning(Allocation.kind, Allocation.pool, Allocation.value)).all()
    by_pool: dict[str, list[int]] = {}
    for kind, pool, value in rows:
        if kind == SLOT:
            by_pool.setdefault(pool, []).append(int(value))
    for pool, slots in sorted(by_pool.items()):
        capacity.released(session, pool, slots)


def release_node(session: Session, node_id: str) -> None:
    _release(session, Allocation.node_id == node_id)
    pool_hosts.give_back_nodes(session, [node_id])


def release_cluster(session: Session, cluster_id: str) -> None:
    _release(session, Allocation.cluster_id == cluster_id)
    pool_hosts.give_back_cluster(session, cluster_id)
