"""Node history (issue 28): `engine_node_events`, one row per thing that happened to a node of a cluster
(a fault with its XID code, a repair or restart started and finished, a node action and who asked for
it), by the node's stable name, naming the machine it was about. Written by the engine and the API in
the transaction of the change (backend/provisioning/node_history.py); kept with the cluster.

Existing clusters start with an empty history.

Revision ID: 0023_node_events
Revises: 0022_billing_mode_usage_labels
"""

import sqlalchemy as sa
from alembic import op

revision = "0023_node_events"
down_revision = "0022_billing_mode_usage_labels"
branch_labels = None
depends_on = None

TABLE = "engine_node_events"


def upgrade() -> None:
    op.create_table(
        TABLE,
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("cluster_id", sa.String(length=30), nullable=False),
        sa.Column("node_name", sa.String(length=80), nullable=False),
        sa.Column("node_id", sa.String(length=30), nullable=True),
        sa.Column("kind", sa.String(length=24), nullable=False),
        sa.Column("code", sa.Integer(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("actor", sa.String(length=64), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["cluster_id"], ["clusters.id"],
                                name=op.f(f"fk_{TABLE}_cluster_id_clusters"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f(f"pk_{TABLE}")),
    )
    op.create_index("ix_engine_node_events_cluster_node", TABLE, ["cluster_id", "node_name", "id"])


def downgrade() -> None:
    op.drop_index("ix_engine_node_events_cluster_node", table_name=TABLE)
    op.drop_table(TABLE)
