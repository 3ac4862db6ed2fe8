"""Host pool use cases: register a project's own servers, change them in place, ask for a new check, delete.

A write only records what the user declared and marks the hosts to check (`probe_due_at`); the checks run
in the engine worker (`backend.provisioning.host_checks`), which writes each host's status and inventory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from backend.domain import host_pools as rules
from backend.domain.access import Scope
from backend.domain.clock import utcnow
from backend.domain.errors import Conflict, FieldError, validation_failed
from backend.domain.ids import new_id
from backend.domain.scoping import scoped_labels
from backend.store.engine_models import EngineCluster, EngineNode
from backend.store.host_pool_models import HostPool, HostPoolHost
from backend.store.models import Cluster
from backend.store.repository import check_if_match, get_owned, keyset_page, owned_select, touch

KIND = "host_pool"


@dataclass(frozen=True)
class Connection:
    """How to log in to the pool's hosts, as declared (None fields of an update: unchanged). The bastion is
    not here: a null `proxy_jump` in an update clears it."""

    ssh_user: str | None = None
    ssh_port: int | None = None
    ssh_private_key: str | None = None
    install_packages: bool | None = None


def _checked_hosts(hosts: Sequence[rules.HostEntry], pool_port: int) -> list[rules.HostEntry]:
    """The hosts with pinned keys normalised; a 422 naming every bad entry."""
    errors: list[FieldError] = []
    checked = []
    for index, host in enumerate(hosts):
        problem = rules.address_error(host.address, f"hosts[{index}].address")
        if problem is not None:
            errors.append(problem)
        key = host.host_key
        if key is not None:
            key, key_problem = rules.host_key_error(key, f"hosts[{index}].host_key")
            if key_problem is not None:
                errors.append(key_problem)
        checked.append(rules.HostEntry(host.address, host.port, key))
    errors += rules.duplicate_hosts(checked, pool_port)
    if errors:
        raise validation_failed(errors)
    return checked


def _checked_key(text: str) -> rules.PrivateKey:
    parsed = rules.parse_private_key(text)
    if isinstance(parsed, FieldError):
        raise validation_failed([parsed])
    return parsed


def _check_optional(proxy_jump: str | None, shared_storage_path: str | None) -> None:
    errors = []
    if proxy_jump is not None:
        jump = rules.parse_proxy_jump(proxy_jump)
        if isinstance(jump, FieldError):
            errors.append(jump)
    if shared_storage_path is not None:
        problem = rules.storage_path_error(shared_storage_path)
        if problem is not None:
            errors.append(problem)
    if errors:
        raise validation_failed(errors)


def _new_host(pool_id: str, position: int, host: rules.HostEntry, now: datetime) -> HostPoolHost:
    return HostPoolHost(
        pool_id=pool_id,
        position=position,
        address=host.address,
        port=host.port,
        host_key=host.host_key,
        status="pending",
        probe_due_at=now,
        probe_generation=1,
    )


def create_host_pool(
    *,
    session: Session,
    project_id: str,
    scope: Scope | None,
    name: str,
    region: str,
    connection: Connection,
    hosts: Sequence[rules.HostEntry],
    labels: Mapping[str, str],
    proxy_jump: str | None,
    shared_storage_path: str | None,
) -> HostPool:
    """Register a pool; its hosts are checked by the worker right after."""
    port = connection.ssh_port or 22
    _check_optional(proxy_jump, shared_storage_path)
    checked = _checked_hosts(hosts, port)
    key = _checked_key(connection.ssh_private_key or "")
    now = utcnow()
    pool = HostPool(
        id=new_id(KIND),
        project_id=project_id,
        name=name,
        region=region,
        ssh_user=connection.ssh_user or "root",
        ssh_port=port,
        ssh_private_key=key.openssh,
        ssh_public_key=key.public_key,
        ssh_key_fingerprint=key.fingerprint,
        proxy_jump=proxy_jump,
        shared_storage_path=shared_storage_path,
        install_packages=bool(connection.install_packages),
        labels=scoped_labels(labels, scope),
        generation=1,
        created_at=now,
        updated_at=now,
    )
    session.add(pool)
    session.flush()
    session.add_all(_new_host(pool.id, index, host, now) for index, host in enumerate(checked))
    session.flush()
    return pool


def get_host_pool(
    *, session: Session, project_id: str, pool_id: str, scope: Scope | None, for_update: bool = False
) -> HostPool:
    """One of the project's pools within the caller's scope; 404 otherwise."""
    return get_owned(
        session,
        HostPool,
        kind=KIND,
        project_id=project_id,
        row_id=pool_id,
        field="host_pool_id",
        for_update=for_update,
        scope=scope,
        write=for_update,
    )


def hosts_of(session: Session, pool_id: str) -> list[HostPoolHost]:
    """The pool's hosts in the order the user listed them."""
    return list(
        session.scalars(
            select(HostPoolHost).where(HostPoolHost.pool_id == pool_id).order_by(HostPoolHost.position)
        )
    )


def hosts_of_pools(session: Session, pool_ids: Sequence[str]) -> dict[str, list[HostPoolHost]]:
    """Hosts of several pools at once (a list page): one query."""
    found: dict[str, list[HostPoolHost]] = {pool_id: [] for pool_id in pool_ids}
    if pool_ids:
        rows = session.scalars(
            select(HostPoolHost)
            .where(HostPoolHost.pool_id.in_(list(pool_ids)))
            .order_by(HostPoolHost.pool_id, HostPoolHost.position)
        )
        for row in rows:
            found[row.pool_id].append(row)
    return found


def list_host_pools(
    *,
    session: Session,
    project_id: str,
    scope: Scope | None,
    after_id: str | None,
    limit: int,
    name: str | None = None,
) -> tuple[Sequence[HostPool], bool]:
    query = owned_select(HostPool, project_id=project_id, scope=scope)
    if name is not None:
        query = query.where(HostPool.name == name)
    return keyset_page(session, query, HostPool.id, after_id=after_id, limit=limit)


def _recheck(host: HostPoolHost, now: datetime) -> None:
    """Check the host again as soon as a worker can; a check under way does not write over this."""
    host.status, host.reason_code, host.reason = "pending", None, None
    host.probe_due_at = now
    host.probe_generation += 1


def _replace_hosts(session: Session, pool: HostPool, hosts: Sequence[rules.HostEntry], now: datetime) -> bool:
    """Make the pool's hosts `hosts`: kept ones keep their record (a new pinned key re-checks them), new ones
    are checked, the others are removed. Whether anything changed."""
    checked = _checked_hosts(hosts, pool.ssh_port)
    # Matched on the port in use: `port = 22` on a port-22 pool is the host listed without one.
    current = {(row.address.lower(), row.port or pool.ssh_port): row for row in hosts_of(session, pool.id)}
    changed = False
    for position, host in enumerate(checked):
        row = current.pop((host.address.lower(), host.port or pool.ssh_port), None)
        if row is None:
            session.add(_new_host(pool.id, position, host, now))
            changed = True
            continue
        if (row.position, row.port) != (position, host.port):
            row.position, row.port, changed = position, host.port, True
        if host.host_key is not None and host.host_key != row.host_key:
            row.host_key = host.host_key
            _recheck(row, now)
            changed = True
    held = [row for row in current.values() if row.node_id is not None]
    if held:
        clusters = _holders(session, [row.node_id for row in held if row.node_id is not None])
        raise Conflict(f"hosts {', '.join(row.address for row in held)} are nodes of cluster(s) "
                       f"{', '.join(clusters)}: scale those clusters down or delete them first",
                       field="hosts", code="host_in_use")
    for row in current.values():
        session.delete(row)
        changed = True
    return changed


def holders(session: Session, hosts: Sequence[HostPoolHost]) -> dict[str, tuple[str, str]]:
    """Node id -> (cluster id, node name) of the nodes these hosts are."""
    node_ids = [host.node_id for host in hosts if host.node_id is not None]
    if not node_ids:
        return {}
    rows = session.execute(select(EngineNode.id, EngineNode.cluster_id, EngineNode.name)
                           .where(EngineNode.id.in_(node_ids)))
    return {node_id: (cluster_id, name) for node_id, cluster_id, name in rows}


def _holders(session: Session, node_ids: Sequence[str]) -> list[str]:
    """The clusters whose nodes these are."""
    query = select(EngineNode.cluster_id).where(EngineNode.id.in_(list(node_ids)))
    return sorted(set(session.scalars(query)))


def _apply_connection(pool: HostPool, connection: Connection) -> bool:
    """Set what changed of how to connect; whether anything did."""
    changed = False
    if connection.ssh_private_key is not None:
        key = _checked_key(connection.ssh_private_key)
        if key.fingerprint != pool.ssh_key_fingerprint:
            pool.ssh_private_key, pool.ssh_public_key = key.openssh, key.public_key
            pool.ssh_key_fingerprint = key.fingerprint
            changed = True
    for field in ("ssh_user", "ssh_port", "install_packages"):
        value = getattr(connection, field)
        if value is not None and value != getattr(pool, field):
            setattr(pool, field, value)
            changed = True
    return changed


def update_host_pool(
    *,
    session: Session,
    project_id: str,
    scope: Scope | None,
    pool_id: str,
    if_match: str | None,
    fields: Mapping[str, object],
    connection: Connection,
    hosts: Sequence[rules.HostEntry] | None,
) -> HostPool:
    """Change a pool in place. `fields`: the plain fields the request set (name, labels, proxy_jump,
    shared_storage_path; a null proxy_jump or path clears it). A change of how to connect re-checks every
    host; a new host list keeps the hosts it keeps."""
    pool = get_host_pool(
        session=session, project_id=project_id, pool_id=pool_id, scope=scope, for_update=True
    )
    check_if_match(if_match, pool)
    proxy_jump = fields.get("proxy_jump", pool.proxy_jump)
    storage = fields.get("shared_storage_path", pool.shared_storage_path)
    assert proxy_jump is None or isinstance(proxy_jump, str)
    assert storage is None or isinstance(storage, str)
    _check_optional(proxy_jump, storage)
    now = utcnow()
    changed = False
    if "name" in fields and fields["name"] != pool.name:
        pool.name, changed = str(fields["name"]), True
    if "labels" in fields:
        labels = scoped_labels(fields["labels"], scope)  # type: ignore[arg-type]
        if labels != pool.labels:
            pool.labels, changed = labels, True
    if storage != pool.shared_storage_path:
        pool.shared_storage_path, changed = storage, True
    reconnect = _apply_connection(pool, connection)
    new_bastion = proxy_jump != pool.proxy_jump
    if new_bastion:
        pool.proxy_jump, reconnect = proxy_jump, True
    if hosts is not None and _replace_hosts(session, pool, hosts, now):
        changed = True
    if reconnect:
        session.flush()
        for host in hosts_of(session, pool.id):
            _recheck(host, now)
            if new_bastion:  # another bastion, or none: its key is recorded anew
                host.jump_known_hosts = None
    if changed or reconnect:
        touch(pool)
    session.flush()
    return pool


def request_check(*, session: Session, project_id: str, scope: Scope | None, pool_id: str) -> HostPool:
    """Check every host of the pool again now (`POST .../probe`)."""
    pool = get_host_pool(
        session=session, project_id=project_id, pool_id=pool_id, scope=scope, for_update=True
    )
    now = utcnow()
    for host in hosts_of(session, pool.id):
        _recheck(host, now)
    session.flush()
    return pool


def delete_host_pool(
    *, session: Session, project_id: str, scope: Scope | None, pool_id: str, if_match: str | None
) -> None:
    """Delete a pool and its hosts' records (the hosts themselves are the user's); 409 `host_pool_in_use`
    while a cluster runs on it."""
    pool = get_host_pool(
        session=session, project_id=project_id, pool_id=pool_id, scope=scope, for_update=True
    )
    check_if_match(if_match, pool)
    using = session.scalars(
        select(Cluster.id).join(EngineCluster, EngineCluster.cluster_id == Cluster.id)
        .where(Cluster.host_pool_id == pool.id, EngineCluster.finished.is_(False)).order_by(Cluster.id)).all()
    if using:
        raise Conflict(f"clusters {', '.join(using)} run on this pool's hosts: delete them first",
                       field="host_pool_id", code="host_pool_in_use")
    session.execute(delete(HostPoolHost).where(HostPoolHost.pool_id == pool.id))
    session.delete(pool)
