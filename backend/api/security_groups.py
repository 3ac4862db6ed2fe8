"""/v1/security-groups: firewall rules for clusters' nodes (create, list, get, update, delete when unused)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field, StringConstraints
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
from backend.domain.security_groups import MAX_CIDRS, MAX_RULES
from backend.services import security_groups
from backend.store.models import SecurityGroup

router = APIRouter(prefix="/v1/security-groups", tags=["security-groups"])
KIND = "security_group"
Port = Annotated[int, Field(ge=1, le=65535)]
Cidr = Annotated[str, StringConstraints(min_length=1, max_length=49, pattern=r"^[0-9a-fA-F.:]+/[0-9]{1,3}$")]
RuleText = Annotated[str, StringConstraints(max_length=256, pattern=r"^[^\x00-\x1f\x7f]*$")]
INTRA_CLUSTER_DOC = (
    "Traffic between the nodes of a cluster (Slurm, NCCL, the jumphost to its workers) is always allowed, "
    "whatever the rules say"
)


class SecurityRule(StrictModel):
    protocol: Literal["tcp", "udp", "icmp", "all"] = Field(description="tcp, udp, icmp or all")
    from_port: Port | None = Field(default=None, description="First port (tcp/udp only; required there)")
    to_port: Port | None = Field(default=None, description="Last port of a range (default: from_port)")
    cidr_blocks: list[Cidr] = Field(
        min_length=1, max_length=MAX_CIDRS, description="Source (ingress) or destination (egress) networks"
    )
    description: RuleText | None = Field(default=None, description="What the rule is for")


Rules = Annotated[list[SecurityRule], Field(max_length=MAX_RULES)]


class SecurityGroupCreate(StrictModel):
    name: str = Field(pattern=DISPLAY_NAME_PATTERN, max_length=128, description="Display name")
    description: RuleText | None = Field(default=None, description="What the group is for")
    ingress: Rules = Field(default_factory=list, description="Allowed inbound traffic. " + INTRA_CLUSTER_DOC)
    egress: Rules = Field(default_factory=list, description="Allowed outbound traffic. " + INTRA_CLUSTER_DOC)


class SecurityGroupUpdate(StrictModel):
    name: str | None = Field(default=None, pattern=DISPLAY_NAME_PATTERN, max_length=128)
    description: RuleText | None = None
    ingress: Rules | None = Field(default=None, description="The new inbound rules (the whole list)")
    egress: Rules | None = Field(default=None, description="The new outbound rules (the whole list)")


class SecurityRuleOut(BaseModel):
    protocol: str
    from_port: int | None
    to_port: int | None
    cidr_blocks: list[str]
    description: str | None


class SecurityGroupOut(BaseModel):
    id: str
    name: str
    description: str | None
    ingress: list[SecurityRuleOut]
    egress: list[SecurityRuleOut]
    is_default: bool = Field(description="The project's default group, used by clusters that name none")
    cluster_ids: list[str] = Field(description="Live clusters whose nodes enforce the group")
    created_at: datetime
    updated_at: datetime


def to_out(row: SecurityGroup, cluster_ids: list[str]) -> SecurityGroupOut:
    return SecurityGroupOut(
        id=row.id,
        name=row.name,
        description=row.description,
        ingress=[SecurityRuleOut.model_validate(rule) for rule in row.ingress],
        egress=[SecurityRuleOut.model_validate(rule) for rule in row.egress],
        is_default=row.is_default,
        cluster_ids=cluster_ids,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _out(session: Session, row: SecurityGroup) -> SecurityGroupOut:
    return to_out(row, security_groups.cluster_ids_using(session=session, groups=[row])[row.id])


def _rules(rules: list[SecurityRule] | None) -> list[dict[str, object]] | None:
    return None if rules is None else [rule.model_dump() for rule in rules]


@router.post("", status_code=201, response_model=SecurityGroupOut, responses=WRITE_ERRORS)
def create_security_group(
    body: SecurityGroupCreate, request: Request, principal: Writer, idempotency_key: IdempotencyKey = None
) -> Response:
    """Create a security group; attach it with a cluster's security_group_ids."""

    def operation(session: Session) -> WriteOutcome:
        row = security_groups.create_security_group(
            session=session,
            project_id=principal.project_id,
            scope=principal.scope,
            name=body.name,
            description=body.description,
            ingress=_rules(body.ingress) or [],
            egress=_rules(body.egress) or [],
        )
        return WriteOutcome(
            KIND, row.id, to_out(row, []), 201, etag_for(row.generation), f"/v1/security-groups/{row.id}"
        )

    return run_write(request, principal, action="security_group.create", operation=operation, body=body)


@router.get("", response_model=Page[SecurityGroupOut], responses=READ_ERRORS)
def list_security_groups(
    request: Request,
    principal: Reader,
    page_size: PageSize = None,
    page_token: PageToken = None,
    name: NameFilter = None,
) -> Response:
    """The project's security groups (the default one once a cluster needed it), oldest first."""
    state = app_state(request)
    after_id, limit = page_args(state.settings, kind=KIND, page_size=page_size, page_token=page_token)
    with state.read_sessions() as session:
        rows, more = security_groups.list_security_groups(
            session=session,
            project_id=principal.project_id,
            scope=principal.scope,
            after_id=after_id,
            limit=limit,
            name=name,
        )
        users = security_groups.cluster_ids_using(session=session, groups=list(rows))
        page = Page[SecurityGroupOut].model_validate(
            page_body(KIND, rows, more, lambda r: to_out(r, users[r.id]))
        )
    return Response(page.model_dump_json(), media_type="application/json")


@router.get("/{security_group_id}", response_model=SecurityGroupOut, responses=READ_ERRORS)
def get_security_group(security_group_id: str, request: Request, principal: Reader) -> Response:
    """One security group."""
    with app_state(request).read_sessions() as session:
        row = security_groups.get_security_group(
            session=session,
            project_id=principal.project_id,
            scope=principal.scope,
            security_group_id=security_group_id,
        )
        body = _out(session, row)
    return Response(
        body.model_dump_json(), media_type="application/json", headers={"ETag": etag_for(row.generation)}
    )


@router.patch("/{security_group_id}", response_model=SecurityGroupOut, responses=WRITE_ERRORS)
def update_security_group(
    security_group_id: str,
    body: SecurityGroupUpdate,
    request: Request,
    principal: Writer,
    if_match: IfMatch = None,
) -> Response:
    """Rename, describe or replace rule lists; the nodes of clusters using the group follow in place.
    The project's default group is every team's: only a key without a team scope changes it (403)."""

    def operation(session: Session) -> WriteOutcome:
        changes = body.model_dump(exclude_unset=True)
        for direction in ("ingress", "egress"):
            if direction in changes:
                changes[direction] = _rules(getattr(body, direction))
        row = security_groups.update_security_group(
            session=session,
            project_id=principal.project_id,
            scope=principal.scope,
            security_group_id=security_group_id,
            changes=changes,
            if_match=if_match,
        )
        return WriteOutcome(KIND, row.id, _out(session, row), 200, etag_for(row.generation))

    return run_write(request, principal, action="security_group.update", operation=operation, body=body)


@router.delete("/{security_group_id}", status_code=204, responses=WRITE_ERRORS)
def delete_security_group(
    security_group_id: str, request: Request, principal: Writer, if_match: IfMatch = None
) -> Response:
    """Delete a security group (409 naming the clusters while any uses it; the default group only with a
    key without a team scope, 403 otherwise)."""

    def operation(session: Session) -> WriteOutcome:
        security_groups.delete_security_group(
            session=session,
            project_id=principal.project_id,
            scope=principal.scope,
            security_group_id=security_group_id,
            if_match=if_match,
        )
        return WriteOutcome(KIND, security_group_id, None, 204)

    return run_write(request, principal, action="security_group.delete", operation=operation)
