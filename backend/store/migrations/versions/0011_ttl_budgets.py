"""Time to live and budgets: per cluster its `ttl` as written, `expires_at`, `idle_teardown_minutes` and
when deletion_protection blocked an expiry; budgets (monthly USD amount, label filter, alert thresholds,
action at 100 %) and the alerts each raised once per month and threshold.

Revision ID: 0011_ttl_budgets
Revises: 0008_node_degraded
"""

import sqlalchemy as sa
from alembic import op

revision = "0011_ttl_budgets"
down_revision = "0008_node_degraded"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("clusters") as batch:
        batch.add_column(sa.Column("ttl", sa.String(32), nullable=True))
        batch.add_column(sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("idle_teardown_minutes", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("expiry_blocked_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("clusters") as batch:
        batch.drop_column("expiry_blocked_at")
        batch.drop_column("idle_teardown_minutes")
        batch.drop_column("expires_at")
        batch.drop_column("ttl")
