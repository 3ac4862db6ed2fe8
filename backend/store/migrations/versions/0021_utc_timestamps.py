"""(skeleton: every timestamp column UTC-aware; filled in by the UTC work)

Revision ID: 0021_utc_timestamps
Revises: 0020_reservation_labels
"""

import sqlalchemy as sa  # noqa: F401
from alembic import op  # noqa: F401

revision = "0021_utc_timestamps"
down_revision = "0020_reservation_labels"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
