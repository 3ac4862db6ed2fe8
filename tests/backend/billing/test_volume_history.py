"""Storage is metered from the append-only volume history: short-lived volumes are charged exactly, a
rename never re-dates a resize, and the migration keeps every volume billed as before."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from alembic import command
from sqlalchemy import column, create_engine, func, select, table
from sqlalchemy.orm import Session
from sqlalchemy.types import DateTime, Integer, Numeric, String

from backend.billing.money import prorate_micros
from backend.billing.pricing_catalog import default_price_book
from backend.billing.service import run_metering
from backend.billing.settings import BillingSettings
from backend.domain.catalog import default_catalog
from backend.domain.clock import ManualClock
from backend.domain.ids import new_id
from backend.services import volumes
from backend.settings import Settings
from backend.store.billing_models import UsageRecord
from backend.store.db import make_engine, make_session_factory
from backend.store.migrate import alembic_config
from backend.store.models import AuditEvent
from tests.backend.billing.conftest import BillingWorld, at

TIB_HOUR = Decimal("0.1122")


def storage_micros(world: BillingWorld, volume_id: str) -> int:
    return sum(r.amount_micros for r in world.records_of(volume_id))


def test_storage_meter_charges_volumes_living_between_two_passes_exactly(world: BillingWorld) -> None:
    project = world.project()
    moment = at("10:00:00")
    brief = long = ""
    while moment <= at("10:03:00"):  # a pass every 15 s, as a busy deployment would run it
        if moment == at("10:00:00"):
            world.run(moment)
        if moment == at("10:00:15"):
            brief = world.volume(project, region="us-east-1", size_tib=7, created=at("10:00:02"))
            world.delete_volume(brief, at("10:00:07"))  # lived 5 s, between the passes at :00 and :15
        if moment == at("10:00:30"):
            long = world.volume(project, region="us-east-1", size_tib=3, created=at("10:00:20"))
        if moment == at("10:01:00"):
            world.delete_volume(long, at("10:00:51"))  # lived 31 s
        world.run(moment)
        moment += timedelta(seconds=15)
    assert [r.seconds for r in world.records_of(brief)] == [5]
    assert [r.seconds for r in world.records_of(long)] == [31]
    assert storage_micros(world, brief) == prorate_micros(TIB_HOUR, 7, 5) == 1091
    assert storage_micros(world, long) == prorate_micros(TIB_HOUR, 3, 31) == 2899


def test_storage_meter_charges_a_volume_created_and_deleted_during_a_billing_outage(
    world: BillingWorld,
) -> None:
    project = world.project()
    world.run(at("10:00:00"))
    volume = world.volume(project, region="eu-north-1", size_tib=10, created=at("10:10:00"))
    world.resize_volume(volume, 12, at("11:30:00"))
    world.delete_volume(volume, at("12:45:00"))
    world.run(at("15:00:00"))  # the job was down for five hours
    assert [r.seconds for r in world.records_of(volume)] == [3000, 1800, 1800, 2700]
    assert world.charged(project, kind="storage") == TIB_HOUR * (10 * Decimal(80) + 12 * Decimal(75)) / 60


def test_volume_rename_does_not_redate_its_resize(
    world: BillingWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = world.project()
    now = [at("10:00:00")]
    monkeypatch.setattr("backend.services.volumes.utcnow", lambda: now[0])
    monkeypatch.setattr("backend.store.repository.utcnow", lambda: now[0])
    with world.sessions.begin() as session:
        volume_id = volumes.create_volume(
            session=session, catalog=default_catalog(), project_id=project, name="data", region="us-east-1",
            size_tib=1,
        ).id
    world.run(at("10:05:00"))
    now[0] = at("10:30:00")
    change(world, project, volume_id, size_tib=4)
    now[0] = at("11:15:00")
    change(world, project, volume_id, name="renamed")  # touches updated_at, costs nothing
    world.run(at("13:01:00"))
    now[0] = at("13:20:00")
    with world.sessions.begin() as session:
        volumes.delete_volume(session=session, project_id=project, volume_id=volume_id, if_match=None)
    world.run(at("14:01:00"))
    # 1 TiB 10:00-10:30, then 4 TiB 10:30-13:20.
    expected = TIB_HOUR * (Decimal("0.5") + 4 * (Decimal(170) / 60))
    assert world.charged(project, kind="storage") == expected.quantize(Decimal("0.000001"))
    assert [(r.period_start.minute, r.units) for r in world.records_of(volume_id)][:2] == [
        (0, Decimal(1)),
        (30, Decimal(4)),
    ]


def change(world: BillingWorld, project: str, volume_id: str, **fields: object) -> None:
    with world.sessions.begin() as session:
        volumes.update_volume(
            session=session,
            project_id=project,
            volume_id=volume_id,
            name=fields.get("name"),  # type: ignore[arg-type]
            size_tib=fields.get("size_tib"),  # type: ignore[arg-type]
            if_match=None,
        )


# --- the migration from 0003_billing, with data ---------------------------------------------------------


OLD_VOLUMES = table(
    "volumes",
    *(column(name, String) for name in ("id", "project_id", "name", "region", "status")),
    column("size_tib", Integer),
    column("generation", Integer),
    column("created_at", DateTime(timezone=True)),
    column("updated_at", DateTime(timezone=True)),
)
# The 0003 columns of projects and usage lines (0022 adds billing_mode and labels; the ORM would insert them).
OLD_PROJECTS = table(
    "projects", column("id", String), column("name", String), column("created_at", DateTime(timezone=True))
)
OLD_USAGE = table(
    "billing_usage_records",
    *(column(name, String) for name in ("idempotency_key", "project_id", "kind", "resource_type",
                                        "resource_id", "region")),
    *(column(name, DateTime(timezone=True)) for name in ("period_start", "period_end", "recorded_at")),
    column("seconds", Integer),
    column("units", Numeric(18, 6)),
    column("unit_price_usd", Numeric(18, 6)),
    column("amount_micros", Integer),
)
OLD_SEGMENTS = table(
    "billing_volume_segments",
    column("volume_id", String),
    column("project_id", String),
    column("region", String),
    column("size_tib", Numeric(18, 6)),
    column("started_at", DateTime(timezone=True)),
    column("ended_at", DateTime(timezone=True)),
)


def migrate(url: str, revision: str, *, down: bool = False) -> None:
    engine = create_engine(url)
    config = alembic_config(engine)
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        (command.downgrade if down else command.upgrade)(config, revision)
    engine.dispose()


def test_volume_history_migration_keeps_existing_volumes_billed_with_their_keys(
    empty_database_url: str,
) -> None:
    url = empty_database_url
    migrate(url, "0003_billing")
    engine = make_engine(Settings(database_url=url))
    sessions = make_session_factory(engine, write=True)
    project = new_id("project")
    ids = {name: new_id("volume") for name in "ABCDE"}

    def volume(session: Session, name: str, size: int, created: datetime, updated: datetime) -> None:
        # The 0003 columns only (later revisions add some; the ORM model would insert them too).
        session.execute(OLD_VOLUMES.insert().values(
            id=ids[name], project_id=project, name=name, region="us-east-1", size_tib=size,
            status="available", generation=1, created_at=created, updated_at=updated,
        ))

    def segment(name: str, size: int, start: datetime, end: datetime | None = None) -> dict[str, object]:
        return {"volume_id": ids[name], "project_id": project, "region": "us-east-1", "size_tib": size,
                "started_at": start, "ended_at": end}

    with sessions.begin() as session:  # what the old metering job had recorded by 12:30
        session.execute(OLD_PROJECTS.insert().values(id=project, name="acme", created_at=at("08:00:00")))
        volume(session, "A", 6, at("09:00:00"), at("11:30:00"))  # resized 4 -> 6 at 11:30, seen
        volume(session, "C", 1, at("12:00:00"), at("12:00:00"))  # created, not seen yet
        volume(session, "D", 5, at("09:00:00"), at("12:00:00"))  # resized 3 -> 5 at 12:00, not seen yet
        session.add(AuditEvent(id=new_id("audit_event"), project_id=project, occurred_at=at("11:00:00"),
                               actor="gpc_x", action="volume.delete", resource_type="volume",
                               resource_id=ids["B"], request_id=None, details={}))  # B deleted, not seen yet
        session.execute(OLD_SEGMENTS.insert(), [
            segment("A", 4, at("09:00:00"), at("11:30:00")), segment("A", 6, at("11:30:00")),
            segment("B", 2, at("10:00:00")),
            segment("D", 3, at("09:00:00")),
            segment("E", 1, at("09:00:00"), at("10:00:00")),  # deleted at 10:00, seen
        ])
        session.execute(OLD_USAGE.insert().values(  # the first hour of A, charged before the upgrade
            idempotency_key=f"storage:{ids['A']}:20260302T090000Z:20260302T090000Z", project_id=project,
            kind="storage", resource_type="volume", resource_id=ids["A"], region="us-east-1",
            period_start=at("09:00:00"), period_end=at("10:00:00"), seconds=3600, units=Decimal(4),
            unit_price_usd=TIB_HOUR, amount_micros=448_800, recorded_at=at("10:01:00"),
        ))
    engine.dispose()

    migrate(url, "head")
    engine = make_engine(Settings(database_url=url))
    sessions = make_session_factory(engine, write=True)
    run_metering(sessions=sessions, clock=ManualClock(at("16:01:00")), settings=BillingSettings(),
                 prices=default_price_book())
    with sessions() as session:
        rows = session.scalars(select(UsageRecord).where(UsageRecord.project_id == project)).all()
        tib_hours = {name: sum(r.units * r.seconds for r in rows if r.resource_id == ids[name]) / 3600
                     for name in ids}
        first_hour_of_a = [r for r in rows if r.resource_id == ids["A"] and r.period_start.hour == 9]
    engine.dispose()
    assert len(first_hour_of_a) == 1  # charged once, under the key it had
    assert tib_hours == {
        "A": 4 * Decimal("2.5") + 6 * Decimal("4.5"),
        "B": 2 * Decimal(1),
        "C": 1 * Decimal(4),
        "D": 3 * Decimal(3) + 5 * Decimal(4),
        "E": 1 * Decimal(1),
    }

    migrate(url, "0003_billing", down=True)  # and back: the segments the history implies
    engine = create_engine(url)
    with engine.connect() as connection:
        count = connection.scalar(select(func.count()).select_from(OLD_SEGMENTS))
    engine.dispose()
    assert count == 7  # A: 2, B: 1, C: 1, D: 2, E: 1
