"""Scale-down grace per cluster (issue 28): `clusters.scale_down_grace_minutes`, how long a scale-down
waits for the jobs running on a node it removes (the node drained meanwhile) before it requeues them and
releases the node; 0 requeues at once. Existing clusters get the default, 30 minutes.

Revision ID: 0024_scale_down_grace
Revises: 0023_node_events
"""

import sqlalchemy as sa
from alembic import op

revision = "0024_scale_down_grace"
down_revision = "0023_node_events"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("clusters", sa.Column("scale_down_grace_minutes", sa.Integer(), nullable=False,
                                        server_default="30"))


def downgrade() -> None:
    op.drop_column("clusters", "scale_down_grace_minutes")
