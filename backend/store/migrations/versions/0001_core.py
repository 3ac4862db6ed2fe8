"""Core tables: projects, API keys, SSH keys, volumes, clusters, idempotency, rate limits, audit.

Revision ID: 0001_core
Revises: (none)
"""

import sqlalchemy as sa
from alembic import op

revision = "0001_core"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "projects",
        sa.Column("id", sa.String(length=30), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_projects")),
        sa.UniqueConstraint("name", name=op.f("uq_projects_name")),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(length=30), nullable=False),
        sa.Column("project_id", sa.String(length=30), nullable=False),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["project_id"], ["projects.id"], name=op.f("fk_api_keys_project_id_projects"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("prefix", name=op.f("uq_api_keys_prefix")),
    )
    op.create_table(
        "audit_events",
        sa.Column("id", sa.String(length=30), nullable=False),
        sa.Column("project_id", sa.String(length=30), nullable=False),
        sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(length=32), nullable=False),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("resource_type", sa.String(length=32), nullable=False),
        sa.Column("resource_id", sa.String(length=64), nullable=True),
        sa.Column("request_id", sa.String(length=64), nullable=True),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name=op.f("fk_audit_events_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_events")),
    )
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.create_index("ix_audit_events_project_id_id", ["project_id", "id"], unique=False)

    op.create_table(
        "clusters",
        sa.Column("id", sa.String(length=30), nullable=False),
        sa.Column("project_id", sa.String(length=30), nullable=False),
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("region", sa.String(length=64), nullable=False),
        sa.Column("instance_type", sa.String(length=64), nullable=False),
        sa.Column("node_count", sa.Integer(), nullable=False),
        sa.Column("orchestrator", sa.String(length=16), nullable=False),
        sa.Column("interconnect", sa.String(length=16), nullable=False),
        sa.Column("container", sa.String(length=16), nullable=True),
        sa.Column("billing_type", sa.String(length=16), nullable=False),
        sa.Column("billing_duration_days", sa.Integer(), nullable=True),
        sa.Column("billing_on_expiry", sa.String(length=32), nullable=True),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("deletion_protection", sa.Boolean(), nullable=False),
        sa.Column("max_hourly_cost_micros", sa.BigInteger(), nullable=True),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("phase", sa.String(length=64), nullable=True),
        sa.Column("status_reason", sa.Text(), nullable=True),
        sa.Column("deletion_requested_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"], ["projects.id"], name=op.f("fk_clusters_project_id_projects"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_clusters")),
    )
    with op.batch_alter_table("clusters", schema=None) as batch_op:
        batch_op.create_index("ix_clusters_project_id_id", ["project_id", "id"], unique=False)

    op.create_table(
        "idempotency_records",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("project_id", sa.String(length=30), nullable=False),
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("request_fingerprint", sa.String(length=64), nullable=False),
        sa.Column("response_status", sa.Integer(), nullable=False),
        sa.Column("response_body", sa.Text(), nullable=False),
        sa.Column("response_headers", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name=op.f("fk_idempotency_records_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_idempotency_records")),
        sa.UniqueConstraint("project_id", "key", name="uq_idempotency_records_project_key"),
    )
    with op.batch_alter_table("idempotency_records", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_idempotency_records_expires_at"), ["expires_at"], unique=False)

    op.create_table(
        "ssh_keys",
        sa.Column("id", sa.String(length=30), nullable=False),
        sa.Column("project_id", sa.String(length=30), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("public_key", sa.Text(), nullable=False),
        sa.Column("fingerprint", sa.String(length=80), nullable=False),
        sa.Column("key_type", sa.String(length=40), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"], ["projects.id"], name=op.f("fk_ssh_keys_project_id_projects"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ssh_keys")),
        sa.UniqueConstraint("project_id", "fingerprint", name="uq_ssh_keys_project_fingerprint"),
    )
    with op.batch_alter_table("ssh_keys", schema=None) as batch_op:
        batch_op.create_index("ix_ssh_keys_project_id_id", ["project_id", "id"], unique=False)

    op.create_table(
        "volumes",
        sa.Column("id", sa.String(length=30), nullable=False),
        sa.Column("project_id", sa.String(length=30), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("region", sa.String(length=64), nullable=False),
        sa.Column("size_tib", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"], ["projects.id"], name=op.f("fk_volumes_project_id_projects"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_volumes")),
    )
    with op.batch_alter_table("volumes", schema=None) as batch_op:
        batch_op.create_index("ix_volumes_project_id_id", ["project_id", "id"], unique=False)

    op.create_table(
        "cluster_ssh_keys",
        sa.Column("cluster_id", sa.String(length=30), nullable=False),
        sa.Column("ssh_key_id", sa.String(length=30), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["cluster_id"],
            ["clusters.id"],
            name=op.f("fk_cluster_ssh_keys_cluster_id_clusters"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["ssh_key_id"], ["ssh_keys.id"], name=op.f("fk_cluster_ssh_keys_ssh_key_id_ssh_keys")
        ),
        sa.PrimaryKeyConstraint("cluster_id", "ssh_key_id", name=op.f("pk_cluster_ssh_keys")),
    )
    with op.batch_alter_table("cluster_ssh_keys", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_cluster_ssh_keys_ssh_key_id"), ["ssh_key_id"], unique=False)

    op.create_table(
        "cluster_volumes",
        sa.Column("cluster_id", sa.String(length=30), nullable=False),
        sa.Column("volume_id", sa.String(length=30), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["cluster_id"],
            ["clusters.id"],
            name=op.f("fk_cluster_volumes_cluster_id_clusters"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["volume_id"], ["volumes.id"], name=op.f("fk_cluster_volumes_volume_id_volumes")
        ),
        sa.PrimaryKeyConstraint("cluster_id", "volume_id", name=op.f("pk_cluster_volumes")),
    )
    with op.batch_alter_table("cluster_volumes", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_cluster_volumes_volume_id"), ["volume_id"], unique=False)

    op.create_table(
        "rate_limit_counters",
        sa.Column("api_key_id", sa.String(length=30), nullable=False),
        sa.Column("window_start", sa.Integer(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["api_key_id"],
            ["api_keys.id"],
            name=op.f("fk_rate_limit_counters_api_key_id_api_keys"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("api_key_id", "window_start", name=op.f("pk_rate_limit_counters")),
    )


def downgrade() -> None:
    op.drop_table("rate_limit_counters")
    with op.batch_alter_table("cluster_volumes", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_cluster_volumes_volume_id"))

    op.drop_table("cluster_volumes")
    with op.batch_alter_table("cluster_ssh_keys", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_cluster_ssh_keys_ssh_key_id"))

    op.drop_table("cluster_ssh_keys")
    with op.batch_alter_table("volumes", schema=None) as batch_op:
        batch_op.drop_index("ix_volumes_project_id_id")

    op.drop_table("volumes")
    with op.batch_alter_table("ssh_keys", schema=None) as batch_op:
        batch_op.drop_index("ix_ssh_keys_project_id_id")

    op.drop_table("ssh_keys")
    with op.batch_alter_table("idempotency_records", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_idempotency_records_expires_at"))

    op.drop_table("idempotency_records")
    with op.batch_alter_table("clusters", schema=None) as batch_op:
        batch_op.drop_index("ix_clusters_project_id_id")

    op.drop_table("clusters")
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.drop_index("ix_audit_events_project_id_id")

    op.drop_table("audit_events")
    op.drop_table("api_keys")
    op.drop_table("projects")
