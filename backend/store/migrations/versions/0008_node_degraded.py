"""Day-2 degraded nodes: per engine node, why its latest readings say it is degraded (NULL: they do
not), so the reconciler repairs it (node_repair = auto) or shows the cluster Degraded (manual).

Revision ID: 0008_node_degraded
Revises: 0007_node_repair
"""

import sqlalchemy as sa
from alembic import op

revision = "0008_node_degraded"
down_revision = "0007_node_repair"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("engine_nodes", sa.Column("degraded_reason", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("engine_nodes", "degraded_reason")
