"""Per-project quotas: `project_quotas` (max GPUs, max clusters, max hourly spend in micro-dollars;
null is no limit). Projects start without a row, so nothing changes for live projects.

Revision ID: 0015_quotas
Revises: 0012_allocation_counters
"""

import sqlalchemy as sa
from alembic import op

revision = "0015_quotas"
down_revision = "0014_security_groups"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "project_quotas",
        sa.Column("project_id", sa.String(30), nullable=False),
        sa.Column("max_gpus", sa.Integer(), nullable=True),
        sa.Column("max_clusters", sa.Integer(), nullable=True),
        sa.Column("max_hourly_micros", sa.BigInteger(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"],
                                name=op.f("fk_project_quotas_project_id_projects"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("project_id", name=op.f("pk_project_quotas")),
    )


def downgrade() -> None:
    op.drop_table("project_quotas")
