"""Spot capacity with fallback: per cluster its `capacity_type` (on_demand | spot | spot_with_fallback);
per engine node the capacity it runs on and, for a spot node, when the spot market reclaims it and when
its preemption notice was given; per cluster until when reclaimed spot capacity stays away; per node
transition the capacity it ran on (billing meters each node at that capacity's rate).

Existing rows are on-demand (server defaults), so live clusters and their meters are unchanged.

Revision ID: 0018_spot_capacity
Revises: 0012_allocation_counters
"""

import sqlalchemy as sa
from alembic import op

revision = "0018_spot_capacity"
down_revision = "0017_autoscaling"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("clusters", sa.Column("capacity_type", sa.String(24), nullable=False,
                                        server_default="on_demand"))
    op.add_column("engine_clusters", sa.Column("spot_reclaimed_until", sa.DateTime(timezone=True),
                                               nullable=True))
    op.add_column("engine_nodes", sa.Column("capacity_type", sa.String(16), nullable=False,
                                            server_default="on_demand"))
    op.add_column("engine_nodes", sa.Column("preempt_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("engine_nodes", sa.Column("preempt_notice_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("engine_node_transitions", sa.Column("capacity_type", sa.String(16), nullable=False,
                                                       server_default="on_demand"))


def downgrade() -> None:
    op.drop_column("engine_node_transitions", "capacity_type")
    op.drop_column("engine_nodes", "preempt_notice_at")
    op.drop_column("engine_nodes", "preempt_at")
    op.drop_column("engine_nodes", "capacity_type")
    op.drop_column("engine_clusters", "spot_reclaimed_until")
    op.drop_column("clusters", "capacity_type")
