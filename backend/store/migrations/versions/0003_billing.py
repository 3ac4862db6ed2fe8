"""Billing tables: usage records, credit ledger, reservations, invoices, accounts, volume meters, holds.

Revision ID: 0003_billing
Revises: 0002_engine
"""

import sqlalchemy as sa
from alembic import op

revision = "0003_billing"
down_revision = "0002_engine"
branch_labels = None
depends_on = None

SERIAL = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _project_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["project_id"], ["projects.id"], name=op.f(f"fk_{table}_project_id_projects"), ondelete="CASCADE"
    )


def _when(name: str, nullable: bool = False) -> sa.Column:  # type: ignore[type-arg]
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "billing_usage_records",
        sa.Column("id", SERIAL, autoincrement=True, nullable=False),
        sa.Column("idempotency_key", sa.String(length=200), nullable=False),
        sa.Column("project_id", sa.String(length=30), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("resource_type", sa.String(length=16), nullable=False),
        sa.Column("resource_id", sa.String(length=64), nullable=False),
        sa.Column("cluster_id", sa.String(length=64), nullable=True),
        sa.Column("region", sa.String(length=64), nullable=False),
        sa.Column("instance_type", sa.String(length=64), nullable=True),
        _when("period_start"),
        _when("period_end"),
        sa.Column("seconds", sa.BigInteger(), nullable=False),
        sa.Column("units", sa.Numeric(18, 6), nullable=False),
        sa.Column("unit_price_usd", sa.Numeric(18, 6), nullable=False),
        sa.Column("amount_micros", sa.BigInteger(), nullable=False),
        _when("recorded_at"),
        _project_fk("billing_usage_records"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_billing_usage_records")),
        sa.UniqueConstraint("idempotency_key", name=op.f("uq_billing_usage_records_idempotency_key")),
    )
    op.create_index(
        "ix_billing_usage_records_project_period", "billing_usage_records", ["project_id", "period_start"]
    )
    op.create_index("ix_billing_usage_records_cluster", "billing_usage_records", ["cluster_id"])

    op.create_table(
        "billing_ledger_entries",
        sa.Column("id", SERIAL, autoincrement=True, nullable=False),
        sa.Column("idempotency_key", sa.String(length=200), nullable=False),
        sa.Column("project_id", sa.String(length=30), nullable=False),
        sa.Column("entry_type", sa.String(length=16), nullable=False),
        sa.Column("amount_micros", sa.BigInteger(), nullable=False),
        sa.Column("usage_record_id", SERIAL, nullable=True),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("actor", sa.String(length=64), nullable=False),
        _when("created_at"),
        _project_fk("billing_ledger_entries"),
        sa.ForeignKeyConstraint(
            ["usage_record_id"],
            ["billing_usage_records.id"],
            name=op.f("fk_billing_ledger_entries_usage_record_id_billing_usage_records"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_billing_ledger_entries")),
        sa.UniqueConstraint("idempotency_key", name=op.f("uq_billing_ledger_entries_idempotency_key")),
    )
    op.create_index("ix_billing_ledger_entries_project", "billing_ledger_entries", ["project_id", "id"])

    op.create_table(
        "billing_reservations",
        sa.Column("cluster_id", sa.String(length=64), nullable=False),
        sa.Column("project_id", sa.String(length=30), nullable=False),
        sa.Column("region", sa.String(length=64), nullable=False),
        sa.Column("instance_type", sa.String(length=64), nullable=False),
        sa.Column("node_count", sa.Integer(), nullable=False),
        sa.Column("gpus_per_node", sa.Integer(), nullable=False),
        sa.Column("duration_days", sa.Integer(), nullable=False),
        sa.Column("on_expiry", sa.String(length=32), nullable=False),
        _when("term_start"),
        _when("term_end"),
        _when("covered_until"),
        sa.Column("discount", sa.Numeric(8, 6), nullable=False),
        sa.Column("gpu_hour_usd", sa.Numeric(18, 6), nullable=False),
        sa.Column("upfront_micros", sa.BigInteger(), nullable=False),
        sa.Column("usage_key", sa.String(length=200), nullable=False),
        _when("expired_at", nullable=True),
        _when("created_at"),
        _project_fk("billing_reservations"),
        sa.PrimaryKeyConstraint("cluster_id", name=op.f("pk_billing_reservations")),
    )

    op.create_table(
        "billing_invoices",
        sa.Column("id", SERIAL, autoincrement=True, nullable=False),
        sa.Column("project_id", sa.String(length=30), nullable=False),
        sa.Column("period", sa.String(length=7), nullable=False),
        sa.Column("compute_on_demand_micros", sa.BigInteger(), nullable=False),
        sa.Column("reserved_micros", sa.BigInteger(), nullable=False),
        sa.Column("storage_micros", sa.BigInteger(), nullable=False),
        sa.Column("total_micros", sa.BigInteger(), nullable=False),
        sa.Column("line_count", sa.Integer(), nullable=False),
        _when("issued_at"),
        _project_fk("billing_invoices"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_billing_invoices")),
    )
    op.create_index(
        "uq_billing_invoices_project_period", "billing_invoices", ["project_id", "period"], unique=True
    )

    op.create_table(
        "billing_accounts",
        sa.Column("project_id", sa.String(length=30), nullable=False),
        sa.Column("prepaid", sa.Boolean(), nullable=False),
        _when("exhausted_since", nullable=True),
        _when("updated_at"),
        _project_fk("billing_accounts"),
        sa.PrimaryKeyConstraint("project_id", name=op.f("pk_billing_accounts")),
    )

    op.create_table(
        "billing_volume_segments",
        sa.Column("id", SERIAL, autoincrement=True, nullable=False),
        sa.Column("volume_id", sa.String(length=64), nullable=False),
        sa.Column("project_id", sa.String(length=30), nullable=False),
        sa.Column("region", sa.String(length=64), nullable=False),
        sa.Column("size_tib", sa.Numeric(18, 6), nullable=False),
        _when("started_at"),
        _when("ended_at", nullable=True),
        _project_fk("billing_volume_segments"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_billing_volume_segments")),
    )
    op.create_index(op.f("ix_billing_volume_segments_volume_id"), "billing_volume_segments", ["volume_id"])
    op.create_index(
        "uq_billing_volume_segments_volume_start",
        "billing_volume_segments",
        ["volume_id", "started_at"],
        unique=True,
    )

    op.create_table(
        "billing_credit_holds",
        sa.Column("id", SERIAL, autoincrement=True, nullable=False),
        sa.Column("cluster_id", sa.String(length=64), nullable=False),
        sa.Column("project_id", sa.String(length=30), nullable=False),
        _when("paused_at"),
        _when("decommissioned_at", nullable=True),
        _when("released_at", nullable=True),
        _project_fk("billing_credit_holds"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_billing_credit_holds")),
    )
    op.create_index(op.f("ix_billing_credit_holds_cluster_id"), "billing_credit_holds", ["cluster_id"])

    op.create_table(
        "billing_settled_clusters",
        sa.Column("cluster_id", sa.String(length=64), nullable=False),
        sa.Column("project_id", sa.String(length=30), nullable=False),
        _when("settled_at"),
        _project_fk("billing_settled_clusters"),
        sa.PrimaryKeyConstraint("cluster_id", name=op.f("pk_billing_settled_clusters")),
    )


def downgrade() -> None:
    for table in (
        "billing_settled_clusters",
        "billing_credit_holds",
        "billing_volume_segments",
        "billing_accounts",
        "billing_invoices",
        "billing_reservations",
        "billing_ledger_entries",
        "billing_usage_records",
    ):
        op.drop_table(table)
