"""Roles and team scopes: an API key may be limited to one label (`team=nlp`); volumes and SSH keys
carry the creating key's scope label, as clusters carry theirs in `labels`. Existing keys stay
unscoped and existing volumes and SSH keys get no label, so nothing changes for them.

Revision ID: 0010_key_scopes
Revises: 0009_credentials_lease
"""

import sqlalchemy as sa
from alembic import op

revision = "0010_key_scopes"
down_revision = "0009_credentials_lease"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("scope_key", sa.String(63), nullable=True))
        batch.add_column(sa.Column("scope_value", sa.String(63), nullable=True))
    for table in ("volumes", "ssh_keys"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("labels", sa.JSON(), nullable=False, server_default="{}"))


def downgrade() -> None:
    # Plain ALTER TABLE DROP COLUMN (SQLite >= 3.35): a batch copy would drop `volumes` / `ssh_keys`,
    # and with foreign keys on that deletes the cluster links that reference them.
    for table in ("ssh_keys", "volumes"):
        op.drop_column(table, "labels")
    op.drop_column("api_keys", "scope_value")
    op.drop_column("api_keys", "scope_key")
