"""(skeleton: references that must exist get foreign keys; filled in by the races work)

Revision ID: 0019_reference_integrity
Revises: 0018_spot_capacity
"""

import sqlalchemy as sa  # noqa: F401
from alembic import op  # noqa: F401

revision = "0019_reference_integrity"
down_revision = "0018_spot_capacity"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
