"""Prometheus metrics of the API, in a registry per app (tests build many apps in one process)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session, sessionmaker

from backend.domain.clock import utcnow
from backend.provisioning.state import aware
from backend.store.engine_models import Worker, WorkItem


class EngineCollector(Collector):
    """The engine's health as every process sees it in the shared database, read at scrape time: the
    heartbeat age of each worker (dead ones stay listed until pruned) and how late the queue runs."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = utcnow()
        try:
            with self._sessions() as session:
                workers = session.execute(select(Worker.id, Worker.heartbeat_at)).all()
                oldest_due = session.scalar(select(func.min(WorkItem.due_at)).where(
                    WorkItem.due_at <= now,
                    or_(WorkItem.lease_expires_at.is_(None), WorkItem.lease_expires_at < now)))
        except Exception:  # no database, no engine figures; /readyz says why
            return

        def age(when: datetime) -> float:
            since = aware(when)
            return 0.0 if since is None else max(0.0, (now - since).total_seconds())

        ages = GaugeMetricFamily(
            "gpucloud_engine_worker_heartbeat_age_seconds",
            "Seconds since each engine worker last heartbeat (alert when above the lease)",
            labels=["worker"],
        )
        for worker_id, heartbeat_at in workers:
            ages.add_metric([worker_id], age(heartbeat_at))
        yield ages
        lag = 0.0 if oldest_due is None else age(oldest_due)
        yield GaugeMetricFamily(
            "gpucloud_engine_queue_lag_seconds",
            "How long the most overdue unleased cluster has waited for a worker (0: none waiting)",
            value=lag,
        )

# Label values must come from a fixed set: a method invented by a client is one more time series
# held forever. Routes are labelled by their template ("unmatched" for unknown paths), never the path.
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
OTHER_METHOD = "other"


class Metrics:
    """Request counters and latency histograms labelled by method, route template and status; with
    `engine_sessions`, the engine's health from the database too."""

    def __init__(self, engine_sessions: sessionmaker[Session] | None = None) -> None:
        self.registry = CollectorRegistry()
        if engine_sessions is not None:
            self.registry.register(EngineCollector(engine_sessions))
        self.requests = Counter(
            "gpucloud_http_requests",
            "HTTP requests handled",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "gpucloud_http_request_duration_seconds",
            "HTTP request latency",
            ["method", "route"],
            registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
        )

    def observe(self, *, method: str, route: str, status: int, seconds: float) -> None:
        """Count one finished request (methods outside KNOWN_METHODS count as "other")."""
        method = method if method in KNOWN_METHODS else OTHER_METHOD
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(method, route).observe(seconds)

    def render(self) -> bytes:
        """The text exposition format."""
        return generate_latest(self.registry)
