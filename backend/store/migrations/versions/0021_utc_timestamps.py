"""Every timestamp column UTC-aware (the models now use `backend.store.base.UtcDateTime` on all of them).

PostgreSQL: migrations 0001-0020 create every timestamp as `timestamp with time zone`, so a database they
made has nothing to convert. A column that is `timestamp without time zone` anyway (created or altered by
hand) is converted here, its values read as UTC, the zone the backend always wrote.

SQLite has no zoned type: SQLAlchemy stores a timestamp as its wall time in text, without an offset, on
every version of the schema, and the backend's clock is UTC. What changes is on read (UtcDateTime gives
those values their zone back) and on write (an aware value in another zone is converted to UTC before it
is stored, where it used to be stored as its own wall time). A value stored that way before cannot be
told apart from a UTC one (its offset was never written), so there is nothing this step could correct.

Revision ID: 0021_utc_timestamps
Revises: 0020_reservation_labels
"""

import sqlalchemy as sa
from alembic import op

revision = "0021_utc_timestamps"
down_revision = "0020_reservation_labels"
branch_labels = None
depends_on = None

_NAIVE_COLUMNS = sa.text(
    "SELECT table_name, column_name FROM information_schema.columns "
    "WHERE table_schema = current_schema() AND data_type = 'timestamp without time zone' "
    "AND table_name <> 'alembic_version' ORDER BY table_name, column_name"
)


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return  # see the module docstring: SQLite stores UTC wall times, which UtcDateTime reads as UTC
    quote = bind.dialect.identifier_preparer.quote
    for table, column in bind.execute(_NAIVE_COLUMNS).all():
        op.execute(
            f"ALTER TABLE {quote(table)} ALTER COLUMN {quote(column)} TYPE timestamp with time zone "
            f"USING {quote(column)} AT TIME ZONE 'UTC'"
        )


def downgrade() -> None:
    pass  # the columns were (and stay) zoned: 0020's schema has no naive timestamp to go back to
