"""Engine tables: nodes, node transitions, allocations, phase history, work queue, steps, workers,
and the simulated datacenter's operations.

Revision ID: 0002_engine
Revises: 0001_core
"""

import sqlalchemy as sa
from alembic import op

revision = "0002_engine"
down_revision = "0001_core"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "engine_locks",
        sa.Column("name", sa.String(length=160), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_engine_locks")),
    )
    op.create_table(
        "engine_workers",
        sa.Column("id", sa.String(length=80), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("passes", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_engine_workers")),
    )
    op.create_table(
        "sim_operations",
        sa.Column("client_token", sa.String(length=160), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("submitted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ready_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("succeeded", sa.Boolean(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("client_token", name=op.f("pk_sim_operations")),
    )
    op.create_table(
        "engine_allocations",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("pool", sa.String(length=160), nullable=False),
        sa.Column("value", sa.String(length=64), nullable=False),
        sa.Column("cluster_id", sa.String(length=30), nullable=False),
        sa.Column("node_id", sa.String(length=30), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["cluster_id"],
            ["clusters.id"],
            name=op.f("fk_engine_allocations_cluster_id_clusters"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_engine_allocations")),
        sa.UniqueConstraint("kind", "pool", "value", name="uq_engine_allocations_kind_pool_value"),
    )
    with op.batch_alter_table("engine_allocations", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_engine_allocations_cluster_id"), ["cluster_id"], unique=False)
        batch_op.create_index("ix_engine_allocations_kind_pool", ["kind", "pool"], unique=False)
        batch_op.create_index(batch_op.f("ix_engine_allocations_node_id"), ["node_id"], unique=False)

    op.create_table(
        "engine_clusters",
        sa.Column("cluster_id", sa.String(length=30), nullable=False),
        sa.Column("fabric", sa.String(length=64), nullable=False),
        sa.Column("hostname_prefix", sa.String(length=63), nullable=False),
        sa.Column("subnet", sa.String(length=43), nullable=False),
        sa.Column("partition_key", sa.String(length=8), nullable=True),
        sa.Column("public_ip", sa.String(length=45), nullable=True),
        sa.Column("jumphost_ip", sa.String(length=45), nullable=True),
        sa.Column("control_plane", sa.String(length=16), nullable=False),
        sa.Column("control_plane_op", sa.String(length=160), nullable=True),
        sa.Column("control_plane_ready_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("kube_ca_cert_pem", sa.Text(), nullable=True),
        sa.Column("kube_admin_token", sa.String(length=128), nullable=True),
        sa.Column("current_batch", sa.Integer(), nullable=False),
        sa.Column("first_ready_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("rollback_reason", sa.Text(), nullable=True),
        sa.Column("blocked_generation", sa.Integer(), nullable=True),
        sa.Column("membership_version", sa.Integer(), nullable=False),
        sa.Column("paused_reason", sa.Text(), nullable=True),
        sa.Column("finished", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["cluster_id"],
            ["clusters.id"],
            name=op.f("fk_engine_clusters_cluster_id_clusters"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("cluster_id", name=op.f("pk_engine_clusters")),
    )
    op.create_table(
        "engine_nodes",
        sa.Column("id", sa.String(length=30), nullable=False),
        sa.Column("cluster_id", sa.String(length=30), nullable=False),
        sa.Column("name", sa.String(length=80), nullable=False),
        sa.Column("active_name", sa.String(length=80), nullable=True),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("batch", sa.Integer(), nullable=False),
        sa.Column("region", sa.String(length=64), nullable=False),
        sa.Column("fabric", sa.String(length=64), nullable=False),
        sa.Column("instance_type", sa.String(length=64), nullable=False),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("slot", sa.Integer(), nullable=False),
        sa.Column("scalable_unit", sa.Integer(), nullable=False),
        sa.Column("private_ip", sa.String(length=45), nullable=False),
        sa.Column("public_ip", sa.String(length=45), nullable=True),
        sa.Column("status", sa.String(length=24), nullable=False),
        sa.Column("stage", sa.String(length=24), nullable=False),
        sa.Column("status_reason", sa.Text(), nullable=True),
        sa.Column("op_token", sa.String(length=160), nullable=True),
        sa.Column("op_ready_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("op_seq", sa.Integer(), nullable=False),
        sa.Column("applied_config", sa.JSON(), nullable=False),
        sa.Column("watch_token", sa.String(length=160), nullable=True),
        sa.Column("watch_due_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["cluster_id"],
            ["clusters.id"],
            name=op.f("fk_engine_nodes_cluster_id_clusters"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_engine_nodes")),
        sa.UniqueConstraint("cluster_id", "active_name", name="uq_engine_nodes_cluster_active_name"),
    )
    with op.batch_alter_table("engine_nodes", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_engine_nodes_cluster_id"), ["cluster_id"], unique=False)

    op.create_table(
        "engine_phase_history",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("cluster_id", sa.String(length=30), nullable=False),
        sa.Column("phase", sa.String(length=40), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["cluster_id"],
            ["clusters.id"],
            name=op.f("fk_engine_phase_history_cluster_id_clusters"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_engine_phase_history")),
    )
    with op.batch_alter_table("engine_phase_history", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_engine_phase_history_cluster_id"), ["cluster_id"], unique=False)

    op.create_table(
        "engine_steps",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("client_token", sa.String(length=160), nullable=False),
        sa.Column("cluster_id", sa.String(length=30), nullable=False),
        sa.Column("node_id", sa.String(length=30), nullable=True),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("submitted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ready_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("outcome", sa.String(length=16), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("worker", sa.String(length=80), nullable=False),
        sa.Column("fencing_token", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["cluster_id"],
            ["clusters.id"],
            name=op.f("fk_engine_steps_cluster_id_clusters"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_engine_steps")),
        sa.UniqueConstraint("client_token", name=op.f("uq_engine_steps_client_token")),
    )
    with op.batch_alter_table("engine_steps", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_engine_steps_cluster_id"), ["cluster_id"], unique=False)

    op.create_table(
        "engine_work",
        sa.Column("cluster_id", sa.String(length=30), nullable=False),
        sa.Column("due_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("lease_owner", sa.String(length=80), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("fencing_token", sa.Integer(), nullable=False),
        sa.Column("passes", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["cluster_id"],
            ["clusters.id"],
            name=op.f("fk_engine_work_cluster_id_clusters"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("cluster_id", name=op.f("pk_engine_work")),
    )
    with op.batch_alter_table("engine_work", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_engine_work_due_at"), ["due_at"], unique=False)

    op.create_table(
        "engine_node_transitions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("node_id", sa.String(length=30), nullable=False),
        sa.Column("cluster_id", sa.String(length=30), nullable=False),
        sa.Column("project_id", sa.String(length=30), nullable=False),
        sa.Column("node_name", sa.String(length=80), nullable=False),
        sa.Column("instance_type", sa.String(length=64), nullable=False),
        sa.Column("region", sa.String(length=64), nullable=False),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("from_status", sa.String(length=24), nullable=True),
        sa.Column("to_status", sa.String(length=24), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["cluster_id"],
            ["clusters.id"],
            name=op.f("fk_engine_node_transitions_cluster_id_clusters"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["node_id"],
            ["engine_nodes.id"],
            name=op.f("fk_engine_node_transitions_node_id_engine_nodes"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_engine_node_transitions")),
    )
    with op.batch_alter_table("engine_node_transitions", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_engine_node_transitions_at"), ["at"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_engine_node_transitions_cluster_id"), ["cluster_id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_engine_node_transitions_node_id"), ["node_id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_engine_node_transitions_project_id"), ["project_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("engine_node_transitions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_engine_node_transitions_project_id"))
        batch_op.drop_index(batch_op.f("ix_engine_node_transitions_node_id"))
        batch_op.drop_index(batch_op.f("ix_engine_node_transitions_cluster_id"))
        batch_op.drop_index(batch_op.f("ix_engine_node_transitions_at"))

    op.drop_table("engine_node_transitions")
    with op.batch_alter_table("engine_work", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_engine_work_due_at"))

    op.drop_table("engine_work")
    with op.batch_alter_table("engine_steps", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_engine_steps_cluster_id"))

    op.drop_table("engine_steps")
    with op.batch_alter_table("engine_phase_history", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_engine_phase_history_cluster_id"))

    op.drop_table("engine_phase_history")
    with op.batch_alter_table("engine_nodes", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_engine_nodes_cluster_id"))

    op.drop_table("engine_nodes")
    op.drop_table("engine_clusters")
    with op.batch_alter_table("engine_allocations", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_engine_allocations_node_id"))
        batch_op.drop_index("ix_engine_allocations_kind_pool")
        batch_op.drop_index(batch_op.f("ix_engine_allocations_cluster_id"))

    op.drop_table("engine_allocations")
    op.drop_table("sim_operations")
    op.drop_table("engine_workers")
    op.drop_table("engine_locks")
