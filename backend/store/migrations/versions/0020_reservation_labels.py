"""Reservation labels: capacity reservations carry `labels` as clusters do, and team scopes filter on
them (a scoped key's reservations get its scope label). Existing reservations get no label, so unscoped
keys see them as before and scoped keys do not.

Revision ID: 0020_reservation_labels
Revises: 0019_reference_integrity
"""

import sqlalchemy as sa
from alembic import op

revision = "0020_reservation_labels"
down_revision = "0019_reference_integrity"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("capacity_reservations") as batch:
        batch.add_column(sa.Column("labels", sa.JSON(), nullable=False, server_default="{}"))


def downgrade() -> None:
    # Plain DROP COLUMN (SQLite >= 3.35): a batch copy would recreate the table under its references.
    op.drop_column("capacity_reservations", "labels")
