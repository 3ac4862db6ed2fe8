"""The admin token of a Kubernetes cluster as a lease: valid for `ttl`, renewed by its holders while
they use it (Terraform's ephemeral `gpucloud_cluster_credentials` renews it during a long apply), and
replaced by a fresh token on the first read after it lapsed.

The token is shared by every holder of the cluster's admin kubeconfig, so a renewal by one extends it
for all; a lapsed token is never extended (409 `credentials_expired`: read the credentials again).
"""

from __future__ import annotations

import datetime as dt
import secrets
from typing import Any

from sqlalchemy.orm import Session

from backend.domain.errors import Conflict, NotFound
from backend.provisioning import views
from backend.store.engine_models import EngineCluster


class CredentialsExpired(Conflict):
    code = "credentials_expired"


def _unavailable(cluster_id: str) -> NotFound:
    return NotFound(f"cluster {cluster_id} has no credentials (not Kubernetes, or not placed)",
                    field="cluster_id", code="credentials_not_available")


def _lapsed(state: EngineCluster, now: dt.datetime) -> bool:
    expires_at = state.kube_admin_token_expires_at
    return expires_at is None or expires_at <= now


def read_credentials(session: Session, cluster_id: str, *, now: dt.datetime, ttl: dt.timedelta
                     ) -> dict[str, Any]:
    """The admin kubeconfig, its API endpoint and when its token lapses (a fresh token if it had)."""
    state = session.get(EngineCluster, cluster_id, with_for_update=True)
    if state is None or views.cluster_credentials(session, cluster_id) is None:
        raise _unavailable(cluster_id)
    if _lapsed(state, now):
        state.kube_admin_token = secrets.token_urlsafe(32)
        state.kube_admin_token_expires_at = now + ttl
        session.flush()
    found = views.cluster_credentials(session, cluster_id)
    assert found is not None
    return {**found, "expires_at": state.kube_admin_token_expires_at}


def renew_credentials(session: Session, cluster_id: str, *, now: dt.datetime, ttl: dt.timedelta
                      ) -> dt.datetime:
    """Extend the admin token to `now + ttl`; 409 when it has already lapsed."""
    state = session.get(EngineCluster, cluster_id, with_for_update=True)
    if state is None or views.cluster_credentials(session, cluster_id) is None:
        raise _unavailable(cluster_id)
    if _lapsed(state, now):
        raise CredentialsExpired(f"the credentials of cluster {cluster_id} lapsed; read them again")
    state.kube_admin_token_expires_at = now + ttl
    return now + ttl
