"""Security groups: per project, ingress and egress rule lists (JSON) and the default group's flag; the
groups a cluster names, in order. Existing clusters name none, so they get the project's default group
(SSH in from anywhere, all out: what they had) once the engine creates it.

Revision ID: 0014_security_groups
Revises: 0012_allocation_counters
"""

import sqlalchemy as sa
from alembic import op

revision = "0014_security_groups"
down_revision = "0013_reserved_ips"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "security_groups",
        sa.Column("id", sa.String(length=30), nullable=False),
        sa.Column("project_id", sa.String(length=30), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("description", sa.String(length=256), nullable=True),
        sa.Column("ingress", sa.JSON(), nullable=False),
        sa.Column("egress", sa.JSON(), nullable=False),
        sa.Column("is_default", sa.Boolean(), nullable=False),
        sa.Column("labels", sa.JSON(), server_default="{}", nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"],
                                name=op.f("fk_security_groups_project_id_projects"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_security_groups")),
    )
    op.create_index("ix_security_groups_project_id_id", "security_groups", ["project_id", "id"])
    op.create_table(
        "cluster_security_groups",
        sa.Column("cluster_id", sa.String(length=30), nullable=False),
        sa.Column("security_group_id", sa.String(length=30), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["cluster_id"], ["clusters.id"], ondelete="CASCADE",
                                name=op.f("fk_cluster_security_groups_cluster_id_clusters")),
        sa.ForeignKeyConstraint(["security_group_id"], ["security_groups.id"],
                                name=op.f("fk_cluster_security_groups_security_group_id_security_groups")),
        sa.PrimaryKeyConstraint("cluster_id", "security_group_id", name=op.f("pk_cluster_security_groups")),
    )
    op.create_index(op.f("ix_cluster_security_groups_security_group_id"), "cluster_security_groups",
                    ["security_group_id"])


def downgrade() -> None:
    op.drop_table("cluster_security_groups")
    op.drop_table("security_groups")
