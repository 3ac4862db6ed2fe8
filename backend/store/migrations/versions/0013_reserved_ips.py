"""Reserved public IPs: `reserved_ips` (an address the project holds until it releases it), the cluster
whose login node answers on one (`clusters.reserved_ip_id`, unique: an address is never on two
clusters), the history billing meters reserved and attached hours from (`reserved_ip_events`) and their
line on invoices (`billing_invoices.reserved_ip_micros`).

Existing clusters keep their floating addresses (reserved_ip_id NULL).

Revision ID: 0013_reserved_ips
Revises: 0012_allocation_counters
"""

import sqlalchemy as sa
from alembic import op

revision = "0013_reserved_ips"
down_revision = "0012_allocation_counters"
branch_labels = None
depends_on = None

SERIAL = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "reserved_ips",
        sa.Column("id", sa.String(length=30), nullable=False),
        sa.Column("project_id", sa.String(length=30), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=True),
        sa.Column("region", sa.String(length=64), nullable=False),
        sa.Column("address", sa.String(length=45), nullable=False),
        sa.Column("labels", sa.JSON(), server_default="{}", nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"],
                                name=op.f("fk_reserved_ips_project_id_projects"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_reserved_ips")),
        sa.UniqueConstraint("address", name=op.f("uq_reserved_ips_address")),
    )
    op.create_index("ix_reserved_ips_project_id_id", "reserved_ips", ["project_id", "id"])
    op.create_table(
        "reserved_ip_events",
        sa.Column("id", SERIAL, autoincrement=True, nullable=False),
        sa.Column("reserved_ip_id", sa.String(length=64), nullable=False),
        sa.Column("project_id", sa.String(length=30), nullable=False),
        sa.Column("region", sa.String(length=64), nullable=False),
        sa.Column("event", sa.String(length=16), nullable=False),
        sa.Column("cluster_id", sa.String(length=64), nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"],
                                name=op.f("fk_reserved_ip_events_project_id_projects"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_reserved_ip_events")),
    )
    op.create_index("ix_reserved_ip_events_reserved_ip_id", "reserved_ip_events", ["reserved_ip_id"])
    op.create_index("ix_reserved_ip_events_project_id", "reserved_ip_events", ["project_id"])
    op.add_column("clusters", sa.Column("reserved_ip_id", sa.String(length=30), nullable=True))
    op.create_index("ix_clusters_reserved_ip_id", "clusters", ["reserved_ip_id"], unique=True)
    op.add_column("billing_invoices", sa.Column("reserved_ip_micros", sa.BigInteger(), server_default="0",
                                                nullable=False))


def downgrade() -> None:
    # Plain ALTER TABLE DROP COLUMN (SQLite >= 3.35): a batch copy of `clusters` would drop the table,
    # and with foreign keys on that deletes every row that references a cluster.
    op.drop_column("billing_invoices", "reserved_ip_micros")
    op.drop_index("ix_clusters_reserved_ip_id", table_name="clusters")
    op.drop_column("clusters", "reserved_ip_id")
    op.drop_index("ix_reserved_ip_events_project_id", table_name="reserved_ip_events")
    op.drop_index("ix_reserved_ip_events_reserved_ip_id", table_name="reserved_ip_events")
    op.drop_table("reserved_ip_events")
    op.drop_index("ix_reserved_ips_project_id_id", table_name="reserved_ips")
    op.drop_table("reserved_ips")
