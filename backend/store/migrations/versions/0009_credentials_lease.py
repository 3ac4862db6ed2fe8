"""Kubernetes admin credentials as a lease: when each cluster's admin token lapses unless renewed
(NULL: not leased yet; the next read of /credentials issues a fresh token).

Revision ID: 0009_credentials_lease
Revises: 0008_node_degraded
"""

import sqlalchemy as sa
from alembic import op

revision = "0009_credentials_lease"
down_revision = "0008_node_degraded"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "engine_clusters", sa.Column("kube_admin_token_expires_at", sa.DateTime(timezone=True), nullable=True)
    )


def downgrade() -> None:
    op.drop_column("engine_clusters", "kube_admin_token_expires_at")
