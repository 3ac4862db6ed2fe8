"""/v1/host-pools: a project's own servers, reached over SSH; each host's status, reason and inventory."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from sqlalchemy.orm import Session
from starlette.responses import Response

from backend.api.cluster_schemas import Labels
from backend.api.deps import Reader, Writer
from backend.api.listing import page_args, page_body
from backend.api.schemas import (
    DISPLAY_NAME_PATTERN,
    READ_ERRORS,
    WRITE_ERRORS,
    WRITE_ONLY,
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
from backend.domain import host_pools as rules
from backend.domain.etags import etag_for
from backend.services import host_pools
from backend.store.host_pool_models import HostPool, HostPoolHost

router = APIRouter(prefix="/v1/host-pools", tags=["host-pools"])
KIND = "host_pool"
PRIVATE_KEY_DOC = (
    "Write-only: the private key the backend logs in with (OpenSSH or PEM, no passphrase; ed25519, "
    "ECDSA or RSA >= 2048). Sealed at rest, never returned; `ssh_public_key` is its public half"
)


class HostIn(StrictModel):
    address: str = Field(min_length=1, max_length=253, description="IP address or DNS name")
    port: int | None = Field(default=None, ge=1, le=65535, description="SSH port; null: the pool's ssh_port")
    host_key: str | None = Field(
        default=None,
        max_length=16_384,
        description=(
            "The host's SSH key (`ssh-ed25519 AAAA...`, from /etc/ssh/ssh_host_*_key.pub) to require; "
            "null: the first key the host presents is recorded and required from then on"
        ),
    )

    def entry(self) -> rules.HostEntry:
        return rules.HostEntry(self.address, self.port, self.host_key)


Hosts = list[HostIn]
HOSTS_DOC = "The servers, in order; each (address, port) once"


class HostPoolCreate(StrictModel):
    name: str = Field(pattern=DISPLAY_NAME_PATTERN, max_length=128, description="Display name")
    region: str = Field(
        pattern=rules.REGION_PATTERN,
        description=(
            "Where the servers are: a name of yours (`on-prem-berlin`), not one of the catalog's regions"
        ),
    )
    ssh_user: str = Field(
        default="root",
        pattern=rules.SSH_USER_PATTERN,
        description="Login user: root, or a user with passwordless sudo",
    )
    ssh_port: int = Field(default=22, ge=1, le=65535)
    ssh_private_key: str = Field(
        min_length=1, max_length=16_384, description=PRIVATE_KEY_DOC, json_schema_extra=WRITE_ONLY
    )
    proxy_jump: str | None = Field(
        default=None,
        max_length=300,
        description=("A bastion `[user@]host[:port]` the hosts are reached through, with the same key"),
    )
    hosts: Hosts = Field(min_length=1, max_length=rules.MAX_HOSTS, description=HOSTS_DOC)
    labels: Labels = Field(default_factory=dict)
    shared_storage_path: str | None = Field(
        default=None,
        max_length=1024,
        description=(
            "A path mounted on every host (NFS, Lustre...): volumes of clusters on the pool are "
            "directories there"
        ),
    )
    install_packages: bool = Field(
        default=False,
        description=(
            "Install missing Slurm and munge packages (and slurmdbd and mariadb-server, for accounting) "
            "with the host's apt-get or dnf (false: report them missing)"
        ),
    )


class HostPoolUpdate(StrictModel):
    name: str | None = Field(default=None, pattern=DISPLAY_NAME_PATTERN, max_length=128)
    labels: Labels | None = None
    ssh_user: str | None = Field(default=None, pattern=rules.SSH_USER_PATTERN)
    ssh_port: int | None = Field(default=None, ge=1, le=65535)
    ssh_private_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=16_384,
        description=PRIVATE_KEY_DOC,
        json_schema_extra=WRITE_ONLY,
    )
    proxy_jump: str | None = Field(default=None, max_length=300, description="null clears it")
    hosts: Hosts | None = Field(
        default=None,
        min_length=1,
        max_length=rules.MAX_HOSTS,
        description=(
            "The whole new list: kept hosts keep their record, new ones are checked, the others are removed"
        ),
    )
    shared_storage_path: str | None = Field(default=None, max_length=1024, description="null clears it")
    install_packages: bool | None = None


class GpuOut(BaseModel):
    index: int
    name: str | None = None
    uuid: str | None = None
    memory_total_mib: int | None = None
    cores: str | None = Field(
        default=None,
        description="The cores of the GPU's NUMA node, as gres.conf's Cores= numbers them (null: unknown)",
    )


class InventoryOut(BaseModel):
    hostname: str
    os: str | None = None
    kernel: str | None = None
    arch: str | None = None
    cpu_count: int | None = None
    sockets: int | None = Field(default=None, description="CPU sockets (null: the layout was not read)")
    cores_per_socket: int | None = None
    threads_per_core: int | None = None
    memory_mib: int | None = None
    gpu_count: int = 0
    gpu_model: str | None = None
    gpus: list[GpuOut] = Field(default_factory=list)
    interconnect: Literal["infiniband", "efa", "none"] = "none"
    interconnect_devices: list[str] = Field(default_factory=list)
    init: Literal["systemd", "none"] = "none"
    packages: dict[str, bool] = Field(default_factory=dict, description="Program -> found on the host")
    mariadb_in_use: bool = Field(
        default=False,
        description="A MariaDB of the host's own runs (it holds the socket a cluster's would use)",
    )
    accounting: bool = Field(
        default=False,
        description="A cluster whose first node (its controller) is this host keeps Slurm accounting: "
        "slurmdbd and MariaDB installed, no MariaDB of the host's own running",
    )
    clock_skew_seconds: float | None = None


class HostOut(BaseModel):
    address: str
    port: int = Field(description="The port in use (the host's own, else the pool's)")
    status: Literal["pending", "ready", "degraded", "unreachable"]
    reason_code: str | None = Field(default=None, description=", ".join(rules.REASON_CODES))
    reason: str | None = Field(default=None, description="What is wrong and how to fix it")
    host_key: str | None = Field(
        default=None, description="The key the host must present (pinned or first seen)"
    )
    checked_at: datetime | None = None
    cluster_id: str | None = Field(default=None, description="The cluster whose node it is (null: free)")
    node: str | None = Field(default=None, description="That node's name")
    inventory: InventoryOut | None = None


class HostPoolOut(BaseModel):
    id: str
    name: str
    region: str
    ssh_user: str
    ssh_port: int
    proxy_jump: str | None
    labels: dict[str, str]
    shared_storage_path: str | None
    install_packages: bool
    ssh_public_key: str = Field(description="The key's public half: the line for the hosts' authorized_keys")
    ssh_key_fingerprint: str
    status: Literal["probing", "ready", "unavailable"] = Field(
        description=(
            "ready: a host is ready; probing: none is and some are still to be checked; unavailable: none is"
        )
    )
    ready_hosts: int
    free_hosts: int = Field(description="Ready hosts no cluster uses")
    hosts: list[HostOut]
    created_at: datetime
    updated_at: datetime


def _host_out(row: HostPoolHost, pool_port: int, holders: Mapping[str, tuple[str, str]]) -> HostOut:
    inventory = (
        InventoryOut.model_validate({**row.inventory, "accounting": rules.accounting_ready(row.inventory)})
        if row.inventory else None
    )
    cluster_id, node = holders.get(row.node_id or "", (None, None))
    return HostOut(
        address=row.address,
        port=row.port or pool_port,
        status=row.status,  # type: ignore[arg-type]
        reason_code=row.reason_code,
        reason=row.reason,
        host_key=row.host_key,
        checked_at=row.checked_at,
        cluster_id=cluster_id,
        node=node,
        inventory=inventory,
    )


def to_out(pool: HostPool, hosts: list[HostPoolHost], holders: Mapping[str, tuple[str, str]]) -> HostPoolOut:
    """`holders`: node id -> (cluster id, node name) of the nodes the hosts are (`host_pools.holders`)."""
    views = [_host_out(row, pool.ssh_port, holders) for row in hosts]
    ready = sum(1 for view in views if view.status == "ready")
    return HostPoolOut(
        id=pool.id,
        name=pool.name,
        region=pool.region,
        ssh_user=pool.ssh_user,
        ssh_port=pool.ssh_port,
        proxy_jump=pool.proxy_jump,
        labels=dict(pool.labels or {}),
        shared_storage_path=pool.shared_storage_path,
        install_packages=pool.install_packages,
        ssh_public_key=pool.ssh_public_key,
        ssh_key_fingerprint=pool.ssh_key_fingerprint,
        status=rules.pool_status([view.status for view in views]),  # type: ignore[arg-type]
        ready_hosts=ready,
        free_hosts=sum(1 for v in views if v.status == "ready" and v.cluster_id is None),
        hosts=views,
        created_at=pool.created_at,
        updated_at=pool.updated_at,
    )


def _outcome(session: Session, pool: HostPool, status: int, location: str | None = None) -> WriteOutcome:
    session.flush()
    hosts = host_pools.hosts_of(session, pool.id)
    out = to_out(pool, hosts, host_pools.holders(session, hosts))
    return WriteOutcome(KIND, pool.id, out, status, etag_for(pool.generation), location)


def _connection(body: HostPoolCreate | HostPoolUpdate) -> host_pools.Connection:
    return host_pools.Connection(
        ssh_user=body.ssh_user,
        ssh_port=body.ssh_port,
        ssh_private_key=body.ssh_private_key,
        install_packages=body.install_packages,
    )


@router.post("", status_code=201, response_model=HostPoolOut, responses=WRITE_ERRORS)
def create_host_pool(
    body: HostPoolCreate, request: Request, principal: Writer, idempotency_key: IdempotencyKey = None
) -> Response:
    """Register servers you own; every host is checked within seconds (status `pending` until then)."""

    def operation(session: Session) -> WriteOutcome:
        pool = host_pools.create_host_pool(
            session=session,
            project_id=principal.project_id,
            scope=principal.scope,
            name=body.name,
            region=body.region,
            connection=_connection(body),
            hosts=[host.entry() for host in body.hosts],
            labels=body.labels,
            proxy_jump=body.proxy_jump,
            shared_storage_path=body.shared_storage_path,
        )
        return _outcome(session, pool, 201, f"/v1/host-pools/{pool.id}")

    return run_write(request, principal, action="host_pool.create", operation=operation, body=body)


@router.get("", response_model=Page[HostPoolOut], responses=READ_ERRORS)
def list_host_pools(
    request: Request,
    principal: Reader,
    page_size: PageSize = None,
    page_token: PageToken = None,
    name: NameFilter = None,
) -> Response:
    """The project's pools, oldest first."""
    state = app_state(request)
    after_id, limit = page_args(state.settings, kind=KIND, page_size=page_size, page_token=page_token)
    with state.read_sessions() as session:
        rows, more = host_pools.list_host_pools(
            session=session,
            project_id=principal.project_id,
            scope=principal.scope,
            after_id=after_id,
            limit=limit,
            name=name,
        )
        hosts = host_pools.hosts_of_pools(session, [row.id for row in rows])
        holders = host_pools.holders(session, [host for pool_hosts in hosts.values() for host in pool_hosts])
        page = Page[HostPoolOut].model_validate(
            page_body(KIND, rows, more, lambda row: to_out(row, hosts[row.id], holders))
        )
    return Response(page.model_dump_json(), media_type="application/json")


@router.get("/{host_pool_id}", response_model=HostPoolOut, responses=READ_ERRORS)
def get_host_pool(host_pool_id: str, request: Request, principal: Reader) -> Response:
    """One pool with each host's last check."""
    with app_state(request).read_sessions() as session:
        pool = host_pools.get_host_pool(
            session=session, project_id=principal.project_id, pool_id=host_pool_id, scope=principal.scope
        )
        hosts = host_pools.hosts_of(session, pool.id)
        out = to_out(pool, hosts, host_pools.holders(session, hosts))
        return Response(
            out.model_dump_json(), media_type="application/json", headers={"ETag": etag_for(pool.generation)}
        )


@router.patch("/{host_pool_id}", response_model=HostPoolOut, responses=WRITE_ERRORS)
def update_host_pool(
    host_pool_id: str, body: HostPoolUpdate, request: Request, principal: Writer, if_match: IfMatch = None
) -> Response:
    """Change a pool in place: hosts added are checked, removed ones dropped; a change of how to connect
    (user, port, key, bastion, install_packages) checks every host again."""
    plain: dict[str, Any] = {
        name: getattr(body, name)
        for name in body.model_fields_set & {"name", "labels", "proxy_jump", "shared_storage_path"}
    }

    def operation(session: Session) -> WriteOutcome:
        pool = host_pools.update_host_pool(
            session=session,
            project_id=principal.project_id,
            scope=principal.scope,
            pool_id=host_pool_id,
            if_match=if_match,
            fields=plain,
            connection=_connection(body),
            hosts=None if body.hosts is None else [host.entry() for host in body.hosts],
        )
        return _outcome(session, pool, 200)

    return run_write(request, principal, action="host_pool.update", operation=operation, body=body)


@router.post("/{host_pool_id}/probe", status_code=202, response_model=HostPoolOut, responses=WRITE_ERRORS)
def probe_host_pool(host_pool_id: str, request: Request, principal: Writer) -> Response:
    """Check every host again now (they show `pending` until their check is done)."""

    def operation(session: Session) -> WriteOutcome:
        pool = host_pools.request_check(
            session=session, project_id=principal.project_id, scope=principal.scope, pool_id=host_pool_id
        )
        return _outcome(session, pool, 202)

    return run_write(request, principal, action="host_pool.probe", operation=operation)


@router.delete("/{host_pool_id}", status_code=204, responses=WRITE_ERRORS)
def delete_host_pool(
    host_pool_id: str, request: Request, principal: Writer, if_match: IfMatch = None
) -> Response:
    """Delete a pool (the servers are yours: nothing is left on them by a pool alone)."""

    def operation(session: Session) -> WriteOutcome:
        host_pools.delete_host_pool(
            session=session,
            project_id=principal.project_id,
            scope=principal.scope,
            pool_id=host_pool_id,
            if_match=if_match,
        )
        return WriteOutcome(KIND, host_pool_id, None, 204)

    return run_write(request, principal, action="host_pool.delete", operation=operation)
