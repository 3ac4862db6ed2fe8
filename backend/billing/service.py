"""The periodic metering job: charge usage exactly once, start and expire reserved terms, enforce credits.

One pass (`run_metering`) walks every project, each in its own transaction:
1. storage: final TiB-hour slices of every volume's size segments (from its history) charged, and the
   final hour slices of every reserved IP's rate segments (reserved or attached, from its history);
2. compute: reserved terms started (and charged up front) for reserved clusters that reached RUNNING,
   final node hour slices charged (reserved nodes at 0, nodes beyond the reservation on-demand);
3. reserved terms past their end: `on_expiry` carried out (decommission | convert_to_on_demand);
4. credits: a prepaid project with nothing left has its on-demand clusters paused (never those on paid
   capacity: reserved terms, drawn reservations), then decommissioned after the grace period; a top-up,
   or switching the project to postpaid, releases the holds;
5. budgets: thresholds crossed this month alerted once each (backend.billing.budgets);
6. months that are over get their invoice.
Every charge is keyed (see backend.billing.meter), so a crash anywhere rolls back the project's pass
and the next pass redoes it; a pass never charges a key twice and never skips one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from backend.billing import actions
from backend.billing.account import PREPAID, billing_mode
from backend.billing.budgets import check_budgets
from backend.billing.capacity_reservations import due_charges, project_reservations
from backend.billing.compute_meter import (
    CONVERT_TO_ON_DEMAND,
    DECOMMISSION,
    ClusterUsage,
    cluster_segments,
    compute_accrued_micros,
    compute_records,
    load_cluster_usage,
    settle_if_done,
    start_reservation,
)
from backend.billing.credits import assess
from backend.billing.invoices import issue_invoices
from backend.billing.ledger import PendingCharge, balance_micros, charge_usage
from backend.billing.money import micros_to_usd
from backend.billing.pricing import PriceBook
from backend.billing.reserved_ip_meter import (
    load_reserved_ip_usage,
    reserved_ip_accrued_micros,
    reserved_ip_records,
)
from backend.billing.settings import BillingSettings, credit_policy
from backend.billing.storage_meter import load_volume_usage, storage_accrued_micros, storage_records
from backend.domain.clock import Clock, ensure_utc
from backend.store.billing_models import BillingAccount, CreditHold, Reservation
from backend.store.models import Cluster, Project

log = structlog.get_logger("backend.billing")
FINISHED_STATUSES = ("DESTROYED", "FAILED")


@dataclass
class MeteringResult:
    projects: int = 0
    records_charged: int = 0
    micros_charged: int = 0
    reservations_started: int = 0
    reservations_expired: int = 0
    clusters_paused: int = 0
    clusters_decommissioned: int = 0
    clusters_resumed: int = 0
    invoices_issued: int = 0
    budget_alerts: int = 0


def run_metering(
    *, sessions: sessionmaker[Session], clock: Clock, settings: BillingSettings, prices: PriceBook
) -> MeteringResult:
    """One pass of the metering job over every project.

    A project whose pass fails (rolled back, retried next pass) does not hold up the others; the first
    failure is raised once every project had its turn.
    """
    now = clock.now()
    result = MeteringResult()
    failures: list[Exception] = []
    with sessions() as session:
        project_ids = list(session.scalars(select(Project.id).order_by(Project.id)))
    for project_id in project_ids:
        try:
            with sessions.begin() as session:
                meter_project(
                    session=session,
                    project_id=project_id,
                    now=now,
                    settings=settings,
                    prices=prices,
                    result=result,
                )
        except Exception as error:  # rolled back; the next pass charges the same keys
            log.warning("billing.project_pass_failed", project_id=project_id, error=repr(error))
            failures.append(error)
            continue
        result.projects += 1
    if result.records_charged or result.reservations_started or result.clusters_paused:
        log.info("billing.metered", **vars(result))
    if failures:
        raise failures[0]
    return result


def meter_project(
    *,
    session: Session,
    project_id: str,
    now: datetime,
    settings: BillingSettings,
    prices: PriceBook,
    result: MeteringResult,
) -> None:
    """Meter, charge and enforce for one project inside the caller's transaction."""
    cutoff = now - settings.settle
    clusters = {c.id: c for c in session.scalars(select(Cluster).where(Cluster.project_id == project_id))}
    reservations = {
        r.cluster_id: r
        for r in session.scalars(select(Reservation).where(Reservation.project_id == project_id))
    }
    all_holds = session.scalars(
        select(CreditHold).where(CreditHold.project_id == project_id).order_by(CreditHold.id)
    ).all()
    held: dict[str, list[tuple[datetime, datetime | None]]] = {}
    for hold in all_holds:
        held.setdefault(hold.cluster_id, []).append(
            (hold.paused_at, _maybe_utc(hold.released_at))
        )
    open_holds = {h.cluster_id: h for h in all_holds if h.released_at is None}

    volumes = load_volume_usage(session, project_id=project_id)
    records = storage_records(volumes, project_id=project_id, prices=prices, cutoff=cutoff, now=now)
    usages = load_cluster_usage(session, project_id=project_id)
    accrued = storage_accrued_micros(volumes, prices=prices, cutoff=cutoff, now=now)
    capacity = project_reservations(session, project_id)
    upfront_due = due_charges(session, capacity, now=now)
    records += upfront_due
    result.reservations_started += len(upfront_due)
    addresses = load_reserved_ip_usage(session, project_id=project_id)
    records += reserved_ip_records(addresses, project_id=project_id, prices=prices, cutoff=cutoff, now=now)
    accrued += reserved_ip_accrued_micros(addresses, prices=prices, cutoff=cutoff, now=now)
    for usage in usages:
        cluster = clusters.get(usage.cluster_id)
        if cluster is not None and usage.cluster_id not in reservations:
            started = _start_reservation(
                session,
                cluster=cluster,
                usage=usage,
                prices=prices,
                now=now,
                expiry_grace=settings.expiry_grace,
            )
            if started is not None:
                reservations[cluster.id], upfront = started
                records.append(upfront)
                result.reservations_started += 1
        segments = cluster_segments(
            usage=usage,
            cluster=cluster,
            reservation=reservations.get(usage.cluster_id),
            held=held.get(usage.cluster_id, ()),
            capacity_reservation=capacity.get(cluster.reservation_id or "") if cluster is not None else None,
        )
        # The project's own servers (a host pool's): their time is recorded for chargeback, at no charge.
        rates = prices.own_hosts(usage.region) if cluster is not None and cluster.host_pool_id else prices
        records += compute_records(
            project_id=project_id, usage=usage, segments=segments, prices=rates, cutoff=cutoff, now=now,
            labels=None if cluster is None else dict(cluster.labels or {}),
        )
        accrued += compute_accrued_micros(
            usage=usage, segments=segments, prices=rates, cutoff=cutoff, now=now
        )
    charged = charge_usage(session, records, now=now)
    for usage in usages:
        settle_if_done(session, project_id=project_id, usage=usage, cutoff=cutoff, now=now)
    result.records_charged += len(charged)
    result.micros_charged += sum(r.amount_micros for r in charged)

    _expire_reservations(session, reservations=reservations, clusters=clusters, now=now, result=result)
    _enforce_credits(
        session,
        project_id=project_id,
        clusters=clusters,
        holds=open_holds,
        now=now,
        settings=settings,
        result=result,
        unbilled_micros=accrued,
    )
    result.budget_alerts += check_budgets(session, project_id=project_id, now=now)
    result.invoices_issued += issue_invoices(session, project_id=project_id, cutoff=cutoff, now=now)


def _start_reservation(
    session: Session,
    *,
    cluster: Cluster,
    usage: ClusterUsage,
    prices: PriceBook,
    now: datetime,
    expiry_grace: timedelta,
) -> tuple[Reservation, PendingCharge] | None:
    started = start_reservation(
        session, cluster=cluster, usage=usage, prices=prices, now=now, expiry_grace=expiry_grace
    )
    if started is None:
        return None
    reservation, record = started
    try:
        with session.begin_nested():
            session.add(reservation)
            session.flush()
    except IntegrityError:
        return None  # a concurrent pass started it
    detail = (
        f"reserved term of {reservation.duration_days} days for {reservation.node_count} nodes, "
        f"{micros_to_usd(reservation.upfront_micros)} USD up front, ends {_iso(reservation.term_end)}"
    )
    actions.record_phase(
        session, cluster_id=cluster.id, phase="ReservedTermStarted", detail=detail, at=reservation.term_start
    )
    actions.record_audit(
        session,
        project_id=cluster.project_id,
        action="billing.reservation_started",
        resource_type="cluster",
        resource_id=cluster.id,
        at=now,
        details={
            "term_start": reservation.term_start.isoformat(),
            "term_end": reservation.term_end.isoformat(),
            "upfront_usd": str(micros_to_usd(reservation.upfront_micros)),
            "node_count": reservation.node_count,
            "on_expiry": reservation.on_expiry,
        },
    )
    return reservation, record


def _expire_reservations(
    session: Session,
    *,
    reservations: dict[str, Reservation],
    clusters: dict[str, Cluster],
    now: datetime,
    result: MeteringResult,
) -> None:
    for reservation in reservations.values():
        if reservation.expired_at is not None or now < reservation.term_end:
            continue
        reservation.expired_at = now
        result.reservations_expired += 1
        cluster = clusters.get(reservation.cluster_id)
        action = reservation.on_expiry
        outcome = action
        if cluster is not None and cluster.deletion_requested_at is None:
            if action == DECOMMISSION:
                reason = "reserved term ended (on_expiry = decommission)"
                if actions.decommission(session, cluster=cluster, reason=reason, at=now):
                    result.clusters_decommissioned += 1
                else:
                    outcome = "kept_on_demand_deletion_protection"
            elif action == CONVERT_TO_ON_DEMAND:
                actions.record_phase(
                    session,
                    cluster_id=cluster.id,
                    phase="ConvertedToOnDemand",
                    detail="reserved term ended; nodes are billed on-demand from now on",
                    at=now,
                )
        actions.record_audit(
            session,
            project_id=reservation.project_id,
            action="billing.reservation_expired",
            resource_type="cluster",
            resource_id=reservation.cluster_id,
            at=now,
            details={"on_expiry": action, "outcome": outcome, "term_end": _iso(reservation.term_end)},
        )


def _enforce_credits(
    session: Session,
    *,
    project_id: str,
    clusters: dict[str, Cluster],
    holds: dict[str, CreditHold],
    now: datetime,
    settings: BillingSettings,
    result: MeteringResult,
    unbilled_micros: int,
) -> None:
    account = session.get(BillingAccount, project_id)
    if billing_mode(session, project_id) != PREPAID:
        # Postpaid: invoiced, credits reduce the invoice, nothing is ever paused. A project switched
        # from prepaid gets back what exhaustion paused.
        for hold in list(holds.values()):
            if hold.decommissioned_at is None:
                _release(session, hold=hold, cluster=clusters.get(hold.cluster_id), now=now, result=result)
                del holds[hold.cluster_id]
        return
    if account is None:
        account = BillingAccount(project_id=project_id, prepaid=True, updated_at=now)
        session.add(account)
    balance = balance_micros(session, project_id)
    standing = assess(
        prepaid=True,
        balance_micros=balance - unbilled_micros,
        exhausted_since=_maybe_utc(account.exhausted_since),
        now=now,
        policy=credit_policy(settings),
    )
    if standing.exhausted_since is not None and account.exhausted_since is None:
        account.exhausted_since = standing.exhausted_since
        account.updated_at = now
        actions.record_audit(
            session,
            project_id=project_id,
            action="billing.credits_exhausted",
            resource_type="project",
            resource_id=project_id,
            at=now,
            details={
                "balance_usd": str(micros_to_usd(balance)),
                "unbilled_usd": str(micros_to_usd(unbilled_micros)),
                "decommission_at": _iso(standing.decommission_at),
                "attach_refused_at": _iso(standing.attach_refused_at),
                "volume_data_deadline": _iso(standing.volume_data_deadline),
            },
        )
    elif standing.exhausted_since is None and account.exhausted_since is not None:
        account.exhausted_since = None
        account.updated_at = now
        actions.record_audit(
            session,
            project_id=project_id,
            action="billing.credits_restored",
            resource_type="project",
            resource_id=project_id,
            at=now,
            details={"balance_usd": str(micros_to_usd(balance))},
        )
        for hold in list(holds.values()):
            if hold.decommissioned_at is None:
                _release(session, hold=hold, cluster=clusters.get(hold.cluster_id), now=now, result=result)
                del holds[hold.cluster_id]

    if standing.pause_on_demand:
        for cluster in clusters.values():
            if (
                cluster.billing_type != "on_demand"
                or cluster.reservation_id  # its capacity is paid up front: it runs on
                or cluster.host_pool_id  # the project's own servers cost nothing to run
                or cluster.deletion_requested_at is not None
                or cluster.status in FINISHED_STATUSES
            ):
                continue
            if cluster.id in holds:
                continue  # already paused
            _hold(
                session,
                cluster=cluster,
                holds=holds,
                now=now,
                result=result,
                decommission_at=standing.decommission_at,
            )
    if standing.decommission_on_demand:
        for held in holds.values():
            target = clusters.get(held.cluster_id)
            if held.decommissioned_at is None and target is not None:
                if target.deletion_protection:
                    continue  # the user's protection wins: it stays paused and unbilled until a top-up
                reason = "credits exhausted and the grace period is over"
                actions.decommission(session, cluster=target, reason=reason, at=now)
                held.decommissioned_at = now
                actions.record_audit(
                    session,
                    project_id=project_id,
                    action="cluster.decommissioned_for_credits",
                    resource_type="cluster",
                    resource_id=target.id,
                    at=now,
                    details={},
                )
                result.clusters_decommissioned += 1


def _hold(
    session: Session,
    *,
    cluster: Cluster,
    holds: dict[str, CreditHold],
    now: datetime,
    result: MeteringResult,
    decommission_at: datetime | None,
) -> None:
    hold = CreditHold(cluster_id=cluster.id, project_id=cluster.project_id, paused_at=now)
    session.add(hold)
    holds[cluster.id] = hold
    reason = f"credits exhausted; decommissioned at {_iso(decommission_at)} unless credits are added"
    if cluster.deletion_protection:
        reason = "credits exhausted; deletion_protection is on, so it stays paused until credits are added"
    actions.pause(session, cluster=cluster, reason=reason, at=now)
    actions.record_audit(
        session,
        project_id=cluster.project_id,
        action="cluster.paused_for_credits",
        resource_type="cluster",
        resource_id=cluster.id,
        at=now,
        details={"decommission_at": _iso(decommission_at)},
    )
    result.clusters_paused += 1


def _release(
    session: Session, *, hold: CreditHold, cluster: Cluster | None, now: datetime, result: MeteringResult
) -> None:
    hold.released_at = now
    if cluster is None:
        return
    actions.resume(session, cluster=cluster, reason="credits added", at=now)
    actions.record_audit(
        session,
        project_id=cluster.project_id,
        action="cluster.resumed",
        resource_type="cluster",
        resource_id=cluster.id,
        at=now,
        details={},
    )
    result.clusters_resumed += 1


def _maybe_utc(moment: datetime | None) -> datetime | None:
    return None if moment is None else ensure_utc(moment)


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.strftime("%Y-%m-%dT%H:%M:%SZ")
