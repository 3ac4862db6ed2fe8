"""Day-2 node repair: `clusters.node_repair` (auto | manual, default auto) and, per engine node, the
node it replaces in place (`repair_of`), its orchestrator drain flag and a pending node action.

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


def downgrade() -> None:
    for column in ("pending_action", "drained", "repair_of"):
        op.drop_column("engine_nodes", column)
    op.drop_column("clusters", "node_repair")
