"""Time to live and budgets: per cluster its `ttl` as written, `expires_at`, `idle_teardown_minutes` and
when deletion_protection blocked an expiry; budgets (monthly USD amount, label filter, alert thresholds,
action at 100 %) and the alerts each raised once per month and threshold.

Revision ID: 0011_ttl_budgets
Revises: 0010_key_scopes
"""

import sqlalchemy as sa
from alembic import op

revision = "0011_ttl_budgets"
down_revision = "0010_key_scopes"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("clusters") as batch:
        batch.add_column(sa.Column("ttl", sa.String(32), nullable=True))
        batch.add_column(sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("idle_teardown_minutes", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("expiry_blocked_at", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "billing_budgets",
        sa.Column("id", sa.String(30), primary_key=True),
        sa.Column(
            "project_id", sa.String(30), sa.ForeignKey("projects.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("amount_micros", sa.BigInteger(), nullable=False),
        sa.Column("label_key", sa.String(63), nullable=True),
        sa.Column("label_value", sa.String(256), nullable=True),
        sa.Column("thresholds", sa.JSON(), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_billing_budgets_project_id_id", "billing_budgets", ["project_id", "id"])
    op.create_table(
        "billing_budget_alerts",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True
        ),
        sa.Column(
            "budget_id",
            sa.String(30),
            sa.ForeignKey("billing_budgets.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("period", sa.String(7), nullable=False),
        sa.Column("threshold", sa.Integer(), nullable=False),
        sa.Column("spent_micros", sa.BigInteger(), nullable=False),
        sa.Column("raised_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("budget_id", "period", "threshold", name="uq_billing_budget_alerts_crossing"),
    )
    op.create_index("ix_billing_budget_alerts_budget_id", "billing_budget_alerts", ["budget_id"])


def downgrade() -> None:
    op.drop_index("ix_billing_budget_alerts_budget_id", "billing_budget_alerts")
    op.drop_table("billing_budget_alerts")
    op.drop_index("ix_billing_budgets_project_id_id", "billing_budgets")
    op.drop_table("billing_budgets")
    # Plain ALTER TABLE DROP COLUMN (SQLite >= 3.35): a batch copy of `clusters` would drop the table,
    # and with foreign keys on that deletes every row that references a cluster.
    for column in ("expiry_blocked_at", "idle_teardown_minutes", "expires_at", "ttl"):
        op.drop_column("clusters", column)
