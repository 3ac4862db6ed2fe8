"""Address plan: subnets and public IPs move from per-region pools into the one pool `global`.

Before, every region drew from the same blocks with a pool per region, so two regions could hold the
same subnet or public IP. The oldest holder of each value moves to `global`; a later holder of the same
value (an address the old plan handed out twice) keeps its region pool and its address until its
cluster releases it, and the allocator never hands that value out again. Private IPs stay in the pool
of their subnet. Data only: no table changes.

Revision ID: 0004_address_plan
Revises: 0003_billing
"""

import logging

import sqlalchemy as sa
from alembic import op

revision = "0004_address_plan"
down_revision = "0003_billing"
branch_labels = None
depends_on = None

ADDRESS_POOL = "global"  # backend.provisioning.allocator.ADDRESS_POOL at this revision
ADDRESS_KINDS = "('subnet', 'public_ip')"
log = logging.getLogger("alembic.runtime.migration")


def upgrade() -> None:
    connection = op.get_bind()
    shared = connection.execute(sa.text(
        f"SELECT kind, value, COUNT(*) FROM engine_allocations WHERE kind IN {ADDRESS_KINDS} "
        "GROUP BY kind, value HAVING COUNT(*) > 1 ORDER BY kind, value"
    )).all()
    for kind, value, holders in shared:
        log.warning("%s %s is held by %d clusters in different regions; they keep it until released",
                    kind, value, holders)
    connection.execute(sa.text(
        f"UPDATE engine_allocations SET pool = :pool WHERE kind IN {ADDRESS_KINDS} AND id = ("
        "SELECT MIN(oldest.id) FROM engine_allocations oldest "
        "WHERE oldest.kind = engine_allocations.kind AND oldest.value = engine_allocations.value)"
    ), {"pool": ADDRESS_POOL})


def downgrade() -> None:
    op.get_bind().execute(sa.text(
        f"UPDATE engine_allocations SET pool = ("
        "SELECT clusters.region FROM clusters WHERE clusters.id = engine_allocations.cluster_id) "
        f"WHERE kind IN {ADDRESS_KINDS} AND pool = :pool"
    ), {"pool": ADDRESS_POOL})
