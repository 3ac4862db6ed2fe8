"""The one declarative base every table of the backend hangs off (so Alembic sees one metadata)."""

from sqlalchemy import MetaData
from sqlalchemy.orm import DeclarativeBase

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
