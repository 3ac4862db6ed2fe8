"""SSH host keys (issue 31): `engine_nodes.host_key` (the node's) and `engine_clusters.login_host_key`
(the jumphost's of a multi-node cluster), OpenSSH public-key lines the driver reports once the machine
is up; the API publishes them so `gpucloud ssh` connects with strict host key checking. NULL, as for
every existing node until it boots again: not known yet.

Revision ID: 0026_ssh_host_keys
Revises: 0025_slurm_config
"""

import sqlalchemy as sa
from alembic import op

revision = "0026_ssh_host_keys"
down_revision = "0025_slurm_config"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("engine_nodes", sa.Column("host_key", sa.Text(), nullable=True))
    op.add_column("engine_clusters", sa.Column("login_host_key", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("engine_clusters", "login_host_key")
    op.drop_column("engine_nodes", "host_key")
