"""A billing world on a real migrated database: projects, clusters, node histories and volumes written
with chosen timestamps, a ManualClock, and the metering job run on demand."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

import pytest
from sqlalchemy import create_engine, func, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from backend.billing.estimate import reserved_upfront_micros
from backend.billing.ledger import balance_micros, grant_credits
from backend.billing.pricing_catalog import default_price_book
from backend.billing.service import MeteringResult, run_metering
from backend.billing.settings import BillingSettings
from backend.billing.volume_history import CREATED, DELETED, RESIZED, record_volume_event
from backend.domain.clock import ManualClock
from backend.domain.ids import new_id
from backend.settings import Settings
from backend.store.billing_models import CapacityReservation, UsageRecord
from backend.store.db import make_engine, make_session_factory
from backend.store.engine_models import EngineNode, NodeTransition
from backend.store.models import AuditEvent, Cluster, Project, ReservedIp, Volume
from backend.store.reserved_ip_history import RELEASED, RESERVED, record_reserved_ip_event
from tests.backend.conftest import _postgres_admin_url

Labelled = TypeVar("Labelled", Cluster, Volume, ReservedIp, CapacityReservation)
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def at(hhmmss: str, day: int = 2, month: int = 3) -> datetime:
    h, m, s = (int(x) for x in hhmmss.split(":"))
    return datetime(2026, month, day, h, m, s, tzinfo=UTC)


class BillingWorld:
    def __init__(self, sessions: sessionmaker[Session], settings: BillingSettings) -> None:
        self.sessions = sessions
        self.settings = settings
        self.clock = ManualClock(T0)
        self.prices = default_price_book()
        self._names = itertools.count()

    # --- the metering job -------------------------------------------------------------------------------
    def run(self, moment: datetime | None = None) -> MeteringResult:
        if moment is not None:
            self.clock.set(moment)
        return run_metering(
            sessions=self.sessions, clock=self.clock, settings=self.settings, prices=self.prices
        )

    # --- core rows --------------------------------------------------------------------------------------
    def project(self, name: str = "acme", billing_mode: str = "postpaid") -> str:
        """A project, postpaid unless `billing_mode` says prepaid (an operator's choice, never a grant's)."""
        with self.sessions.begin() as session:
            project = Project(id=new_id("project"), name=name, billing_mode=billing_mode, created_at=T0)
            session.add(project)
        return project.id

    def grant(self, project_id: str, usd: str, key: str = "k1", moment: datetime | None = None) -> None:
        with self.sessions.begin() as session:
            grant_credits(session, project_id=project_id, amount_micros=int(Decimal(usd) * 1_000_000),
                          idempotency_key=key, actor="test", description="test grant",
                          now=moment or self.clock.now())

    def cluster(self, project_id: str, *, instance_type: str, region: str, node_count: int,
                billing_type: str = "on_demand", duration_days: int | None = None,
                on_expiry: str | None = None, deletion_protection: bool = False,
                labels: dict[str, str] | None = None, reservation_id: str | None = None) -> str:
        with self.sessions.begin() as session:
            cluster = Cluster(
                id=new_id("cluster"), project_id=project_id, name=f"c{next(self._names)}", region=region,
                instance_type=instance_type, node_count=node_count, orchestrator="slurm",
                interconnect="infiniband", container=None, billing_type=billing_type,
                billing_duration_days=duration_days, billing_on_expiry=on_expiry, labels=labels or {},
                reservation_id=reservation_id,
                deletion_protection=deletion_protection, status="PENDING", generation=1, created_at=T0,
                updated_at=T0,
            )
            session.add(cluster)
        return cluster.id

    def set_node_count(self, cluster_id: str, node_count: int) -> None:
        with self.sessions.begin() as session:
            cluster = session.get(Cluster, cluster_id)
            assert cluster is not None
            cluster.node_count = node_count

    def transition(self, cluster_id: str, node: str, status: str, moment: datetime,
                   capacity_type: str = "on_demand") -> None:
        """Record a node status change the way the engine does (creating the node on first use, on
        `capacity_type` capacity)."""
        with self.sessions.begin() as session:
            cluster = session.get(Cluster, cluster_id)
            assert cluster is not None
            node_id = f"nod_{cluster_id[-12:]}_{node}"
            row = session.get(EngineNode, node_id)
            gpus = self.prices.gpus_per_node(cluster.instance_type)
            if row is None:
                row = EngineNode(
                    id=node_id, cluster_id=cluster_id, name=node, active_name=node, index=0, batch=1,
                    region=cluster.region, fabric="f", instance_type=cluster.instance_type, gpu_count=gpus,
                    slot=0, scalable_unit=0, private_ip="10.0.0.1", status="PENDING", stage="queued",
                    applied_config={}, capacity_type=capacity_type, created_at=moment, updated_at=moment,
                )
                session.add(row)
                session.flush()
            session.add(NodeTransition(
                node_id=node_id, cluster_id=cluster_id, project_id=cluster.project_id, node_name=node,
                instance_type=cluster.instance_type, region=cluster.region, gpu_count=gpus,
                capacity_type=row.capacity_type, from_status=row.status, to_status=status, at=moment,
            ))
            row.status = status

    def nodes(self, cluster_id: str, names: list[str], status: str, moment: datetime,
              capacity_type: str = "on_demand") -> None:
        for name in names:
            self.transition(cluster_id, name, status, moment, capacity_type)

    def volume(self, project_id: str, *, region: str, size_tib: int, created: datetime,
               labels: dict[str, str] | None = None) -> str:
        """Create a volume as the volume service does: the row and its `created` history event."""
        with self.sessions.begin() as session:
            volume = Volume(id=new_id("volume"), project_id=project_id, name=f"v{next(self._names)}",
                            region=region, size_tib=size_tib, status="available", generation=1,
                            created_at=created, updated_at=created, labels=labels or {})
            session.add(volume)
            session.flush()
            record_volume_event(session, volume=volume, event=CREATED, at=created)
        return volume.id

    def resize_volume(self, volume_id: str, size_tib: int, moment: datetime) -> None:
        with self.sessions.begin() as session:
            volume = session.get(Volume, volume_id)
            assert volume is not None
            volume.size_tib, volume.updated_at = size_tib, moment
            record_volume_event(session, volume=volume, event=RESIZED, at=moment)

    def delete_volume(self, volume_id: str, moment: datetime) -> None:
        """Delete the volume as the volume service does: the row goes, the history says when."""
        with self.sessions.begin() as session:
            volume = session.get(Volume, volume_id)
            assert volume is not None
            record_volume_event(session, volume=volume, event=DELETED, at=moment)
            session.delete(volume)

    def reserved_ip(self, project_id: str, *, region: str, moment: datetime,
                    labels: dict[str, str] | None = None) -> str:
        """Reserve an address as the reserved IP service does: the row and its `reserved` event."""
        with self.sessions.begin() as session:
            row = ReservedIp(id=new_id("reserved_ip"), project_id=project_id, name=f"ip{next(self._names)}",
                             region=region, address=f"198.18.0.{next(self._names) % 250 + 1}",
                             labels=labels or {}, generation=1, created_at=moment, updated_at=moment)
            session.add(row)
            session.flush()
            record_reserved_ip_event(session, reserved_ip=row, event=RESERVED, at=moment)
        return row.id

    def reserved_ip_event(self, ip_id: str, event: str, moment: datetime,
                          cluster_id: str | None = None) -> None:
        """Attach, detach or release (the row goes) an address as the service and the engine do."""
        with self.sessions.begin() as session:
            row = session.get(ReservedIp, ip_id)
            assert row is not None
            record_reserved_ip_event(session, reserved_ip=row, event=event, at=moment, cluster_id=cluster_id)
            if event == RELEASED:
                session.delete(row)

    def capacity_reservation(self, project_id: str, *, instance_type: str, region: str, node_count: int,
                             duration_days: int, starts_at: datetime,
                             labels: dict[str, str] | None = None) -> str:
        """Book a capacity reservation priced as the reservation service prices it (charged when the
        metering job first runs after `starts_at`)."""
        rate = self.prices.reserved_gpu_hour(instance_type, region, duration_days)
        gpus = self.prices.gpus_per_node(instance_type)
        with self.sessions.begin() as session:
            row = CapacityReservation(
                id=new_id("reservation"), project_id=project_id, name=f"r{next(self._names)}", region=region,
                instance_type=instance_type, pool=f"{region}/f/{instance_type}", node_count=node_count,
                gpus_per_node=gpus, duration_days=duration_days, starts_at=starts_at,
                ends_at=starts_at + timedelta(days=duration_days),
                discount=self.prices.reserved_discount(instance_type, duration_days), gpu_hour_usd=rate,
                upfront_micros=reserved_upfront_micros(reserved_rate=rate, gpus=gpus * node_count,
                                                       duration_days=duration_days),
                labels=labels or {}, created_at=starts_at,
            )
            session.add(row)
        return row.id

    def relabel(self, model: type[Labelled], row_id: str, labels: dict[str, str]) -> None:
        with self.sessions.begin() as session:
            row = session.get(model, row_id)
            assert row is not None
            row.labels = labels

    # --- reading back -----------------------------------------------------------------------------------
    def balance(self, project_id: str) -> Decimal:
        with self.sessions() as session:
            return Decimal(balance_micros(session, project_id)) / 1_000_000

    def charged(self, project_id: str, **filters: Any) -> Decimal:
        with self.sessions() as session:
            query = select(func.coalesce(func.sum(UsageRecord.amount_micros), 0)).where(
                UsageRecord.project_id == project_id
            )
            for name, value in filters.items():
                query = query.where(getattr(UsageRecord, name) == value)
            return Decimal(int(session.scalar(query) or 0)) / 1_000_000

    def records(self, project_id: str) -> list[UsageRecord]:
        with self.sessions() as session:
            return list(session.scalars(select(UsageRecord).where(UsageRecord.project_id == project_id)
                                        .order_by(UsageRecord.id)))

    def records_of(self, resource_id: str) -> list[UsageRecord]:
        with self.sessions() as session:
            return list(session.scalars(select(UsageRecord).where(UsageRecord.resource_id == resource_id)
                                        .order_by(UsageRecord.period_start)))

    def audit_actions(self, project_id: str) -> list[str]:
        with self.sessions() as session:
            return list(session.scalars(select(AuditEvent.action).where(AuditEvent.project_id == project_id)
                                        .order_by(AuditEvent.occurred_at, AuditEvent.id)))

    def get_cluster(self, cluster_id: str) -> Cluster:
        with self.sessions() as session:
            cluster = session.get(Cluster, cluster_id)
            assert cluster is not None
            return cluster


@pytest.fixture
def world(database_url: str) -> Iterator[BillingWorld]:
    engine = make_engine(Settings(database_url=database_url))
    settings = BillingSettings(settle_seconds=60, decommission_after_hours=6, attach_refused_after_hours=2,
                               volume_data_kept_days=7, expiry_grace_minutes=15)
    yield BillingWorld(make_session_factory(engine, write=True), settings)
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database with no tables yet (SQLite and PostgreSQL in turn)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'old.db'}"
        return
    admin_url = make_url(_postgres_admin_url())
    name = f"gpucloud_migration_{uuid.uuid4().hex[:12]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    yield admin_url.set(database=name).render_as_string(hide_password=False)
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()
