"""GPU metrics per node: the ring buffer (fixed storage, at least a day kept, at most ~300 points a
series), the collector from the driver's telemetry and `GET /v1/clusters/{id}/metrics`."""

from __future__ import annotations

import datetime as dt
import sqlite3
from collections.abc import Callable, Sequence

from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from backend.domain.clock import ManualClock
from backend.provisioning import node_metrics
from backend.provisioning.driver import NodeTelemetry, TelemetryTarget
from backend.provisioning.drivers.simulated.datacenter import SimulatedDatacenter
from backend.provisioning.node_metrics import Sample
from backend.provisioning.settings import EngineSettings
from backend.provisioning.worker import EngineWorker
from backend.settings import Settings
from backend.store.engine_models import NodeMetricChunk
from tests.backend.engine.conftest import FAST, create, drain

NOW = dt.datetime(2026, 11, 26, 12, 0, tzinfo=dt.UTC)


def _minutes(hours: int) -> list[Sample]:
    """One sample a minute for `hours` up to NOW: utilisation = minute of the hour, memory = 1000 x it."""
    first = NOW - dt.timedelta(hours=hours)
    return [Sample(first + dt.timedelta(minutes=m), float(m % 60), 1000 * (m % 60))
            for m in range(1, hours * 60 + 1)]


def test_node_metrics_keep_a_day_in_fixed_storage_and_downsample(
    admin: TestClient, sessions: sessionmaker[Session]
) -> None:
    cluster = create(admin, node_count=2)
    with sessions.begin() as session:
        node_metrics.record(session, cluster["id"], "train-0", _minutes(30))  # more than the ring holds
    with sessions() as session:
        rows = session.scalar(select(func.count()).select_from(NodeMetricChunk))
        day = node_metrics.series(session, cluster["id"], "1d", NOW)
        six = node_metrics.series(session, cluster["id"], "6h", NOW, "train-0")
        hour = node_metrics.series(session, cluster["id"], "1h", NOW)
    # Fixed storage: one row per ring slot, whatever was written.
    assert rows == sum(tier.ring for tier in node_metrics.TIERS)
    assert (day["step_seconds"], len(day["timestamps"])) == (300, 288)
    assert day["timestamps"][-1] == "2026-11-26T12:00:00Z"  # the bucket holding NOW
    (series,) = day["series"]
    assert series["node"] == "train-0" and len(series["gpu_utilization_pct"]) == 288
    # The whole day is there (retention >= 1 day); each 5-minute bucket is the mean of its minutes.
    assert None not in series["gpu_utilization_pct"]
    assert series["gpu_utilization_pct"][-2:] == [(55 + 56 + 57 + 58 + 59) / 5, 0.0]
    assert series["gpu_memory_used_mib"][-2] == 57_000
    assert (six["step_seconds"], len(six["timestamps"])) == (120, 180)
    # 1h reads the 10-second ring: one sample a minute there, so 20-second buckets are half empty.
    assert (hour["step_seconds"], len(hour["timestamps"])) == (20, 180)
    values = hour["series"][0]["gpu_utilization_pct"]
    assert values.count(None) == 120 and [v for v in values if v is not None][-1] == 0.0  # minute 60 = 0


def test_node_metrics_ring_overwrites_what_is_older_than_retention(
    admin: TestClient, sessions: sessionmaker[Session]
) -> None:
    cluster = create(admin, node_count=2)
    with sessions.begin() as session:
        node_metrics.record(session, cluster["id"], "train-1", _minutes(12))
    with sessions() as session:
        before = node_metrics.series(session, cluster["id"], "1d", NOW)["series"][0]["gpu_utilization_pct"]
    coarse = node_metrics.COARSE
    later = NOW + dt.timedelta(seconds=coarse.chunk_seconds * coarse.ring)
    with sessions.begin() as session:  # the ring comes round to NOW's chunk again
        node_metrics.record(session, cluster["id"], "train-1", [Sample(later, 50.0, 10)])
    with sessions() as session:
        after = node_metrics.series(session, cluster["id"], "1d", NOW)["series"][0]["gpu_utilization_pct"]
        new = node_metrics.series(session, cluster["id"], "1d", later)["series"][0]["gpu_utilization_pct"]
        rows = session.scalar(select(func.count()).select_from(NodeMetricChunk)
                              .where(NodeMetricChunk.tier == coarse.number))
    assert before[-2:] == [57.0, 0.0]
    # NOW's chunk was overwritten (its slot holds the new one now), the chunk before not yet.
    assert after[-1] is None and 0 < sum(v is not None for v in after) < sum(v is not None for v in before)
    assert [v for v in new if v is not None] == [50.0]  # a read never shows what is older than its window
    assert rows is not None and rows <= coarse.ring


def test_node_metrics_collector_and_api(
    admin: TestClient, member: TestClient, make_worker: Callable[..., EngineWorker]
) -> None:
    cluster = create(admin, node_count=2)
    worker = make_worker()
    drain(worker)
    assert worker.collect_metrics() == 2
    response = member.get(f"/v1/clusters/{cluster['id']}/metrics", params={"window": "5m"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["step_seconds"] == 10 and len(body["timestamps"]) == 30
    assert [s["node"] for s in body["series"]] == ["train-0", "train-1"]
    for series in body["series"]:
        # The newest sample: the last step, or the one before when the read crossed a 10 s boundary.
        [*_, util] = [v for v in series["gpu_utilization_pct"][-2:] if v is not None]
        [*_, memory] = [v for v in series["gpu_memory_used_mib"][-2:] if v is not None]
        assert 0 <= util <= 100 and 0 <= memory <= 8 * 81559
    one = admin.get(f"/v1/clusters/{cluster['id']}/metrics", params={"window": "1d", "node": "train-1"})
    assert [s["node"] for s in one.json()["series"]] == ["train-1"] and len(one.json()["timestamps"]) == 288
    bad = admin.get(f"/v1/clusters/{cluster['id']}/metrics", params={"window": "2d"})
    assert bad.status_code == 422 and bad.json()["field"] == "window"


class _WriterProbe(SimulatedDatacenter):
    """The simulated datacenter noting, while the nodes answer (over SSH on real ones), whether another
    connection could begin a write transaction on the SQLite file (`database`; None on PostgreSQL, whose
    writers lock rows, not the database)."""

    def __init__(self, settings: EngineSettings, database: str | None) -> None:
        super().__init__(settings)
        self.database = database
        self.others_could_write: list[bool] = []

    def nodes_telemetry(self, session: Session, targets: Sequence[TelemetryTarget], now: dt.datetime
                        ) -> list[NodeTelemetry]:
        if self.database is not None:
            other = sqlite3.connect(self.database, timeout=0)
            try:
                other.execute("BEGIN IMMEDIATE")
                other.execute("ROLLBACK")
                self.others_could_write.append(True)
            except sqlite3.OperationalError:  # "database is locked": the sampler held the write lock
                self.others_could_write.append(False)
            finally:
                other.close()
        return super().nodes_telemetry(session, targets, now)


def test_node_metrics_sampler_holds_no_write_lock_while_the_nodes_answer(
    admin: TestClient, sessions: sessionmaker[Session], settings: Settings, clock: ManualClock
) -> None:
    create(admin, node_count=2)
    engine = EngineSettings(**FAST)
    url = make_url(settings.resolved_database_url)
    probe = _WriterProbe(engine, url.database if url.get_backend_name() == "sqlite" else None)
    worker = EngineWorker(sessions, engine, driver=probe, clock=clock)
    drain(worker)
    assert worker.collect_metrics() == 2
    assert probe.others_could_write == ([True] if probe.database is not None else [])
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(NodeMetricChunk))
