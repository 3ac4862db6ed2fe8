"""Admission that does not slow as the fleet grows: free-slot counters per pool and scalable unit
(`engine_slot_pools`, `engine_slot_units`), next-free pointers for partition keys, subnets and public
IPs (`engine_allocation_cursors`), and an index on allocations by (kind, value, pool) for "which of
these values are held". The index on (kind, pool) goes: the unique index on (kind, pool, value) serves
those lookups.

The new tables start empty: a pool's counters are counted from its allocation rows on its first
placement (the catalog, which says a pool's capacity and SU size, is not known here), and a missing
pointer starts at the beginning of its block. So live clusters keep every slot and address.

Revision ID: 0012_allocation_counters
Revises: 0011_ttl_budgets
"""

import sqlalchemy as sa
from alembic import op

revision = "0012_allocation_counters"
down_revision = "0011_ttl_budgets"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "engine_slot_pools",
        sa.Column("pool", sa.String(length=160), nullable=False),
        sa.Column("capacity", sa.Integer(), nullable=False),
        sa.Column("nodes_per_su", sa.Integer(), nullable=False),
        sa.Column("free", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("pool", name=op.f("pk_engine_slot_pools")),
    )
    op.create_table(
        "engine_slot_units",
        sa.Column("pool", sa.String(length=160), nullable=False),
        sa.Column("unit", sa.Integer(), nullable=False),
        sa.Column("free", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["pool"], ["engine_slot_pools.pool"],
                                name=op.f("fk_engine_slot_units_pool_engine_slot_pools"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("pool", "unit", name=op.f("pk_engine_slot_units")),
    )
    op.create_index("ix_engine_slot_units_pool_free", "engine_slot_units", ["pool", "free", "unit"])
    op.create_table(
        "engine_allocation_cursors",
        sa.Column("name", sa.String(length=160), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_engine_allocation_cursors")),
    )
    op.create_index("ix_engine_allocations_kind_value", "engine_allocations", ["kind", "value", "pool"])
    op.drop_index("ix_engine_allocations_kind_pool", table_name="engine_allocations")


def downgrade() -> None:
    op.create_index("ix_engine_allocations_kind_pool", "engine_allocations", ["kind", "pool"])
    op.drop_index("ix_engine_allocations_kind_value", table_name="engine_allocations")
    op.drop_table("engine_allocation_cursors")
    op.drop_index("ix_engine_slot_units_pool_free", table_name="engine_slot_units")
    op.drop_table("engine_slot_units")
    op.drop_table("engine_slot_pools")
