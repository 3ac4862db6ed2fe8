"""Clusters on pools behind a bastion (issue 32): `host_pool_hosts.jump_known_hosts`, the bastion's host key
as a host's first check through it recorded it, required by every later connection (checks and clusters).

Revision ID: 0030_bastion_host_keys
Revises: 0029_pool_clusters
"""

import sqlalchemy as sa
from alembic import op

revision = "0030_bastion_host_keys"
down_revision = "0029_pool_clusters"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("host_pool_hosts", sa.Column("jump_known_hosts", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("host_pool_hosts") as batch:
        batch.drop_column("jump_known_hosts")
