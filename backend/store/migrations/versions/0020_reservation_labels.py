"""(skeleton: reservation labels; filled in by the scope work)

Revision ID: 0020_reservation_labels
Revises: 0019_reference_integrity
"""

import sqlalchemy as sa  # noqa: F401
from alembic import op  # noqa: F401

revision = "0020_reservation_labels"
down_revision = "0019_reference_integrity"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
