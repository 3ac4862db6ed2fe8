"""Secrets at rest: seal the Kubernetes admin tokens stored in plaintext (AES-256-GCM, see
backend.store.secrets). The column keeps its type: a sealed token fits in its 128 characters.

Revision ID: 0006_secrets_at_rest
Revises: 0005_volume_history
"""

import sqlalchemy as sa
from alembic import op

from backend.store.secrets import is_sealed, keyring_of

revision = "0006_secrets_at_rest"
down_revision = "0005_volume_history"
branch_labels = None
depends_on = None

_clusters = sa.table(
    "engine_clusters", sa.column("cluster_id", sa.String), sa.column("kube_admin_token", sa.String)
)


def _tokens(connection: sa.Connection) -> list[tuple[str, str]]:
    query = sa.select(_clusters.c.cluster_id, _clusters.c.kube_admin_token).where(
        _clusters.c.kube_admin_token.is_not(None)
    )
    return [(row[0], row[1]) for row in connection.execute(query)]


def _store(connection: sa.Connection, cluster_id: str, value: str) -> None:
    connection.execute(
        sa.update(_clusters).where(_clusters.c.cluster_id == cluster_id).values(kube_admin_token=value)
    )


def upgrade() -> None:
    connection = op.get_bind()
    plaintext = [(cluster_id, token) for cluster_id, token in _tokens(connection) if not is_sealed(token)]
    if plaintext:  # the key (or its file) is only needed when there is something to seal
        keys = keyring_of(connection.dialect)
        for cluster_id, token in plaintext:
            _store(connection, cluster_id, keys.seal(token))


def downgrade() -> None:
    connection = op.get_bind()
    sealed = [(cluster_id, token) for cluster_id, token in _tokens(connection) if is_sealed(token)]
    if sealed:
        keys = keyring_of(connection.dialect)
        for cluster_id, token in sealed:
            _store(connection, cluster_id, keys.open(token))
