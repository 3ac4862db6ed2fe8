"""The meter, as pure functions: node status history in, priced usage line items out.

Model (docs/billing.md has the prose and a worked example):
- A node is metered from the moment it reaches RUNNING until its destruction starts, it fails or it is
  paused (`STOP_STATUSES`); a later RUNNING opens a new interval. Anything else in between (a volume
  attach takes RUNNING -> CONFIGURING -> RUNNING) keeps the meter going: the node is still the customer's.
- Time is counted in whole seconds (timestamps truncated to the second).
- Intervals are cut into clock-hour slices; a slice is charged once it is final (its end is at or
  before the settlement cutoff), so charges flow hour by hour while a node runs, and each slice has
  a deterministic idempotency key: charging twice is impossible and a missed run is caught up later.
- A reserved cluster holds `node_count` reserved slots: a running node takes a free slot (prepaid,
  charged 0 here; the term was charged up front), a node beyond the reserved size is on-demand; when
  a reserved node stops, the longest-running on-demand node takes its slot from that second on.
  When the reservation's coverage ends, every running node is on-demand from then on.
- A spot node (capacity_type spot: it ran on spot capacity its whole life) is metered the same way at
  the spot rate; its lines say `compute_spot`. An on-demand node standing in for spot (fallback) is an
  on-demand node: `compute_on_demand` at the on-demand rate. Spot and reserved never mix (the API
  refuses a reserved spot cluster).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from enum import StrEnum

from backend.billing.estimate import reserved_upfront_micros
from backend.billing.money import prorate_micros
from backend.domain.clock import ensure_utc

RUNNING = "RUNNING"
# Statuses that stop the meter. PAUSED/STOPPED are listed so a pause stops metering whatever the
# engine calls it; DESTROYING is where destruction starts.
STOP_STATUSES = frozenset({"DESTROYING", "DESTROYED", "FAILED", "PAUSING", "PAUSED", "STOPPING", "STOPPED"})
SLICE = timedelta(hours=1)


class UsageKind(StrEnum):
    COMPUTE_ON_DEMAND = "compute_on_demand"
    COMPUTE_RESERVED = "compute_reserved"
    COMPUTE_SPOT = "compute_spot"
    STORAGE = "storage"
    RESERVED_IP = "reserved_ip"


@dataclass(frozen=True)
class NodeTransition:
    node_id: str
    status: str  # the status the node entered
    at: datetime


@dataclass(frozen=True)
class RunningInterval:
    node_id: str
    start: datetime
    end: datetime | None  # None: still running


@dataclass(frozen=True)
class ComputeSegment:
    """A stretch of one node's running time billed one way (reserved or on-demand)."""

    node_id: str
    kind: UsageKind
    start: datetime
    end: datetime | None


@dataclass(frozen=True)
class UsageItem:
    key: str  # idempotency key, unique forever
    kind: UsageKind
    resource_id: str  # node id or volume id
    start: datetime
    end: datetime
    seconds: int
    units: Decimal  # GPUs or TiB
    unit_price_usd: Decimal  # USD per unit-hour actually charged (0 when prepaid by a reservation)
    amount_micros: int


@dataclass(frozen=True)
class ReservationCharge:
    key: str
    cluster_id: str
    node_count: int
    gpus_per_node: int
    duration_days: int
    term_start: datetime
    term_end: datetime
    discount: Decimal
    gpu_hour_usd: Decimal  # discounted
    amount_micros: int


def to_second(moment: datetime) -> datetime:
    """UTC, truncated to the whole second (the meter's resolution)."""
    return ensure_utc(moment).replace(microsecond=0)


def stamp(moment: datetime) -> str:
    """Compact UTC timestamp used inside idempotency keys."""
    return to_second(moment).strftime("%Y%m%dT%H%M%SZ")


def running_intervals(transitions: Iterable[NodeTransition]) -> list[RunningInterval]:
    """Per node, the intervals during which it is metered. Ties in time keep the input order."""
    by_node: dict[str, list[NodeTransition]] = {}
    for transition in transitions:
        by_node.setdefault(transition.node_id, []).append(transition)
    intervals: list[RunningInterval] = []
    for node_id, history in by_node.items():
        opened: datetime | None = None
        for transition in sorted(history, key=lambda t: t.at):
            if transition.status == RUNNING and opened is None:
                opened = to_second(transition.at)
            elif transition.status in STOP_STATUSES and opened is not None:
                intervals.append(RunningInterval(node_id, opened, max(opened, to_second(transition.at))))
                opened = None
        if opened is not None:
            intervals.append(RunningInterval(node_id, opened, None))
    intervals.sort(key=lambda i: (i.start, i.node_id))
    return intervals


def without_gaps(
    intervals: Sequence[RunningInterval], gaps: Sequence[tuple[datetime, datetime | None]]
) -> list[RunningInterval]:
    """The intervals minus the time inside `gaps` (credit holds: a held cluster is not metered)."""
    result = list(intervals)
    for gap_start, gap_end in gaps:
        start, end = to_second(gap_start), None if gap_end is None else to_second(gap_end)
        clipped: list[RunningInterval] = []
        for interval in result:
            if interval.start < start:  # the part before the gap
                before_end = start if interval.end is None else min(interval.end, start)
                clipped.append(RunningInterval(interval.node_id, interval.start, before_end))
            if end is not None and (interval.end is None or interval.end > end):  # the part after it
                clipped.append(RunningInterval(interval.node_id, max(interval.start, end), interval.end))
        result = clipped
    result.sort(key=lambda i: (i.start, i.node_id))
    return result


@dataclass(frozen=True)
class VolumeChange:
    volume_id: str
    event: str  # created | resized | deleted
    size_tib: Decimal  # the size from `at` on
    at: datetime


@dataclass(frozen=True)
class StorageSegment:
    """A stretch of a volume's life at one size."""

    volume_id: str
    size_tib: Decimal
    start: datetime
    end: datetime | None  # None: the volume still exists


def storage_segments(changes: Iterable[VolumeChange]) -> list[StorageSegment]:
    """Per volume, its life cut at every resize, from its history. Ties in time keep the input order;
    a resize within the segment's first second re-sizes that segment (nothing of it can be charged)."""
    by_volume: dict[str, list[VolumeChange]] = {}
    for change in changes:
        by_volume.setdefault(change.volume_id, []).append(change)
    segments: list[StorageSegment] = []
    for volume_id, history in by_volume.items():
        opened: StorageSegment | None = None
        for change in sorted(history, key=lambda c: c.at):
            moment = to_second(change.at)
            if change.event == "created" and opened is None:
                opened = StorageSegment(volume_id, change.size_tib, moment, None)
            elif change.event == "resized" and opened is not None and change.size_tib != opened.size_tib:
                if moment <= opened.start:
                    opened = StorageSegment(volume_id, change.size_tib, opened.start, None)
                else:
                    segments.append(StorageSegment(volume_id, opened.size_tib, opened.start, moment))
                    opened = StorageSegment(volume_id, change.size_tib, moment, None)
            elif change.event == "deleted" and opened is not None:
                end = max(opened.start, moment)
                segments.append(StorageSegment(volume_id, opened.size_tib, opened.start, end))
                opened = None
        if opened is not None:
            segments.append(opened)
    segments.sort(key=lambda s: (s.start, s.volume_id))
    return segments


def first_time_running(intervals: Sequence[RunningInterval], node_count: int) -> datetime | None:
    """The first moment at least `node_count` nodes run together (a cluster "reaches RUNNING")."""
    events: list[tuple[datetime, int]] = []
    for interval in intervals:
        events.append((interval.start, 1))
        if interval.end is not None:
            events.append((interval.end, -1))
    running = 0
    # Stops before starts at the same second: a replaced node does not count twice.
    for moment, delta in sorted(events, key=lambda e: (e[0], e[1])):
        running += delta
        if running >= node_count:
            return moment
    return None


def compute_segments(
    intervals: Sequence[RunningInterval],
    *,
    reserved_slots: int = 0,
    coverage_end: datetime | None = None,
    spot_nodes: frozenset[str] = frozenset(),
) -> list[ComputeSegment]:
    """Split running intervals into reserved, on-demand and spot segments (see the module docstring).

    `reserved_slots` is the reservation's node count (0: an on-demand cluster); `coverage_end` is when
    the reservation stops covering nodes (None: not known yet, the term has not started); `spot_nodes`
    the nodes that ran on spot capacity (a cluster without a reservation only).
    """
    if reserved_slots <= 0:
        return [
            ComputeSegment(
                i.node_id,
                UsageKind.COMPUTE_SPOT if i.node_id in spot_nodes else UsageKind.COMPUTE_ON_DEMAND,
                i.start,
                i.end,
            )
            for i in intervals
        ]

    stop, expire, start = 0, 1, 2  # order of events that share a second
    events: list[tuple[datetime, int, str]] = []
    for interval in intervals:
        if interval.end is not None and interval.end <= interval.start:
            continue  # started and stopped within one second: nothing to bill, no slot to take
        events.append((interval.start, start, interval.node_id))
        if interval.end is not None:
            events.append((interval.end, stop, interval.node_id))
    if coverage_end is not None:
        events.append((to_second(coverage_end), expire, ""))
    events.sort(key=lambda e: (e[0], e[1], e[2]))

    segments: list[ComputeSegment] = []
    open_segments: dict[str, ComputeSegment] = {}
    covered = True

    def close(node_id: str, at: datetime) -> ComputeSegment:
        segment = open_segments.pop(node_id)
        if at > segment.start:
            segments.append(ComputeSegment(node_id, segment.kind, segment.start, at))
        return segment

    def reserved_in_use() -> int:
        return sum(1 for s in open_segments.values() if s.kind is UsageKind.COMPUTE_RESERVED)

    for moment, event, node_id in events:
        if event == start:
            kind = (
                UsageKind.COMPUTE_RESERVED
                if covered and reserved_in_use() < reserved_slots
                else UsageKind.COMPUTE_ON_DEMAND
            )
            open_segments[node_id] = ComputeSegment(node_id, kind, moment, None)
        elif event == stop:
            closed = close(node_id, moment)
            if covered and closed.kind is UsageKind.COMPUTE_RESERVED:
                waiting = sorted(
                    (s for s in open_segments.values() if s.kind is UsageKind.COMPUTE_ON_DEMAND),
                    key=lambda s: (s.start, s.node_id),
                )
                if waiting:
                    promoted = close(waiting[0].node_id, moment)
                    open_segments[promoted.node_id] = ComputeSegment(
                        promoted.node_id, UsageKind.COMPUTE_RESERVED, moment, None
                    )
        else:  # coverage ends: every reserved node continues on-demand
            covered = False
            for segment in [s for s in open_segments.values() if s.kind is UsageKind.COMPUTE_RESERVED]:
                close(segment.node_id, moment)
                open_segments[segment.node_id] = ComputeSegment(
                    segment.node_id, UsageKind.COMPUTE_ON_DEMAND, moment, None
                )
    segments.extend(open_segments.values())
    segments.sort(key=lambda s: (s.start, s.node_id))
    return segments


def hour_slices(start: datetime, end: datetime | None, cutoff: datetime) -> list[tuple[datetime, datetime]]:
    """The final clock-hour slices of [start, end): those ending at or before `cutoff`."""
    start, cutoff = to_second(start), to_second(cutoff)
    stop = cutoff if end is None else min(to_second(end), cutoff)
    slices: list[tuple[datetime, datetime]] = []
    slice_start = start
    while slice_start < stop:
        hour_end = slice_start.replace(minute=0, second=0) + SLICE
        slice_end = hour_end if end is None else min(hour_end, to_second(end))
        if slice_end > cutoff:
            break
        slices.append((slice_start, slice_end))
        slice_start = slice_end
    return slices


def unbilled_seconds(start: datetime, end: datetime | None, *, cutoff: datetime, now: datetime) -> int:
    """Seconds of [start, min(end, now)) that no final slice covers yet at `cutoff` (usage accrued but
    not charged: the credit check counts it so exhaustion is noticed within a pass, not an hour)."""
    start, cutoff, now = to_second(start), to_second(cutoff), to_second(now)
    if end is not None and to_second(end) <= cutoff:
        return 0
    billed_until = max(start, cutoff.replace(minute=0, second=0))
    stop = now if end is None else min(to_second(end), now)
    return max(0, int((stop - billed_until).total_seconds()))


def accrued_micros(
    segments: Iterable[ComputeSegment],
    *,
    gpus_per_node: int,
    on_demand_gpu_hour_usd: Decimal,
    cutoff: datetime,
    now: datetime,
    spot_gpu_hour_usd: Decimal = Decimal(0),
) -> int:
    """On-demand and spot usage of `segments` accrued up to `now` but not in a final slice yet."""
    rates = {UsageKind.COMPUTE_ON_DEMAND: on_demand_gpu_hour_usd, UsageKind.COMPUTE_SPOT: spot_gpu_hour_usd}
    return sum(
        prorate_micros(rates[s.kind], gpus_per_node, unbilled_seconds(s.start, s.end, cutoff=cutoff, now=now))
        for s in segments
        if s.kind in rates
    )


def compute_usage_items(
    segments: Iterable[ComputeSegment],
    *,
    gpus_per_node: int,
    on_demand_gpu_hour_usd: Decimal,
    cutoff: datetime,
    spot_gpu_hour_usd: Decimal = Decimal(0),
) -> list[UsageItem]:
    """Priced, keyed line items for every final hour slice of `segments` (reserved at 0: prepaid)."""
    rates = {UsageKind.COMPUTE_ON_DEMAND: on_demand_gpu_hour_usd, UsageKind.COMPUTE_SPOT: spot_gpu_hour_usd,
             UsageKind.COMPUTE_RESERVED: Decimal(0)}
    items: list[UsageItem] = []
    for segment in segments:
        price = rates[segment.kind]
        for slice_start, slice_end in hour_slices(segment.start, segment.end, cutoff):
            seconds = int((slice_end - slice_start).total_seconds())
            items.append(
                UsageItem(
                    key=f"compute:{segment.node_id}:{stamp(segment.start)}:{stamp(slice_start)}",
                    kind=segment.kind,
                    resource_id=segment.node_id,
                    start=slice_start,
                    end=slice_end,
                    seconds=seconds,
                    units=Decimal(gpus_per_node),
                    unit_price_usd=price,
                    amount_micros=prorate_micros(price, gpus_per_node, seconds),
                )
            )
    return items


def storage_usage_items(
    *,
    volume_id: str,
    size_tib: Decimal,
    start: datetime,
    end: datetime | None,
    tib_hour_usd: Decimal,
    cutoff: datetime,
) -> list[UsageItem]:
    """Priced, keyed line items for a stretch [start, end) of a volume's life at one size, by hour slice.

    The stretch's start goes into the keys: a resize starts a new stretch with keys of its own."""
    items: list[UsageItem] = []
    for slice_start, slice_end in hour_slices(start, end, cutoff):
        seconds = int((slice_end - slice_start).total_seconds())
        items.append(
            UsageItem(
                key=f"storage:{volume_id}:{stamp(start)}:{stamp(slice_start)}",
                kind=UsageKind.STORAGE,
                resource_id=volume_id,
                start=slice_start,
                end=slice_end,
                seconds=seconds,
                units=size_tib,
                unit_price_usd=tib_hour_usd,
                amount_micros=prorate_micros(tib_hour_usd, size_tib, seconds),
            )
        )
    return items


def reservation_charge(
    *,
    cluster_id: str,
    node_count: int,
    gpus_per_node: int,
    on_demand_gpu_hour_usd: Decimal,
    discount: Decimal,
    duration_days: int,
    term_start: datetime,
) -> ReservationCharge:
    """The one up-front charge of a reserved term, keyed per cluster (a cluster is reserved once)."""
    start = to_second(term_start)
    rate = on_demand_gpu_hour_usd * (1 - discount)
    return ReservationCharge(
        key=f"reservation:{cluster_id}",
        cluster_id=cluster_id,
        node_count=node_count,
        gpus_per_node=gpus_per_node,
        duration_days=duration_days,
        term_start=start,
        term_end=start + timedelta(days=duration_days),
        discount=discount,
        gpu_hour_usd=rate,
        amount_micros=reserved_upfront_micros(
            reserved_rate=rate, gpus=gpus_per_node * node_count, duration_days=duration_days
        ),
    )
