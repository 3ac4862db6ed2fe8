"""The one declarative base every table of the backend hangs off (so Alembic sees one metadata), and the
one column type every timestamp uses."""

from datetime import UTC, datetime

from sqlalchemy import MetaData
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase
from sqlalchemy.types import DateTime, TypeDecorator

# Explicit constraint names: Alembic migrations and PostgreSQL/SQLite then agree on them.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class UtcDateTime(TypeDecorator[datetime]):
    """A timestamp stored in UTC and always read back as an aware UTC datetime.

    PostgreSQL keeps it as `timestamp with time zone`; SQLite has no zoned type and keeps the UTC wall
    time as text, so without this its values would come back naive. A naive value written is taken as
    UTC (the backend's clock is UTC; nothing should write a naive value, but none is ever shifted).
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
