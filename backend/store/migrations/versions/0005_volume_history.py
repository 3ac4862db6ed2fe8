"""Volume history: storage is metered from append-only volume events instead of the segments the
metering job kept from what it saw (which missed volumes living between two passes).

The history is seeded from what the old job knew, replayed once more the way it would have: its
segments (their starts are in the charged keys, so every charged slice keeps its key), then the
volumes it had not seen yet, resizes it had not seen yet (dated by `updated_at`, as it did) and
deletions it had not seen yet (dated by the `volume.delete` audit event).

Revision ID: 0005_volume_history
Revises: 0004_address_plan
"""

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0005_volume_history"
down_revision = "0004_address_plan"
branch_labels = None
depends_on = None

SERIAL = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
SEGMENTS = "billing_volume_segments"


def _utc(moment: datetime) -> datetime:
    moment = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).replace(microsecond=0)


def _project_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["project_id"], ["projects.id"], name=op.f(f"fk_{table}_project_id_projects"), ondelete="CASCADE"
    )


def _events_table() -> sa.TableClause:
    return sa.table(
        "volume_events",
        sa.column("volume_id", sa.String),
        sa.column("project_id", sa.String),
        sa.column("region", sa.String),
        sa.column("event", sa.String),
        sa.column("size_tib", sa.Numeric(18, 6)),
        sa.column("at", sa.DateTime(timezone=True)),
    )


def _segments_table() -> sa.TableClause:
    return sa.table(
        SEGMENTS,
        sa.column("volume_id", sa.String),
        sa.column("project_id", sa.String),
        sa.column("region", sa.String),
        sa.column("size_tib", sa.Numeric(18, 6)),
        sa.column("started_at", sa.DateTime(timezone=True)),
        sa.column("ended_at", sa.DateTime(timezone=True)),
    )


def _seed_events(bind: sa.Connection) -> list[dict[str, Any]]:
    """The history the old job's segments and the live volume rows imply."""
    now = datetime.now(UTC).replace(microsecond=0)
    when = sa.DateTime(timezone=True)
    volume_table = sa.table(
        "volumes",
        *(sa.column(name, sa.String) for name in ("id", "project_id", "region")),
        sa.column("size_tib", sa.Integer),
        sa.column("created_at", when),
        sa.column("updated_at", when),
    )
    audit = sa.table(
        "audit_events",
        sa.column("resource_id", sa.String),
        sa.column("action", sa.String),
        sa.column("occurred_at", when),
    )
    volumes = {row.id: row for row in bind.execute(sa.select(volume_table))}
    deleted_at = {
        row.resource_id: _utc(row.occurred_at)
        for row in bind.execute(
            sa.select(audit.c.resource_id, audit.c.occurred_at)
            .where(audit.c.action == "volume.delete")
            .order_by(audit.c.occurred_at)
        )
    }
    segment_table = _segments_table()
    segments: dict[str, list[Any]] = {}
    rows = bind.execute(
        sa.select(segment_table).order_by(segment_table.c.volume_id, segment_table.c.started_at)
    )
    for row in rows:
        segments.setdefault(row.volume_id, []).append(row)
    events: list[dict[str, Any]] = []

    def add(source: Any, event: str, size: Any, at: datetime) -> None:
        events.append(
            {
                "volume_id": source.volume_id if hasattr(source, "volume_id") else source.id,
                "project_id": source.project_id,
                "region": source.region,
                "event": event,
                "size_tib": Decimal(size),
                "at": at,
            }
        )

    for volume_id, history in segments.items():
        for index, segment in enumerate(history):
            add(segment, "created" if index == 0 else "resized", segment.size_tib, _utc(segment.started_at))
        last = history[-1]
        start = _utc(last.started_at)
        live = volumes.get(volume_id)
        if last.ended_at is not None:
            add(last, "deleted", last.size_tib, _utc(last.ended_at))
        elif live is None:
            add(last, "deleted", last.size_tib, max(start, deleted_at.get(volume_id, now)))
        elif Decimal(live.size_tib) != Decimal(last.size_tib):
            add(last, "resized", live.size_tib, max(start, _utc(live.updated_at)))
    for volume_id, live in volumes.items():
        if volume_id not in segments:
            add(live, "created", live.size_tib, _utc(live.created_at))
    return events


def upgrade() -> None:
    op.create_table(
        "volume_events",
        sa.Column("id", SERIAL, autoincrement=True, nullable=False),
        sa.Column("volume_id", sa.String(length=64), nullable=False),
        sa.Column("project_id", sa.String(length=30), nullable=False),
        sa.Column("region", sa.String(length=64), nullable=False),
        sa.Column("event", sa.String(length=16), nullable=False),
        sa.Column("size_tib", sa.Numeric(18, 6), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        _project_fk("volume_events"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_volume_events")),
    )
    op.create_index(op.f("ix_volume_events_volume_id"), "volume_events", ["volume_id"])
    op.create_index("ix_volume_events_project_at", "volume_events", ["project_id", "at"])
    events = _seed_events(op.get_bind())
    if events:
        op.bulk_insert(_events_table(), events)
    op.drop_table(SEGMENTS)


def downgrade() -> None:
    op.create_table(
        SEGMENTS,
        sa.Column("id", SERIAL, autoincrement=True, nullable=False),
        sa.Column("volume_id", sa.String(length=64), nullable=False),
        sa.Column("project_id", sa.String(length=30), nullable=False),
        sa.Column("region", sa.String(length=64), nullable=False),
        sa.Column("size_tib", sa.Numeric(18, 6), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        _project_fk(SEGMENTS),
        sa.PrimaryKeyConstraint("id", name=op.f(f"pk_{SEGMENTS}")),
    )
    op.create_index(op.f(f"ix_{SEGMENTS}_volume_id"), SEGMENTS, ["volume_id"])
    op.create_index(f"uq_{SEGMENTS}_volume_start", SEGMENTS, ["volume_id", "started_at"], unique=True)
    # Back to segments: one per size the history records, the last one open while the volume lives.
    segments: list[dict[str, Any]] = []
    open_by_volume: dict[str, dict[str, Any]] = {}
    bind = op.get_bind()
    events = sa.table(
        "volume_events",
        *(sa.column(n, sa.String) for n in ("volume_id", "project_id", "region", "event")),
        sa.column("size_tib", sa.Numeric(18, 6)),
        sa.column("at", sa.DateTime(timezone=True)),
        sa.column("id", sa.Integer),
    )
    for row in bind.execute(sa.select(events).order_by(events.c.at, events.c.id)):
        at = _utc(row.at)
        current = open_by_volume.get(row.volume_id)
        if row.event == "created" and current is None:
            current = {
                "volume_id": row.volume_id,
                "project_id": row.project_id,
                "region": row.region,
                "size_tib": row.size_tib,
                "started_at": at,
                "ended_at": None,
            }
            open_by_volume[row.volume_id] = current
            segments.append(current)
        elif row.event == "resized" and current is not None and row.size_tib != current["size_tib"]:
            if at <= current["started_at"]:
                current["size_tib"] = row.size_tib
            else:
                current["ended_at"] = at
                current = {**current, "size_tib": row.size_tib, "started_at": at, "ended_at": None}
                open_by_volume[row.volume_id] = current
                segments.append(current)
        elif row.event == "deleted" and current is not None:
            current["ended_at"] = max(current["started_at"], at)
            del open_by_volume[row.volume_id]
    if segments:
        op.bulk_insert(_segments_table(), segments)
    op.drop_table("volume_events")
