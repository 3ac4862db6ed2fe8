"""Clusters on a host pool (issue 32): `clusters.host_pool_id` (the pool whose servers are the cluster's
nodes; NULL for the datacenter's; no foreign key, as `reservation_id`: a destroyed cluster's row outlives its
pool) and `host_pool_hosts.node_id` (the engine node a server is lent to; NULL: free).

Revision ID: 0029_pool_clusters
Revises: 0028_host_pools
"""

import sqlalchemy as sa
from alembic import op

revision = "0029_pool_clusters"
down_revision = "0028_host_pools"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain ADD COLUMN: a batch copy of `clusters` on SQLite drops the table its engine rows cascade from.
    op.add_column("clusters", sa.Column("host_pool_id", sa.String(30), nullable=True))
    op.create_index("ix_clusters_host_pool_id", "clusters", ["host_pool_id"])
    with op.batch_alter_table("host_pool_hosts") as batch:  # nothing references it
        batch.add_column(sa.Column("node_id", sa.String(30), nullable=True))
        batch.create_foreign_key(op.f("fk_host_pool_hosts_node_id_engine_nodes"), "engine_nodes", ["node_id"],
                                 ["id"], ondelete="SET NULL")
        batch.create_unique_constraint(op.f("uq_host_pool_hosts_node_id"), ["node_id"])


def downgrade() -> None:
    with op.batch_alter_table("host_pool_hosts") as batch:
        batch.drop_constraint(op.f("uq_host_pool_hosts_node_id"), type_="unique")
        batch.drop_constraint(op.f("fk_host_pool_hosts_node_id_engine_nodes"), type_="foreignkey")
        batch.drop_column("node_id")
    op.drop_index("ix_clusters_host_pool_id", table_name="clusters")
    op.drop_column("clusters", "host_pool_id")
