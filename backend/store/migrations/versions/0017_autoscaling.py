"""Autoscaling range per cluster: `autoscaling_min_nodes`, `autoscaling_max_nodes` and
`autoscaling_idle_minutes` (all null: a fixed node_count, as before).

Revision ID: 0017_autoscaling
Revises: 0012_allocation_counters
"""

import sqlalchemy as sa
from alembic import op

revision = "0017_autoscaling"
down_revision = "0016_reservations"
branch_labels = None
depends_on = None

COLUMNS = ("autoscaling_min_nodes", "autoscaling_max_nodes", "autoscaling_idle_minutes")


def upgrade() -> None:
    for column in COLUMNS:
        op.add_column("clusters", sa.Column(column, sa.Integer(), nullable=True))


def downgrade() -> None:
    for column in reversed(COLUMNS):
        op.drop_column("clusters", column)
