"""SSH key use cases: register (validated, fingerprinted), list, get, rename, delete."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import bindparam, delete, select
from sqlalchemy.orm import Session

from backend.domain.access import Scope
from backend.domain.clock import utcnow
from backend.domain.errors import Conflict, validation_failed
from backend.domain.ids import new_id
from backend.domain.ssh_keys import ParsedSshKey, parse_public_key
from backend.store.db import execute_core
from backend.store.models import Cluster, ClusterSshKey, SshKey
from backend.store.repository import check_if_match, get_owned, in_scope, keyset_page, owned_select, touch

# The duplicate check of every registration, on the session's connection (no ORM entity to load).
_SAME_KEY = select(SshKey.id, SshKey.name, SshKey.labels).where(
    SshKey.project_id == bindparam("project_id"), SshKey.fingerprint == bindparam("fingerprint")
)


def create_ssh_key(
    *, session: Session, project_id: str, name: str, public_key: str, scope: Scope | None = None
) -> SshKey:
    """Register a public key, stored exactly as given, labelled with the caller's team scope; 409 if the
    project already has this key (the existing id only when the caller may see it)."""
    parsed = parse_public_key(public_key)
    if not isinstance(parsed, ParsedSshKey):
        raise validation_failed([parsed])
    existing = execute_core(
        session, _SAME_KEY, {"project_id": project_id, "fingerprint": parsed.fingerprint}
    ).one_or_none()
    if existing is not None and not in_scope(scope, existing.labels):
        # Fingerprints are unique per project; another team's key is not named to this caller.
        raise Conflict(
            "this key is already registered in the project by another team",
            field="public_key",
            code="duplicate_ssh_key",
        )
    if existing is not None:
        raise Conflict(
            f"this key is already registered as {existing.id} ({existing.name!r})",
            field="public_key",
            code="duplicate_ssh_key",
            extra={"existing_id": existing.id},
        )
    now = utcnow()
    row = SshKey(
        id=new_id("ssh_key"),
        project_id=project_id,
        name=name,
        public_key=public_key,
        fingerprint=parsed.fingerprint,
        key_type=parsed.key_type,
        labels=scope.as_labels() if scope else {},
        generation=1,
        created_at=now,
        updated_at=now,
    )
    session.add(row)
    session.flush()
    return row


def get_ssh_key(
    *,
    session: Session,
    project_id: str,
    ssh_key_id: str,
    for_update: bool = False,
    scope: Scope | None = None,
) -> SshKey:
    """One of the project's keys within the caller's scope; 404 otherwise."""
    return get_owned(
        session,
        SshKey,
        kind="ssh_key",
        project_id=project_id,
        row_id=ssh_key_id,
        field="ssh_key_id",
        for_update=for_update,
        scope=scope,
    )


def list_ssh_keys(
    *,
    session: Session,
    project_id: str,
    after_id: str | None,
    limit: int,
    name: str | None = None,
    scope: Scope | None = None,
) -> tuple[Sequence[SshKey], bool]:
    """A page of the project's keys within the scope, in creation order, optionally those named `name`."""
    query = owned_select(SshKey, project_id=project_id, scope=scope)
    if name is not None:
        query = query.where(SshKey.name == name)
    return keyset_page(session, query, SshKey.id, after_id=after_id, limit=limit)


def rename_ssh_key(
    *,
    session: Session,
    project_id: str,
    ssh_key_id: str,
    name: str | None,
    if_match: str | None,
    scope: Scope | None = None,
) -> SshKey:
    """Rename a key (the key material never changes)."""
    row = get_ssh_key(
        session=session, project_id=project_id, ssh_key_id=ssh_key_id, for_update=True, scope=scope
    )
    check_if_match(if_match, row)
    if name is not None and name != row.name:
        row.name = name
        touch(row)
    return row


def delete_ssh_key(
    *, session: Session, project_id: str, ssh_key_id: str, if_match: str | None, scope: Scope | None = None
) -> None:
    """Delete a key no live cluster uses (409 naming the clusters otherwise)."""
    row = get_ssh_key(
        session=session, project_id=project_id, ssh_key_id=ssh_key_id, for_update=True, scope=scope
    )
    check_if_match(if_match, row)
    users = session.scalars(
        select(Cluster.id)
        .join(ClusterSshKey, ClusterSshKey.cluster_id == Cluster.id)
        .where(ClusterSshKey.ssh_key_id == row.id, Cluster.deletion_requested_at.is_(None))
    ).all()
    if users:
        raise Conflict(
            f"the key is used by cluster(s) {', '.join(users)}; remove it from them first",
            field="ssh_key_id",
            code="ssh_key_in_use",
            extra={"cluster_ids": list(users)},
        )
    # Links from clusters already being deleted go with the key.
    session.execute(delete(ClusterSshKey).where(ClusterSshKey.ssh_key_id == row.id))
    session.delete(row)
