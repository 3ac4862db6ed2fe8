import json
from datetime import datetime

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

import backend.store.billing_models  # noqa: F401  (registers the billing tables)
from backend.store.base import Base
from tests.backend.billing.test_volume_history import migrate

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


def test_migration_0022_sets_billing_modes_and_labels_existing_lines(empty_database_url: str) -> None:
    """Existing projects: never granted credits -> postpaid; funded before they spent -> prepaid (as
    before); spent first, granted later -> postpaid (the grant made them prepaid by mistake). Existing
    lines take their object's labels (what chargeback read until then); history events too."""
    url = empty_database_url
    migrate(url, "0021_utc_timestamps")
    engine = create_engine(url)
    rows = [
        "INSERT INTO projects (id, name, created_at) VALUES "
        "('prj_none', 'none', :t), ('prj_funded', 'funded', :t), ('prj_late', 'late', :t)",
        "INSERT INTO billing_accounts (project_id, prepaid, updated_at) VALUES "
        "('prj_funded', :yes, :t), ('prj_late', :yes, :t)",
        "INSERT INTO billing_ledger_entries (idempotency_key, project_id, entry_type, amount_micros, "
        "description, actor, created_at) VALUES "
        "('g1', 'prj_funded', 'grant', 100, '', 'test', :t), "
        "('c1', 'prj_funded', 'charge', -1, '', 'b', :t2), "
        "('c2', 'prj_late', 'charge', -1, '', 'b', :t), ('g2', 'prj_late', 'grant', 100, '', 'test', :t2)",
        "INSERT INTO clusters (id, project_id, name, region, instance_type, node_count, orchestrator, "
        "interconnect, billing_type, labels, deletion_protection, status, generation, created_at, "
        "updated_at) VALUES ('cls_a', 'prj_none', 'a', 'us-east-1', '8xH100', 1, 'slurm', 'infiniband', "
        "'on_demand', "
        "'{\"team\": \"nlp\"}', :no, 'RUNNING', 1, :t, :t)",
        "INSERT INTO volumes (id, project_id, name, region, size_tib, status, generation, created_at, "
        "updated_at, labels) VALUES ('vol_a', 'prj_none', 'v', 'us-east-1', 1, 'available', 1, :t, :t, "
        "'{\"team\": \"vision\"}')",
        "INSERT INTO volume_events (volume_id, project_id, region, event, size_tib, at) VALUES "
        "('vol_a', 'prj_none', 'us-east-1', 'created', 1, :t), ('vol_gone', 'prj_none', 'us-east-1', "
        "'created', 1, :t)",
        "INSERT INTO billing_usage_records (idempotency_key, project_id, kind, resource_type, resource_id, "
        "cluster_id, region, period_start, period_end, seconds, units, unit_price_usd, amount_micros, "
        "recorded_at) VALUES "
        "('u1', 'prj_none', 'compute_on_demand', 'node', 'nod_a', 'cls_a', 'us-east-1', :t, :t2, 1, 8, "
        "1, 1, :t2),"
        "('u2', 'prj_none', 'storage', 'volume', 'vol_a', NULL, 'us-east-1', :t, :t2, 1, 1, 1, 1, :t2),"
        "('u3', 'prj_none', 'storage', 'volume', 'vol_gone', NULL, 'us-east-1', :t, :t2, 1, 1, 1, 1, :t2)",
    ]
    values = {"t": datetime(2026, 3, 2, 9), "t2": datetime(2026, 3, 2, 10), "yes": True, "no": False}
    with engine.begin() as connection:
        for statement in rows:
            connection.execute(text(statement), values)
    engine.dispose()

    migrate(url, "0022_billing_mode_usage_labels")
    engine = create_engine(url)
    with engine.connect() as connection:
        query = text("SELECT name, billing_mode FROM projects")
        modes: dict[str, str] = {name: mode for name, mode in connection.execute(query)}
        lines = {key: _json(labels) for key, labels in connection.execute(
            text("SELECT idempotency_key, labels FROM billing_usage_records"))}
        events = {volume: _json(labels) for volume, labels in connection.execute(
            text("SELECT volume_id, labels FROM volume_events"))}
    engine.dispose()
    assert modes == {"none": "postpaid", "funded": "prepaid", "late": "postpaid"}
    assert lines == {"u1": {"team": "nlp"}, "u2": {"team": "vision"}, "u3": {}}
    assert events == {"vol_a": {"team": "vision"}, "vol_gone": {}}

    migrate(url, "0021_utc_timestamps", down=True)
    engine = create_engine(url)
    try:
        assert "billing_mode" not in {c["name"] for c in inspect(engine).get_columns("projects")}
        assert "labels" not in {c["name"] for c in inspect(engine).get_columns("billing_usage_records")}
    finally:
        engine.dispose()


def _json(value: object) -> object:
    return json.loads(value) if isinstance(value, str) else value
