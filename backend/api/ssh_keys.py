"""/v1/ssh-keys: register, list, get, rename and delete OpenSSH public keys."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from sqlalchemy.orm import Session
from starlette.responses import Response

from backend.api.deps import Reader, Writer
from backend.api.listing import page_args, page_body
from backend.api.schemas import (
    DISPLAY_NAME_PATTERN,
    READ_ERRORS,
    WRITE_ERRORS,
    IdempotencyKey,
    IfMatch,
    NameFilter,
    Page,
    PageSize,
    PageToken,
    StrictModel,
)
from backend.api.state import app_state
from backend.api.writes import WriteOutcome, run_write
from backend.domain.etags import etag_for
from backend.services import ssh_keys
from backend.store.models import SshKey

router = APIRouter(prefix="/v1/ssh-keys", tags=["ssh-keys"])
KIND = "ssh_key"


class SshKeyCreate(StrictModel):
    name: str = Field(pattern=DISPLAY_NAME_PATTERN, max_length=128, description="Display name")
    public_key: str = Field(
        min_length=1,
        max_length=16_384,
        description="OpenSSH public key line: ssh-ed25519, ecdsa-sha2-* or ssh-rsa >= 2048",
    )


class SshKeyUpdate(StrictModel):
    name: str | None = Field(
        default=None, pattern=DISPLAY_NAME_PATTERN, max_length=128, description="New display name"
    )


class SshKeyOut(BaseModel):
    id: str
    name: str
    public_key: str = Field(description="Exactly as registered")
    fingerprint: str = Field(description="SHA256 fingerprint as printed by `ssh-keygen -lf`")
    key_type: str
    created_at: datetime
    updated_at: datetime


def to_out(row: SshKey) -> SshKeyOut:
    return SshKeyOut(
        id=row.id,
        name=row.name,
        public_key=row.public_key,
        fingerprint=row.fingerprint,
        key_type=row.key_type,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _json(row: SshKey, status: int = 200) -> Response:
    return Response(
        to_out(row).model_dump_json(),
        status_code=status,
        media_type="application/json",
        headers={"ETag": etag_for(row.generation)},
    )


@router.post("", status_code=201, response_model=SshKeyOut, responses=WRITE_ERRORS)
def create_ssh_key(
    body: SshKeyCreate, request: Request, principal: Writer, idempotency_key: IdempotencyKey = None
) -> Response:
    """Register a public key (stored exactly as given); 409 if this project already has it."""

    def operation(session: Session) -> WriteOutcome:
        row = ssh_keys.create_ssh_key(
            session=session,
            project_id=principal.project_id,
            scope=principal.scope,
            name=body.name,
            public_key=body.public_key,
        )
        return WriteOutcome(
            KIND, row.id, to_out(row), 201, etag_for(row.generation), f"/v1/ssh-keys/{row.id}"
        )

    return run_write(request, principal, action="ssh_key.create", operation=operation, body=body)


@router.get("", response_model=Page[SshKeyOut], responses=READ_ERRORS)
def list_ssh_keys(
    request: Request,
    principal: Reader,
    page_size: PageSize = None,
    page_token: PageToken = None,
    name: NameFilter = None,
) -> Response:
    """The project's keys, oldest first."""
    state = app_state(request)
    after_id, limit = page_args(state.settings, kind=KIND, page_size=page_size, page_token=page_token)
    with state.read_sessions() as session:
        rows, more = ssh_keys.list_ssh_keys(
            session=session,
            project_id=principal.project_id,
            scope=principal.scope,
            after_id=after_id,
            limit=limit,
            name=name,
        )
        page = Page[SshKeyOut].model_validate(page_body(KIND, rows, more, to_out))
    return Response(page.model_dump_json(), media_type="application/json")


@router.get("/{ssh_key_id}", response_model=SshKeyOut, responses=READ_ERRORS)
def get_ssh_key(ssh_key_id: str, request: Request, principal: Reader) -> Response:
    """One key."""
    with app_state(request).read_sessions() as session:
        row = ssh_keys.get_ssh_key(
            session=session, project_id=principal.project_id, scope=principal.scope, ssh_key_id=ssh_key_id
        )
        return _json(row)


@router.patch("/{ssh_key_id}", response_model=SshKeyOut, responses=WRITE_ERRORS)
def update_ssh_key(
    ssh_key_id: str, body: SshKeyUpdate, request: Request, principal: Writer, if_match: IfMatch = None
) -> Response:
    """Rename a key (the key itself cannot change: register a new one)."""

    def operation(session: Session) -> WriteOutcome:
        row = ssh_keys.rename_ssh_key(
            session=session,
            project_id=principal.project_id,
            scope=principal.scope,
            ssh_key_id=ssh_key_id,
            name=body.name,
            if_match=if_match,
        )
        return WriteOutcome(KIND, row.id, to_out(row), 200, etag_for(row.generation))

    return run_write(request, principal, action="ssh_key.update", operation=operation, body=body)


@router.delete("/{ssh_key_id}", status_code=204, responses=WRITE_ERRORS)
def delete_ssh_key(
    ssh_key_id: str, request: Request, principal: Writer, if_match: IfMatch = None
) -> Response:
    """Delete a key that no live cluster uses."""

    def operation(session: Session) -> WriteOutcome:
        ssh_keys.delete_ssh_key(
            session=session,
            project_id=principal.project_id,
            scope=principal.scope,
            ssh_key_id=ssh_key_id,
            if_match=if_match,
        )
        return WriteOutcome(KIND, ssh_key_id, None, 204)

    return run_write(request, principal, action="ssh_key.delete", operation=operation)
