"""Container images (issue 29). What a cluster declares: `clusters.container_images` (name -> OCI
reference; `{}` for every existing cluster), `clusters.registry_credentials` (registry -> username and
password, one sealed JSON document; NULL: none) and `clusters.registry_usernames` (registry -> username,
the part the API returns, readable without the secret key). What the engine imported:
`engine_clusters.images` (name -> reference, digest, size, state, reason), the import under way
(`images_token`, `images_seq`) and the declared set whose import failed (`images_failed`: not retried until
the declaration changes). `clusters.container` widens to 512 characters: a single-node cluster's container
may be an image reference, not only `base` or `pytorch`.

Revision ID: 0027_container_images
Revises: 0026_ssh_host_keys
"""

import sqlalchemy as sa
from alembic import op

revision = "0027_container_images"
down_revision = "0026_ssh_host_keys"
branch_labels = None
depends_on = None


# Plain ADD/DROP COLUMN (no batch mode): on SQLite a batch rebuild drops and re-creates `clusters`, and
# the ON DELETE CASCADE of the tables referring to it would empty them.
def upgrade() -> None:
    if op.get_context().dialect.name != "sqlite":  # SQLite does not enforce VARCHAR lengths
        op.alter_column("clusters", "container", type_=sa.String(length=512), existing_nullable=True)
    op.add_column("clusters", sa.Column("container_images", sa.JSON(), nullable=False, server_default="{}"))
    op.add_column("clusters", sa.Column("registry_credentials", sa.Text(), nullable=True))
    op.add_column("clusters", sa.Column("registry_usernames", sa.JSON(), nullable=False, server_default="{}"))
    op.add_column("engine_clusters", sa.Column("images", sa.JSON(), nullable=False, server_default="{}"))
    op.add_column("engine_clusters", sa.Column("images_token", sa.String(length=200), nullable=True))
    op.add_column("engine_clusters",
                  sa.Column("images_seq", sa.Integer(), nullable=False, server_default="0"))
    op.add_column("engine_clusters", sa.Column("images_failed", sa.JSON(), nullable=True))


def downgrade() -> None:
    for column in ("images_failed", "images_seq", "images_token", "images"):
        op.drop_column("engine_clusters", column)
    for column in ("registry_usernames", "registry_credentials", "container_images"):
        op.drop_column("clusters", column)
    # `clusters.container` stays 512 wide: narrowing it would cut the references stored since.
