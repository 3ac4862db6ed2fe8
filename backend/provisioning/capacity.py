"""Free-slot counters: how many node slots each pool and each of its scalable units has free.

Placement needs per-SU free counts (one SU when any has room, best fit, else the emptiest SUs first).
Counting them from the slot allocation rows costs time proportional to the fleet on every create; the
counters (`engine_slot_pools`, `engine_slot_units`) make it a few indexed reads. They are changed only
while the pool's lock row is held (`allocator.lock("pool:" + pool)`), by relative updates, in the same
transaction as the allocation rows they count, so a rolled-back or killed transaction takes its counter
changes with it. They are a cache, not the truth: the slots handed out are always read from the
allocation rows (unique per pool and value), and a counter found to disagree with them, or counted for
another catalog geometry (capacity, SU size), is recounted from the rows.
"""

from __future__ import annotations

from collections import Counter

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from backend.domain.catalog import Fabric
from backend.store.engine_models import Allocation, SlotPool, SlotUnit

SLOT = "slot"


class StaleCounters(Exception):
    """A counter disagrees with the allocation rows (recount and choose again)."""


def held_values(session: Session, kind: str, values: list[str], pool: str | None = None) -> set[str]:
    """Which of `values` of `kind` are held (in `pool` if given; slots, partition keys, subnets, IPs).
    Looked up by (kind, value) and filtered by pool here: with the pool in the query, PostgreSQL's
    generic plan (used after five runs of a prepared statement) expects a pool to hold two rows, as
    most pools (a subnet's IPs) do, and reads every row of the pool: time that grows with the fleet."""
    rows = session.execute(select(Allocation.value, Allocation.pool)
                           .where(Allocation.kind == kind, Allocation.value.in_(values)))
    return {value for value, in_pool in rows if pool is None or in_pool == pool}


def _held_in(session: Session, pool: str, slots: range) -> set[int]:
    return {int(v) for v in held_values(session, SLOT, [str(s) for s in slots], pool)}


def recount(session: Session, pool: str, capacity: int, nodes_per_su: int) -> SlotPool:
    """Rebuild the pool's counters from its allocation rows (reads every held slot: only on first use,
    after a catalog change, or when a counter was found wrong). Caller holds the pool's lock."""
    taken = {int(v) for v in session.scalars(select(Allocation.value).where(
        Allocation.kind == SLOT, Allocation.pool == pool))}
    taken = {s for s in taken if 0 <= s < capacity}
    session.execute(delete(SlotUnit).where(SlotUnit.pool == pool))
    session.execute(delete(SlotPool).where(SlotPool.pool == pool))
    row = SlotPool(pool=pool, capacity=capacity, nodes_per_su=nodes_per_su, free=capacity - len(taken))
    session.add(row)
    session.flush()
    units = []
    for unit in range(-(-capacity // nodes_per_su)):
        slots = range(unit * nodes_per_su, min((unit + 1) * nodes_per_su, capacity))
        units.append(SlotUnit(pool=pool, unit=unit, free=sum(1 for s in slots if s not in taken)))
    session.add_all(units)
    session.flush()
    return row


def counters(session: Session, pool: str, capacity: int, nodes_per_su: int) -> SlotPool:
    """The pool's counters for this geometry, recounted if missing or counted for another one. Caller
    holds the pool's lock."""
    row = session.get(SlotPool, pool, populate_existing=True)
    if row is None or row.capacity != capacity or row.nodes_per_su != nodes_per_su:
        return recount(session, pool, capacity, nodes_per_su)
    return row


def _free_slots(session: Session, row: SlotPool, unit: int, counted: int | None) -> list[int]:
    """The free slots of one SU, lowest first; raises StaleCounters if `counted` says otherwise."""
    if not 0 <= unit < -(-row.capacity // row.nodes_per_su):
        return []
    slots = range(unit * row.nodes_per_su, min((unit + 1) * row.nodes_per_su, row.capacity))
    held = _held_in(session, row.pool, slots)
    free = [s for s in slots if s not in held]
    if counted is not None and counted != len(free):
        raise StaleCounters(f"{row.pool} SU {unit}: counted {counted} free, rows say {len(free)}")
    return free


def choose(session: Session, row: SlotPool, count: int, preferred_units: list[int]) -> list[int] | None:
    """`count` free slots on the fewest SUs (`backend.fabric.topology.choose_slots`, on counters):
    the `preferred_units` first, then the fullest SU that holds the rest, else the emptiest SUs first;
    None if the pool has fewer free. Raises StaleCounters when a counter disagrees with the rows."""
    if row.free < count:
        return None
    chosen: list[int] = []
    preferred = sorted(set(preferred_units))
    counted = dict(session.execute(select(SlotUnit.unit, SlotUnit.free).where(
        SlotUnit.pool == row.pool, SlotUnit.unit.in_(preferred))).all()) if preferred else {}
    for unit in preferred:
        chosen += _free_slots(session, row, unit, counted.get(unit))[: count - len(chosen)]
    remaining = count - len(chosen)
    if remaining == 0:
        return chosen
    others = select(SlotUnit.unit, SlotUnit.free).where(SlotUnit.pool == row.pool,
                                                         SlotUnit.unit.not_in(preferred))
    best_fit = session.execute(others.where(SlotUnit.free >= remaining)
                               .order_by(SlotUnit.free, SlotUnit.unit).limit(1)).first()
    if best_fit is not None:
        return chosen + _free_slots(session, row, best_fit[0], best_fit[1])[:remaining]
    emptiest = session.execute(others.where(SlotUnit.free > 0)
                               .order_by(SlotUnit.free.desc(), SlotUnit.unit).limit(remaining))
    for unit, free in emptiest:
        chosen += _free_slots(session, row, unit, free)[: count - len(chosen)]
        if len(chosen) == count:
            return chosen
    raise StaleCounters(f"{row.pool}: counted {row.free} free, found {len(chosen)} of {count}")


def _change(session: Session, pool: str, slots: list[int], sign: int) -> None:
    row = session.get(SlotPool, pool)  # only its geometry is read: the loaded row is good enough
    if row is None:
        return  # not counted yet: counted from the rows on first use
    per_unit = Counter(s // row.nodes_per_su for s in slots if 0 <= s < row.capacity)  # in the geometry
    unsynchronised = {"synchronize_session": False}
    for unit, count in sorted(per_unit.items()):
        session.execute(update(SlotUnit).where(SlotUnit.pool == pool, SlotUnit.unit == unit)
                        .values(free=SlotUnit.free + sign * count).execution_options(**unsynchronised))
    if per_unit:
        total = sum(per_unit.values())
        session.execute(update(SlotPool).where(SlotPool.pool == pool)
                        .values(free=SlotPool.free + sign * total).execution_options(**unsynchronised))


def taken(session: Session, pool: str, slots: list[int]) -> None:
    """Count slot allocations just inserted: one update per SU. Caller holds the pool's lock."""
    _change(session, pool, slots, -1)


def released(session: Session, pool: str, slots: list[int]) -> None:
    """Count slot allocations just deleted: one update per SU. Caller holds the pool's lock."""
    _change(session, pool, slots, +1)


def free_nodes(session: Session, fabric: Fabric, instance_type: str, pool: str) -> int:
    """Free slots of the pool now: its counter when counted for this catalog, else counted from the rows
    (read-only: usable outside the pool's lock, e.g. for an error message)."""
    capacity = int(fabric.pools.get(instance_type, 0))
    row = session.get(SlotPool, pool)
    if row is not None and row.capacity == capacity and row.nodes_per_su == fabric.nodes_per_su:
        return row.free
    values = session.scalars(select(Allocation.value).where(Allocation.kind == SLOT, Allocation.pool == pool))
    return capacity - sum(1 for v in values if 0 <= int(v) < capacity)


def mismatches(session: Session) -> list[str]:
    """Every counter that differs from a recount of the allocation rows (empty when all agree): the
    invariant the tests check after creates, scale changes, repairs, deletes and killed passes."""
    found = []
    for row in session.scalars(select(SlotPool)):
        taken = [int(v) for v in session.scalars(select(Allocation.value).where(
            Allocation.kind == SLOT, Allocation.pool == row.pool))]
        per_unit = {u: 0 for u in range(-(-row.capacity // row.nodes_per_su))}
        for slot in (s for s in taken if 0 <= s < row.capacity):
            per_unit[slot // row.nodes_per_su] += 1
        expected = {u: min(row.nodes_per_su, row.capacity - u * row.nodes_per_su) - used
                    for u, used in per_unit.items()}
        stored = dict(session.execute(select(SlotUnit.unit, SlotUnit.free)
                                      .where(SlotUnit.pool == row.pool)).all())
        if stored != expected:
            found.append(f"{row.pool}: SU counters {stored}, rows say {expected}")
        if row.free != sum(expected.values()):
            found.append(f"{row.pool}: {row.free} free counted, rows say {sum(expected.values())}")
    return found
