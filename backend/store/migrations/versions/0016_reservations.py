"""Capacity reservations apart from clusters: `capacity_reservations` (instance type, region and fabric
pool, node count, term, price fixed at booking, when it was charged) and `clusters.reservation_id`, the
reservation a cluster draws its nodes from.

Revision ID: 0016_reservations
Revises: 0012_allocation_counters
"""

import sqlalchemy as sa
from alembic import op

revision = "0016_reservations"
down_revision = "0015_quotas"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "capacity_reservations",
        sa.Column("id", sa.String(30), nullable=False),
        sa.Column("project_id", sa.String(30), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("region", sa.String(64), nullable=False),
        sa.Column("instance_type", sa.String(64), nullable=False),
        sa.Column("pool", sa.String(160), nullable=False),
        sa.Column("node_count", sa.Integer(), nullable=False),
        sa.Column("gpus_per_node", sa.Integer(), nullable=False),
        sa.Column("duration_days", sa.Integer(), nullable=False),
        sa.Column("starts_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ends_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("discount", sa.Numeric(8, 6), nullable=False),
        sa.Column("gpu_hour_usd", sa.Numeric(18, 6), nullable=False),
        sa.Column("upfront_micros", sa.BigInteger(), nullable=False),
        sa.Column("charged_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"], ["projects.id"], name=op.f("fk_capacity_reservations_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_capacity_reservations")),
    )
    op.create_index("ix_capacity_reservations_pool_ends", "capacity_reservations", ["pool", "ends_at"])
    op.create_index("ix_capacity_reservations_project_id", "capacity_reservations", ["project_id", "id"])
    op.add_column("clusters", sa.Column("reservation_id", sa.String(30), nullable=True))
    op.create_index(op.f("ix_clusters_reservation_id"), "clusters", ["reservation_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_clusters_reservation_id"), table_name="clusters")
    op.drop_column("clusters", "reservation_id")
    op.drop_index("ix_capacity_reservations_project_id", table_name="capacity_reservations")
    op.drop_index("ix_capacity_reservations_pool_ends", table_name="capacity_reservations")
    op.drop_table("capacity_reservations")
