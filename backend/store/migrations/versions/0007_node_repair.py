"""Day-2 node repair: `clusters.node_repair` (auto | manual, default auto) and, per engine node, the
node it replaces in place (`repair_of`), its orchestrator drain flag and a pending node action; the
per-node GPU metrics ring buffer `node_metric_chunks`.

Plain ALTER TABLE ADD / DROP COLUMN, no batch mode: recreating `clusters` on SQLite would cascade the
drop of the old table to every row that references it.

Revision ID: 0007_node_repair
Revises: 0006_secrets_at_rest
"""

import sqlalchemy as sa
from alembic import op

revision = "0007_node_repair"
down_revision = "0006_secrets_at_rest"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("clusters", sa.Column("node_repair", sa.String(length=8), nullable=False,
                                        server_default="auto"))
    op.add_column("engine_nodes", sa.Column("repair_of", sa.String(length=30), nullable=True))
    op.add_column("engine_nodes", sa.Column("drained", sa.Boolean(), nullable=False,
                                            server_default=sa.false()))
    op.add_column("engine_nodes", sa.Column("pending_action", sa.String(length=16), nullable=True))
    op.create_table(
        "node_metric_chunks",
        sa.Column("cluster_id", sa.String(length=30), nullable=False),
        sa.Column("node_name", sa.String(length=80), nullable=False),
        sa.Column("tier", sa.Integer(), nullable=False),
        sa.Column("slot", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(["cluster_id"], ["clusters.id"],
                                name=op.f("fk_node_metric_chunks_cluster_id_clusters"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("cluster_id", "node_name", "tier", "slot",
                                name=op.f("pk_node_metric_chunks")),
    )


def downgrade() -> None:
    op.drop_table("node_metric_chunks")
    for column in ("pending_action", "drained", "repair_of"):
        op.drop_column("engine_nodes", column)
    op.drop_column("clusters", "node_repair")
