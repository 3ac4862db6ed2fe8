"""Billing mode on projects and labels on usage lines (issue 27).

`projects.billing_mode` (prepaid | postpaid) replaces the inference "granted credits, so prepaid". For
existing projects: a project never granted credits stays postpaid (today's behaviour); a project whose
first grant came no later than its first charge was funded before it spent, so it is prepaid as before;
a project that spent first and was granted credits later was postpaid with a credit (the grant paused it
by mistake), so it is postpaid now. An operator changes either with `gpucloud-backend set-billing-mode`.

`billing_usage_records.labels`: the labels of the billed object when the line was charged. Lines charged
before this step get the labels their object has now (what chargeback read until now), so no existing
chargeback figure moves. `volume_events.labels` and `reserved_ip_events.labels` carry the object's labels
at each event, so lines charged after a volume or address is gone still reach its team; existing events
take the labels of their object where it still exists.

Revision ID: 0022_billing_mode_usage_labels
Revises: 0021_utc_timestamps
"""

import sqlalchemy as sa
from alembic import op

revision = "0022_billing_mode_usage_labels"
down_revision = "0021_utc_timestamps"
branch_labels = None
depends_on = None

_FUNDED_FIRST = """
UPDATE projects SET billing_mode = 'prepaid'
WHERE id IN (SELECT project_id FROM billing_accounts WHERE prepaid)
  AND (SELECT MIN(created_at) FROM billing_ledger_entries g
       WHERE g.project_id = projects.id AND g.entry_type = 'grant')
   <= COALESCE((SELECT MIN(created_at) FROM billing_ledger_entries c
                WHERE c.project_id = projects.id AND c.entry_type = 'charge'),
               (SELECT MIN(created_at) FROM billing_ledger_entries g
                WHERE g.project_id = projects.id AND g.entry_type = 'grant'))
"""

# Each line's object, by resource_type (a node line names its cluster in cluster_id).
_LINE_LABELS = (
    ("clusters", "billing_usage_records.cluster_id", "billing_usage_records.cluster_id IS NOT NULL"),
    ("volumes", "billing_usage_records.resource_id", "billing_usage_records.resource_type = 'volume'"),
    ("reserved_ips", "billing_usage_records.resource_id",
     "billing_usage_records.resource_type = 'reserved_ip'"),
    ("capacity_reservations", "billing_usage_records.resource_id",
     "billing_usage_records.resource_type = 'reservation'"),
)


def upgrade() -> None:
    with op.batch_alter_table("projects") as batch:
        batch.add_column(
            sa.Column("billing_mode", sa.String(16), nullable=False, server_default="postpaid")
        )
    op.execute(sa.text(_FUNDED_FIRST))
    for table in ("billing_usage_records", "volume_events", "reserved_ip_events"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("labels", sa.JSON(), nullable=False, server_default="{}"))
    for source, ref, which in _LINE_LABELS:
        found = f"FROM {source} WHERE {source}.id = {ref}"
        op.execute(sa.text(
            f"UPDATE billing_usage_records SET labels = (SELECT labels {found}) "
            f"WHERE {which} AND EXISTS (SELECT 1 {found})"
        ))
    for events, source, ref in (("volume_events", "volumes", "volume_id"),
                                ("reserved_ip_events", "reserved_ips", "reserved_ip_id")):
        found = f"FROM {source} WHERE {source}.id = {events}.{ref}"
        op.execute(sa.text(
            f"UPDATE {events} SET labels = (SELECT labels {found}) WHERE EXISTS (SELECT 1 {found})"
        ))


def downgrade() -> None:
    # Plain DROP COLUMN (SQLite >= 3.35): a batch copy would recreate the tables under their references.
    for table in ("reserved_ip_events", "volume_events", "billing_usage_records"):
        op.drop_column(table, "labels")
    op.drop_column("projects", "billing_mode")
