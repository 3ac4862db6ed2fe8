"""Host pools (issue 32): `host_pools` (a project's own servers reached over SSH: user, port, sealed private
key, its public half, optional bastion and shared storage path) and `host_pool_hosts` (each host's address,
what its last check found, and the claim on its next check). New tables: nothing existing changes.

Revision ID: 0028_host_pools
Revises: 0027_container_images
"""

import sqlalchemy as sa
from alembic import op

revision = "0028_host_pools"
down_revision = "0027_container_images"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "host_pools",
        sa.Column("id", sa.String(30), nullable=False),
        sa.Column("project_id", sa.String(30), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("region", sa.String(64), nullable=False),
        sa.Column("ssh_user", sa.String(32), nullable=False),
        sa.Column("ssh_port", sa.Integer(), nullable=False),
        sa.Column("ssh_private_key", sa.String(), nullable=False),
        sa.Column("ssh_public_key", sa.Text(), nullable=False),
        sa.Column("ssh_key_fingerprint", sa.String(80), nullable=False),
        sa.Column("proxy_jump", sa.String(300), nullable=True),
        sa.Column("shared_storage_path", sa.String(1024), nullable=True),
        sa.Column("install_packages", sa.Boolean(), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"],
                                name=op.f("fk_host_pools_project_id_projects"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_host_pools")),
    )
    op.create_table(
        "host_pool_hosts",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("pool_id", sa.String(30), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("address", sa.String(255), nullable=False),
        sa.Column("port", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("reason_code", sa.String(32), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("host_key", sa.Text(), nullable=True),
        sa.Column("inventory", sa.JSON(), nullable=True),
        sa.Column("checked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("probe_due_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("probe_lease_owner", sa.String(128), nullable=True),
        sa.Column("probe_lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("probe_generation", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["pool_id"], ["host_pools.id"],
                                name=op.f("fk_host_pool_hosts_pool_id_host_pools"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_host_pool_hosts")),
    )
    op.create_index("ix_host_pool_hosts_pool", "host_pool_hosts", ["pool_id", "position"])
    op.create_index("ix_host_pool_hosts_probe_due", "host_pool_hosts", ["probe_due_at"])


def downgrade() -> None:
    op.drop_table("host_pool_hosts")
    op.drop_table("host_pools")
