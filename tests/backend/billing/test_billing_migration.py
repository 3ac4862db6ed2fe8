from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect

import backend.store.billing_models  # noqa: F401  (registers the billing tables)
from backend.store.base import Base

BILLING_TABLES = {
    "billing_usage_records",
    "billing_ledger_entries",
    "billing_reservations",
    "billing_invoices",
    "billing_accounts",
    "volume_events",
    "billing_credit_holds",
    "billing_settled_clusters",
    "billing_budgets",
    "billing_budget_alerts",
}


def _billing_object(diff: object) -> bool:
    text = repr(diff)
    return any(name in text for name in BILLING_TABLES)


def test_billing_migration_creates_the_tables_the_models_describe(database_url: str) -> None:
    engine = create_engine(database_url)
    try:
        assert set(inspect(engine).get_table_names()) >= BILLING_TABLES
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            drift = [d for d in compare_metadata(context, Base.metadata) if _billing_object(d)]
        assert drift == []
    finally:
        engine.dispose()
