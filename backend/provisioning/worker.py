"""Engine workers: claim due clusters with a lease, run a reconcile pass each, heartbeat, repeat.

Claiming uses `FOR UPDATE SKIP LOCKED` on PostgreSQL (workers never wait on each other) and a
`BEGIN IMMEDIATE` transaction on SQLite (SQLAlchemy drops SKIP LOCKED there; the write lock serialises
claims instead). Every claim bumps the item's fencing token; a pass commits only while the token is
still its own, so a worker that lost its lease (paused, partitioned) can never overwrite a newer one.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import threading
import uuid
from dataclasses import dataclass
from typing import Any

import structlog
from sqlalchemy import Engine, delete, func, or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from backend.domain.catalog import Catalog, default_catalog
from backend.domain.clock import SYSTEM_CLOCK, Clock
from backend.provisioning import autoscaler, host_checks, node_metrics, node_views
from backend.provisioning.driver import ProvisioningDriver, workload_of
from backend.provisioning.drivers import make_driver
from backend.provisioning.reconciler import PassContext, reconcile_cluster
from backend.provisioning.settings import EngineSettings, configured
from backend.provisioning.state import aware
from backend.store.db import make_session_factory, write_session
from backend.store.engine_models import Worker as WorkerRow
from backend.store.engine_models import WorkItem
from backend.store.models import Cluster

log = structlog.get_logger("gpucloud.engine")
ERROR_BACKOFF = dt.timedelta(seconds=1)
HOST_CHECK_POLL_SECONDS = 1.0  # how soon a new or re-checked pool's hosts are checked


@dataclass
class PassResult:
    claimed: int = 0
    committed: int = 0
    steps: int = 0


class EngineWorker:
    """One worker; `run_once` claims and reconciles one batch, `run` loops until `stop_event` is set."""

    def __init__(self, session_factory: sessionmaker[Session], settings: EngineSettings | None = None, *,
                 catalog: Catalog | None = None, driver: ProvisioningDriver | None = None,
                 worker_id: str | None = None, clock: Clock = SYSTEM_CLOCK) -> None:
        self.settings = settings or configured()
        self.clock = clock  # every claim, lease, pass and due time reads this (tests drive a ManualClock)
        self.session_factory = _sessions(session_factory, write=True)
        # Reads that wait on a driver (the autoscaler asks it for the jobs, over SSH on real nodes) while
        # their session is open: on SQLite they must not hold the write lock, which every writer waits for.
        self.read_sessions = _sessions(session_factory, write=False)
        self.catalog = catalog or default_catalog()
        self.driver = driver or make_driver(self.settings, clock=clock)
        self.id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.stop_event = threading.Event()
        self.total_steps = 0
        self.total_passes = 0

    @property
    def _lease(self) -> dt.timedelta:
        return dt.timedelta(seconds=self.settings.engine_lease_seconds)

    def _claim(self) -> list[tuple[str, int]]:
        now = self.clock.now()
        with write_session(self.session_factory) as session:
            query = (select(WorkItem)
                     .where(WorkItem.due_at <= now,
                            or_(WorkItem.lease_expires_at.is_(None), WorkItem.lease_expires_at < now))
                     .order_by(WorkItem.due_at)
                     .limit(self.settings.engine_batch_size))
            if session.get_bind().dialect.name == "postgresql":
                query = query.with_for_update(skip_locked=True)
            items = list(session.scalars(query))
            for item in items:
                item.lease_owner = self.id
                item.lease_expires_at = now + self._lease
                item.fencing_token += 1
            claimed = [(item.cluster_id, item.fencing_token) for item in items]
            session.commit()
        return claimed

    def _process(self, cluster_id: str, fencing_token: int, result: PassResult) -> None:
        with write_session(self.session_factory) as session:
            item = session.get(WorkItem, cluster_id, with_for_update=True)
            if item is None or item.lease_owner != self.id or item.fencing_token != fencing_token:
                log.warning("engine.lease_lost", cluster_id=cluster_id, worker=self.id)
                return
            ctx = PassContext(session=session, driver=self.driver, catalog=self.catalog,
                              settings=self.settings, now=self.clock.now(), worker=self.id,
                              fencing_token=fencing_token)
            try:
                next_due = reconcile_cluster(ctx, cluster_id)
            except Exception as exc:  # one broken cluster must not stop the others
                session.rollback()
                log.exception("engine.pass_failed", cluster_id=cluster_id)
                self._record_error(cluster_id, fencing_token, repr(exc))
                return
            item.due_at = next_due
            item.lease_owner = None
            item.lease_expires_at = None
            item.passes += 1
            item.last_error = None
            session.commit()
            result.committed += 1
            result.steps += ctx.steps

    def _record_error(self, cluster_id: str, fencing_token: int, error: str) -> None:
        with write_session(self.session_factory) as session:
            session.execute(update(WorkItem)
                            .where(WorkItem.cluster_id == cluster_id, WorkItem.fencing_token == fencing_token)
                            .values(last_error=error[:2000], due_at=self.clock.now() + ERROR_BACKOFF,
                                    lease_owner=None, lease_expires_at=None))
            session.commit()

    def heartbeat(self) -> None:
        """Record liveness, extend the leases this worker holds and forget workers long dead."""
        now = self.clock.now()
        with write_session(self.session_factory) as session:
            row = session.get(WorkerRow, self.id)
            if row is None:
                session.add(WorkerRow(id=self.id, started_at=now, heartbeat_at=now, passes=self.total_passes))
            else:
                row.heartbeat_at, row.passes = now, self.total_passes
            dead_since = now - dt.timedelta(seconds=self.settings.engine_worker_prune_seconds)
            pruned = session.execute(delete(WorkerRow).where(WorkerRow.heartbeat_at < dead_since))
            if pruned.rowcount:  # type: ignore[attr-defined]
                log.info("engine.workers_pruned", count=pruned.rowcount, worker=self.id)  # type: ignore[attr-defined]
            held = select(WorkItem.cluster_id).where(WorkItem.lease_owner == self.id)
            if session.get_bind().dialect.name == "postgresql":
                # The row a pass has locked is skipped (the pass ends its lease anyway): no waiting.
                held = held.with_for_update(skip_locked=True)
            session.execute(update(WorkItem).where(WorkItem.cluster_id.in_(held))
                            .values(lease_expires_at=now + self._lease))
            host_checks.extend_leases(session, self.id, now)
            session.commit()

    def run_once(self) -> PassResult:
        result = PassResult()
        claimed = self._claim()
        result.claimed = len(claimed)
        for cluster_id, token in claimed:
            if self.stop_event.is_set():
                break
            self._process(cluster_id, token, result)
        self.total_steps += result.steps
        self.total_passes += result.committed
        return result

    def next_due_at(self) -> dt.datetime | None:
        """When an item can next be claimed: the earliest due time of unleased items or the earliest
        lease expiry of due ones (None: nothing is queued)."""
        now = self.clock.now()
        with self.read_sessions() as session:
            due = session.scalar(select(func.min(WorkItem.due_at)).where(
                WorkItem.due_at.is_not(None),
                or_(WorkItem.lease_expires_at.is_(None), WorkItem.lease_expires_at < now)))
            expiry = session.scalar(select(func.min(WorkItem.lease_expires_at)).where(
                WorkItem.due_at.is_not(None), WorkItem.lease_expires_at >= now))
            session.rollback()
        times = [t for t in (aware(due), aware(expiry)) if t is not None]
        return min(times, default=None)

    def next_due_in(self) -> float:
        """Seconds until an item can next be claimed (capped by the poll interval, so new work is seen)."""
        poll = self.settings.engine_poll_seconds
        due = self.next_due_at()
        if due is None:
            return poll
        return max(0.0, min(poll, (due - self.clock.now()).total_seconds()))

    def run(self) -> None:
        log.info("engine.worker_started", worker=self.id, driver=self.driver.name,
                 speed=self.settings.simulation_speed)
        beat = threading.Thread(target=self._heartbeat_loop, name="engine-heartbeat", daemon=True)
        beat.start()
        sampler = threading.Thread(target=self._metrics_loop, name="engine-metrics", daemon=True)
        sampler.start()
        scaler = threading.Thread(target=self._autoscale_loop, name="engine-autoscaler", daemon=True)
        scaler.start()
        checker = threading.Thread(target=self._host_check_loop, name="engine-host-checks", daemon=True)
        checker.start()
        while not self.stop_event.is_set():
            try:
                result = self.run_once()
                if result.claimed == 0:
                    self.stop_event.wait(self.next_due_in())
            except Exception:  # the database may be restarting: back off and retry
                log.exception("engine.worker_loop_error", worker=self.id)
                self.stop_event.wait(1.0)
        beat.join(timeout=5)
        sampler.join(timeout=5)
        scaler.join(timeout=5)
        checker.join(timeout=5)
        log.info("engine.worker_stopped", worker=self.id)

    def collect_metrics(self) -> int:
        """Sample every RUNNING node's GPUs into the metrics ring buffer (node_metrics); nodes read."""
        now = self.clock.now()
        with self.read_sessions() as session:  # no write lock held while the nodes answer
            readings = node_metrics.read(session, self.driver, now)
        with write_session(self.session_factory) as session:
            count = node_metrics.store(session, readings, now)
            session.commit()
        return count

    def _metrics_loop(self) -> None:
        while not self.stop_event.wait(self.settings.metrics_interval_seconds):
            try:
                self.collect_metrics()
            except Exception:
                log.exception("engine.metrics_failed", worker=self.id)

    def autoscale(self) -> int:
        """One autoscaler round over every RUNNING autoscaled cluster (backend.provisioning.autoscaler);
        the decisions carried out."""
        source = workload_of(self.driver)
        if source is None:
            return 0
        unit = dt.timedelta(seconds=self.settings.autoscale_idle_unit_seconds)
        with self.read_sessions() as session:
            ids = list(session.scalars(select(Cluster.id).where(
                Cluster.autoscaling_min_nodes.is_not(None), Cluster.status == "RUNNING",
                Cluster.deletion_requested_at.is_(None))))
        done = 0
        for cluster_id in ids:
            with self.read_sessions() as session:
                cluster = session.get(Cluster, cluster_id)
                scaling = None if cluster is None else autoscaler.range_of(cluster, unit)
                if cluster is None or scaling is None:
                    continue
                runs = node_views.node_runs(session, cluster_id)
                now = self.clock.now()
                jobs = source.cluster_jobs(session, cluster.name, runs, now, cluster_id=cluster_id)
                power = autoscaler.power_requests(self.driver, session, cluster_id, runs)
                free = autoscaler.free_nodes(session, self.catalog, cluster, now)
            decision = autoscaler.decide(scaling, runs, jobs, free_nodes=free, now=now, power=power)
            if decision is None:
                continue
            if decision.waiting:  # nothing to change: the reason is said once in the phase history
                with write_session(self.session_factory) as session:
                    if autoscaler.note_waiting(session, cluster_id, decision, now):
                        session.commit()
                        log.info("engine.autoscale_waiting", cluster_id=cluster_id, reason=decision.reason)
                continue
            with write_session(self.session_factory) as session:
                cluster = session.get(Cluster, cluster_id)
                members = [r.name for r in runs]
                if cluster is not None and autoscaler.apply(session, self.catalog, cluster, decision,
                                                            members=members, now=self.clock.now()):
                    session.commit()
                    done += 1
                    log.info("engine.autoscaled", cluster_id=cluster_id, node_count=decision.node_count,
                             reason=decision.reason)
        return done

    def _autoscale_loop(self) -> None:
        while not self.stop_event.wait(self.settings.autoscale_interval_seconds):
            try:
                self.autoscale()
            except Exception:
                log.exception("engine.autoscale_failed", worker=self.id)

    def check_hosts(self) -> int:
        """One round of host pool checks (backend.provisioning.host_checks); how many hosts were checked."""
        interval = dt.timedelta(seconds=self.settings.host_check_interval_seconds)
        return host_checks.run_due_checks(self.session_factory, self.clock, self.id, interval)

    def _host_check_loop(self) -> None:
        while not self.stop_event.is_set():
            try:
                checked = self.check_hosts()
            except Exception:
                log.exception("engine.host_checks_failed", worker=self.id)
                checked = 0
            if not checked:
                self.stop_event.wait(HOST_CHECK_POLL_SECONDS)

    def _heartbeat_loop(self) -> None:
        interval = self.settings.engine_lease_seconds / 3
        while not self.stop_event.wait(interval):
            try:
                self.heartbeat()
            except Exception:
                log.exception("engine.heartbeat_failed", worker=self.id)


def _sessions(factory: sessionmaker[Session], *, write: bool) -> sessionmaker[Session]:
    """On SQLite, the database of `factory` with sessions as `make_session_factory` makes them, whatever
    `factory` made (the runtime hands the worker its write sessions): reads that take no write lock, writes
    that open with BEGIN IMMEDIATE and queue with the process's other writers. Elsewhere `factory`."""
    bind: Any = factory.kw.get("bind")
    sqlite = isinstance(bind, Engine) and bind.dialect.name == "sqlite"
    return make_session_factory(bind, write=write) if sqlite else factory


class EmbeddedWorker:
    """Handle of the in-process worker thread started by `serve`."""

    def __init__(self, worker: EngineWorker) -> None:
        self.worker = worker
        self.thread = threading.Thread(target=worker.run, name="engine-worker", daemon=True)

    def stop(self, timeout: float = 10.0) -> None:
        self.worker.stop_event.set()
        self.thread.join(timeout=timeout)


def start_embedded(worker: EngineWorker) -> EmbeddedWorker:
    """Start `worker` in a thread inside the API process (`serve`); `.stop()` ends it."""
    handle = EmbeddedWorker(worker)
    handle.worker.heartbeat()
    handle.thread.start()
    return handle


def run_forever(worker: EngineWorker) -> None:
    """`gpucloud-backend worker`: `worker` in the foreground until SIGTERM / SIGINT."""
    from backend.signals import run_until_stop_signal

    worker.heartbeat()
    run_until_stop_signal(worker.run, worker.stop_event.set, name="engine-worker")
