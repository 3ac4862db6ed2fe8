"""Generated cluster files (`/artifacts/{file}`) and the admin-only, audited `/credentials` (a lease on
the admin token: `expires_at`, extended by `POST .../credentials/renew`)."""

from __future__ import annotations

import datetime as dt
from typing import Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from sqlalchemy.orm import Session
from starlette.responses import Response

from backend.api.deps import Reader, Writer
from backend.api.schemas import READ_ERRORS, WRITE_ERRORS
from backend.api.state import app_state
from backend.api.writes import WriteOutcome, run_write
from backend.domain.clock import utcnow
from backend.domain.errors import NotFound
from backend.provisioning import credentials, views
from backend.services import clusters

router = APIRouter(prefix="/v1/clusters", tags=["clusters"])
# Credentials and their lease are for the caller alone: no cache keeps them.
_NO_STORE = {"Cache-Control": "no-store"}
ArtifactName = Literal[
    "slurm.conf", "gres.conf", "cgroup.conf", "topology.conf", "hosts", "kubernetes-nodes.json"
]


class CredentialsOut(BaseModel):
    kubeconfig: str
    api_endpoint: str
    expires_at: dt.datetime = Field(description="When the kubeconfig's token lapses unless renewed "
                                    "(POST .../credentials/renew); a read after that gets a new token")


class CredentialsRenewed(BaseModel):
    expires_at: dt.datetime = Field(description="The token's new expiry")


# The media type is the file's: text/plain for the Slurm files and hosts, JSON for kubernetes-nodes.json.
ARTIFACT_CONTENT = {
    "description": "The file; `kubernetes-nodes.json` is `application/json`, the others `text/plain`",
    "content": {
        "text/plain": {"schema": {"type": "string"}},
        "application/json": {"schema": {"type": "object"}},
    },
}


@router.get("/{cluster_id}/artifacts/{file}", responses={**READ_ERRORS, 200: ARTIFACT_CONTENT},
            response_class=Response)
def get_artifact(cluster_id: str, file: ArtifactName, request: Request, principal: Reader) -> Response:
    """A file generated from the cluster's current placement (regenerated on every membership change)."""
    state = app_state(request)
    with state.read_sessions() as session:
        clusters.get_cluster(
            session=session, project_id=principal.project_id, scope=principal.scope, cluster_id=cluster_id
        )
        content = views.artifact(session, cluster_id, file)
    if content is None:
        raise NotFound(f"cluster {cluster_id} has no {file} (wrong orchestrator, or not placed)",
                       field="file", code="artifact_not_available")
    return Response(content, media_type=views.ARTIFACTS[file])


@router.get("/{cluster_id}/credentials", response_model=CredentialsOut, responses=WRITE_ERRORS)
def get_credentials(cluster_id: str, request: Request, principal: Writer) -> Response:
    """The admin kubeconfig of a Kubernetes cluster (admin keys only; every read is audited). Its token
    is a lease: valid until `expires_at`, a fresh one once that has passed."""
    ttl = dt.timedelta(seconds=app_state(request).settings.credentials_ttl_seconds)

    def operation(session: Session) -> WriteOutcome:
        clusters.get_cluster(
            session=session, project_id=principal.project_id, scope=principal.scope, cluster_id=cluster_id
        )
        found = credentials.read_credentials(session, cluster_id, now=utcnow(), ttl=ttl)
        return WriteOutcome("cluster", cluster_id, CredentialsOut.model_validate(found), headers=_NO_STORE)

    return run_write(request, principal, action="cluster.credentials_read", operation=operation)


@router.post("/{cluster_id}/credentials/renew", response_model=CredentialsRenewed, responses=WRITE_ERRORS)
def renew_credentials(cluster_id: str, request: Request, principal: Writer) -> Response:
    """Extend the admin token's lease (admin keys only; audited); 409 `credentials_expired` once it
    has lapsed (read the credentials again)."""
    ttl = dt.timedelta(seconds=app_state(request).settings.credentials_ttl_seconds)

    def operation(session: Session) -> WriteOutcome:
        clusters.get_cluster(
            session=session, project_id=principal.project_id, scope=principal.scope, cluster_id=cluster_id
        )
        expires_at = credentials.renew_credentials(session, cluster_id, now=utcnow(), ttl=ttl)
        body = CredentialsRenewed(expires_at=expires_at)
        return WriteOutcome("cluster", cluster_id, body, headers=_NO_STORE)

    return run_write(request, principal, action="cluster.credentials_renewed", operation=operation)
