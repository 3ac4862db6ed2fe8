"""Reference integrity: a cluster's reserved IP must exist (`clusters.reserved_ip_id` -> `reserved_ips.id`).

Before this, a reserved IP released while a request attached it could stay on the cluster. Such dangling
references are cleared first (the IP was released: its history already ends with the release, and the
cluster gets a floating address at its next reconcile), then the foreign key is added.

PostgreSQL only: SQLite cannot add a key to an existing table without copying it, and copying
`clusters` with foreign keys on deletes every row that references a cluster (see 0013's downgrade).
There one writer runs at a time (a write transaction takes the database's write lock at BEGIN), so the
release's own "is it attached?" check and the attach's lock on the IP already rule the race out.

Revision ID: 0019_reference_integrity
Revises: 0018_spot_capacity
"""

import sqlalchemy as sa
from alembic import op

revision = "0019_reference_integrity"
down_revision = "0018_spot_capacity"
branch_labels = None
depends_on = None

FK_NAME = "fk_clusters_reserved_ip_id_reserved_ips"


def upgrade() -> None:
    op.execute(
        sa.text(
            "UPDATE clusters SET reserved_ip_id = NULL WHERE reserved_ip_id IS NOT NULL AND NOT EXISTS "
            "(SELECT 1 FROM reserved_ips WHERE reserved_ips.id = clusters.reserved_ip_id)"
        )
    )
    if op.get_bind().dialect.name == "postgresql":
        op.create_foreign_key(FK_NAME, "clusters", "reserved_ips", ["reserved_ip_id"], ["id"])


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.drop_constraint(FK_NAME, "clusters", type_="foreignkey")
