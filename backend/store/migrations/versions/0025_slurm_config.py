"""Slurm configuration the user declares (issue 28): `clusters.slurm_config`, the API's `slurm_config`
(partitions beside `gpu`, QoS, prolog and epilog on a shared volume) with defaults filled in; NULL, as
for every existing cluster, declares none.

Revision ID: 0025_slurm_config
Revises: 0024_scale_down_grace
"""

import sqlalchemy as sa
from alembic import op

revision = "0025_slurm_config"
down_revision = "0024_scale_down_grace"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("clusters", sa.Column("slurm_config", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("clusters", "slurm_config")
