"""Compute metering: the engine's node transition history -> reserved terms and priced hour slices.

Each node is priced at `PriceBook.capacity_gpu_hour` of the capacity it ran on, the per-node rate the
cluster price (`backend.billing.estimate.cluster_price`) adds up, so an estimate is the first hour charged.
Reads `engine_node_transitions` (append-only, written by the engine with every node status change) and
`engine_clusters.first_ready_at` (when a cluster first reached RUNNING: a reserved term starts there).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.billing.ledger import PendingCharge
from backend.billing.meter import (
    RUNNING,
    STOP_STATUSES,
    ComputeSegment,
    NodeTransition,
    ReservationCharge,
    RunningInterval,
    accrued_micros,
    compute_segments,
    compute_usage_items,
    first_time_running,
    reservation_charge,
    running_intervals,
    without_gaps,
)
from backend.billing.pricing import ON_DEMAND, SPOT, PriceBook
from backend.billing.storage_meter import usage_record
from backend.domain.clock import ensure_utc
from backend.store.billing_models import CapacityReservation, Reservation, SettledCluster, UsageRecord
from backend.store.engine_models import EngineCluster
from backend.store.engine_models import NodeTransition as NodeTransitionRow
from backend.store.models import Cluster

DECOMMISSION = "decommission"
UNLIMITED_SLOTS = 1_000_000
CONVERT_TO_ON_DEMAND = "convert_to_on_demand"


@dataclass(frozen=True)
class ClusterUsage:
    cluster_id: str
    region: str
    instance_type: str
    gpus_per_node: int
    intervals: list[RunningInterval]
    spot_nodes: frozenset[str] = frozenset()  # nodes that ran on spot capacity (metered at the spot rate)


METER_STATUSES = (RUNNING, *sorted(STOP_STATUSES))


def load_cluster_usage(session: Session, *, project_id: str) -> list[ClusterUsage]:
    """Every unsettled cluster of the project that has node history, with its nodes' metered intervals."""
    settled = select(SettledCluster.cluster_id).where(SettledCluster.project_id == project_id)
    rows = session.scalars(
        select(NodeTransitionRow)
        .where(
            NodeTransitionRow.project_id == project_id,
            NodeTransitionRow.to_status.in_(METER_STATUSES),
            NodeTransitionRow.cluster_id.not_in(settled),
        )
        .order_by(NodeTransitionRow.at, NodeTransitionRow.id)
    ).all()
    by_cluster: dict[str, list[NodeTransitionRow]] = defaultdict(list)
    for row in rows:
        by_cluster[row.cluster_id].append(row)
    usages = []
    for cluster_id, history in by_cluster.items():
        first = history[0]
        transitions = [NodeTransition(r.node_id, r.to_status, r.at) for r in history]
        usages.append(
            ClusterUsage(
                cluster_id,
                first.region,
                first.instance_type,
                first.gpu_count,
                running_intervals(transitions),
                frozenset(r.node_id for r in history if r.capacity_type == "spot"),
            )
        )
    return usages


def term_start(session: Session, cluster: Cluster, usage: ClusterUsage) -> datetime | None:
    """When the cluster first reached RUNNING (the engine's record, else all its nodes running together)."""
    engine_cluster = session.get(EngineCluster, cluster.id)
    if engine_cluster is not None and engine_cluster.first_ready_at is not None:
        return engine_cluster.first_ready_at
    return first_time_running(usage.intervals, cluster.node_count)


def start_reservation(
    session: Session,
    *,
    cluster: Cluster,
    usage: ClusterUsage,
    prices: PriceBook,
    now: datetime,
    expiry_grace: timedelta,
) -> tuple[Reservation, PendingCharge] | None:
    """The reservation of a reserved cluster that just reached RUNNING, with its up-front charge.

    Returns None when the cluster is not reserved, not RUNNING yet, or already has its reservation.
    """
    if cluster.billing_type != "reserved" or cluster.billing_duration_days is None:
        return None
    if session.get(Reservation, cluster.id) is not None:
        return None
    started = term_start(session, cluster, usage)
    if started is None:
        return None
    discount = prices.reserved_discount(usage.instance_type, cluster.billing_duration_days)
    on_expiry = cluster.billing_on_expiry or DECOMMISSION
    charge = reservation_charge(
        cluster_id=cluster.id,
        node_count=cluster.node_count,
        gpus_per_node=usage.gpus_per_node,
        on_demand_gpu_hour_usd=prices.capacity_gpu_hour(usage.instance_type, usage.region, ON_DEMAND),
        discount=discount,
        duration_days=cluster.billing_duration_days,
        term_start=started,
    )
    reservation = Reservation(
        cluster_id=cluster.id,
        project_id=cluster.project_id,
        region=usage.region,
        instance_type=usage.instance_type,
        node_count=charge.node_count,
        gpus_per_node=charge.gpus_per_node,
        duration_days=charge.duration_days,
        on_expiry=on_expiry,
        term_start=charge.term_start,
        term_end=charge.term_end,
        covered_until=charge.term_end + (expiry_grace if on_expiry == DECOMMISSION else timedelta(0)),
        discount=charge.discount,
        gpu_hour_usd=charge.gpu_hour_usd,
        upfront_micros=charge.amount_micros,
        usage_key=charge.key,
        created_at=ensure_utc(now),
    )
    build = partial(
        _reservation_record,
        charge,
        project_id=cluster.project_id,
        region=usage.region,
        instance_type=usage.instance_type,
        now=now,
        labels=dict(cluster.labels or {}),
    )
    return reservation, PendingCharge(charge.key, build)


def cluster_segments(
    *,
    usage: ClusterUsage,
    cluster: Cluster | None,
    reservation: Reservation | None,
    held: Sequence[tuple[datetime, datetime | None]] = (),
    capacity_reservation: CapacityReservation | None = None,
) -> list[ComputeSegment]:
    """The cluster's running time split into reserved and on-demand segments; time inside `held`
    (credit holds) is left out. A cluster drawing from `capacity_reservation` has every node covered
    (it draws at most the reservation's nodes) until the reservation's term ends."""
    slots, coverage_end = 0, None
    if capacity_reservation is not None:
        slots, coverage_end = UNLIMITED_SLOTS, capacity_reservation.ends_at
    elif reservation is not None:
        slots = reservation.node_count
        coverage_end = reservation.covered_until
    elif cluster is not None and cluster.billing_type == "reserved":
        # Before the term starts every node is covered (a fixed rule, so the slices charged at 0 now
        # are never re-priced under other keys later).
        slots = UNLIMITED_SLOTS
    intervals = without_gaps(usage.intervals, held) if held else usage.intervals
    return compute_segments(intervals, reserved_slots=slots, coverage_end=coverage_end,
                            spot_nodes=usage.spot_nodes)


def compute_records(
    *,
    project_id: str,
    usage: ClusterUsage,
    segments: Sequence[ComputeSegment],
    prices: PriceBook,
    cutoff: datetime,
    now: datetime,
    labels: Mapping[str, str] | None = None,
) -> list[PendingCharge]:
    """Charges for every final hour slice of the cluster's segments (stored or not), each line carrying
    `labels` (the cluster's when it is charged)."""
    items = compute_usage_items(
        segments,
        gpus_per_node=usage.gpus_per_node,
        on_demand_gpu_hour_usd=prices.capacity_gpu_hour(usage.instance_type, usage.region, ON_DEMAND),
        cutoff=cutoff,
        spot_gpu_hour_usd=prices.capacity_gpu_hour(usage.instance_type, usage.region, SPOT),
    )
    return [
        PendingCharge(
            item.key,
            partial(
                usage_record,
                item,
                project_id=project_id,
                region=usage.region,
                resource_type="node",
                now=now,
                cluster_id=usage.cluster_id,
                instance_type=usage.instance_type,
                labels=labels,
            ),
        )
        for item in items
    ]


def compute_accrued_micros(
    *,
    usage: ClusterUsage,
    segments: Sequence[ComputeSegment],
    prices: PriceBook,
    cutoff: datetime,
    now: datetime,
) -> int:
    """On-demand usage of the cluster accrued up to `now` that no charge covers yet."""
    return accrued_micros(
        segments,
        gpus_per_node=usage.gpus_per_node,
        on_demand_gpu_hour_usd=prices.capacity_gpu_hour(usage.instance_type, usage.region, ON_DEMAND),
        cutoff=cutoff,
        now=now,
        spot_gpu_hour_usd=prices.capacity_gpu_hour(usage.instance_type, usage.region, SPOT),
    )


def _reservation_record(
    charge: ReservationCharge,
    *,
    project_id: str,
    region: str,
    instance_type: str,
    now: datetime,
    labels: Mapping[str, str],
) -> UsageRecord:
    return UsageRecord(
        idempotency_key=charge.key,
        project_id=project_id,
        kind="reservation",
        resource_type="cluster",
        resource_id=charge.cluster_id,
        cluster_id=charge.cluster_id,
        region=region,
        instance_type=instance_type,
        period_start=charge.term_start,
        period_end=charge.term_end,
        seconds=int((charge.term_end - charge.term_start).total_seconds()),
        units=charge.node_count * charge.gpus_per_node,
        unit_price_usd=charge.gpu_hour_usd,
        amount_micros=charge.amount_micros,
        recorded_at=ensure_utc(now),
        labels=dict(labels),
    )


def settle_if_done(
    session: Session, *, project_id: str, usage: ClusterUsage, cutoff: datetime, now: datetime
) -> bool:
    """Mark a torn-down cluster settled once every slice of it is final (and so charged by this pass)."""
    if any(i.end is None or i.end > cutoff for i in usage.intervals):
        return False
    state = session.get(EngineCluster, usage.cluster_id)
    if state is None or not state.finished:
        return False
    session.add(
        SettledCluster(cluster_id=usage.cluster_id, project_id=project_id, settled_at=ensure_utc(now))
    )
    return True
