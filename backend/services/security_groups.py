"""Security group use cases: create, list, get, update (nodes reconfigured in place), delete when unused,
and the project's default group (created when a cluster without groups first needs it)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from backend.domain.access import Scope
from backend.domain.clock import utcnow
from backend.domain.errors import Conflict, validation_failed
from backend.domain.ids import new_id
from backend.domain.security_groups import (
    DEFAULT_EGRESS,
    DEFAULT_GROUP_NAME,
    DEFAULT_INGRESS,
    rules_problems,
)
from backend.provisioning.engine import request_reconcile
from backend.store.models import Cluster, ClusterSecurityGroup, SecurityGroup
from backend.store.repository import check_if_match, get_owned, keyset_page, owned_select, touch

RULE_FIELDS = ("protocol", "from_port", "to_port", "cidr_blocks", "description")


def _stored(rules: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rules as stored and echoed: every field present, as written."""
    return [{name: rule.get(name) for name in RULE_FIELDS} for rule in rules]


def create_security_group(
    *,
    session: Session,
    project_id: str,
    name: str,
    description: str | None,
    ingress: Sequence[Mapping[str, Any]],
    egress: Sequence[Mapping[str, Any]],
    scope: Scope | None = None,
) -> SecurityGroup:
    """Create a group (422 naming the rule field at fault), labelled with the caller's team scope."""
    errors = rules_problems({"ingress": ingress, "egress": egress})
    if errors:
        raise validation_failed(errors)
    now = utcnow()
    row = SecurityGroup(
        id=new_id("security_group"), project_id=project_id, name=name, description=description,
        ingress=_stored(ingress), egress=_stored(egress), is_default=False,
        labels=scope.as_labels() if scope else {}, generation=1, created_at=now, updated_at=now,
    )
    session.add(row)
    session.flush()
    return row


def default_group(session: Session, project_id: str) -> SecurityGroup | None:
    """The project's default group, if created yet (the oldest, should two creates have raced)."""
    return session.scalars(
        select(SecurityGroup)
        .where(SecurityGroup.project_id == project_id, SecurityGroup.is_default.is_(True))
        .order_by(SecurityGroup.id)
        .limit(1)
    ).first()


def ensure_default_group(*, session: Session, project_id: str) -> SecurityGroup:
    """The project's default group (SSH in from anywhere, all out), created on first use."""
    found = default_group(session, project_id)
    if found is not None:
        return found
    now = utcnow()
    row = SecurityGroup(
        id=new_id("security_group"), project_id=project_id, name=DEFAULT_GROUP_NAME,
        description="Used by clusters that name no security group: SSH in from anywhere, all traffic out",
        ingress=_stored(DEFAULT_INGRESS), egress=_stored(DEFAULT_EGRESS), is_default=True, labels={},
        generation=1, created_at=now, updated_at=now,
    )
    session.add(row)
    session.flush()
    return row


def get_security_group(
    *,
    session: Session,
    project_id: str,
    security_group_id: str,
    scope: Scope | None,
    for_update: bool = False,
    write: bool = False,
) -> SecurityGroup:
    """One of the project's groups within the caller's scope (the default group is everyone's to read,
    only unscoped keys' to change: `write`); 404 otherwise."""
    return get_owned(
        session, SecurityGroup, kind="security_group", project_id=project_id, row_id=security_group_id,
        field="security_group_id", for_update=for_update, write=write, scope=scope,
    )


def list_security_groups(
    *,
    session: Session,
    project_id: str,
    after_id: str | None,
    limit: int,
    name: str | None = None,
    scope: Scope | None = None,
) -> tuple[Sequence[SecurityGroup], bool]:
    """A page of the project's groups within the scope (and the default group), oldest first."""
    query = owned_select(SecurityGroup, project_id=project_id, scope=scope)
    if name is not None:
        query = query.where(SecurityGroup.name == name)
    return keyset_page(session, query, SecurityGroup.id, after_id=after_id, limit=limit)


def cluster_ids_using(*, session: Session, groups: Sequence[SecurityGroup]) -> dict[str, list[str]]:
    """Group id -> ids of the live clusters whose nodes enforce it (the default group: those naming
    none), in id order."""
    out: dict[str, list[str]] = {group.id: [] for group in groups}
    if not groups:
        return out
    rows = session.execute(
        select(ClusterSecurityGroup.security_group_id, ClusterSecurityGroup.cluster_id)
        .join(Cluster, Cluster.id == ClusterSecurityGroup.cluster_id)
        .where(ClusterSecurityGroup.security_group_id.in_(list(out)), Cluster.deletion_requested_at.is_(None))
        .order_by(Cluster.id)
    ).all()
    for group_id, cluster_id in rows:
        out[group_id].append(cluster_id)
    for group in groups:
        if group.is_default:
            out[group.id] = list(session.scalars(
                select(Cluster.id)
                .where(Cluster.project_id == group.project_id, Cluster.deletion_requested_at.is_(None),
                       ~Cluster.security_group_links.any())
                .order_by(Cluster.id)
            ))
    return out


def update_security_group(
    *,
    session: Session,
    project_id: str,
    security_group_id: str,
    changes: Mapping[str, Any],
    if_match: str | None,
    scope: Scope | None = None,
) -> SecurityGroup:
    """Change the name, description or rules; new rules reach the nodes of every cluster using the group
    in place (each cluster is reconciled)."""
    row = get_security_group(
        session=session, project_id=project_id, security_group_id=security_group_id, for_update=True,
        write=True, scope=scope,
    )
    check_if_match(if_match, row)
    errors = rules_problems(changes)
    if errors:
        raise validation_failed(errors)
    changed, rules_changed = False, False
    for field in ("name", "description"):
        if field in changes and changes[field] != getattr(row, field):
            if field == "name" and changes[field] is None:
                continue
            setattr(row, field, changes[field])
            changed = True
    for direction in ("ingress", "egress"):
        if changes.get(direction) is not None and _stored(changes[direction]) != getattr(row, direction):
            setattr(row, direction, _stored(changes[direction]))
            changed = rules_changed = True
    if changed:
        touch(row)
        session.flush()
    if rules_changed:
        for cluster_id in cluster_ids_using(session=session, groups=[row])[row.id]:
            request_reconcile(session, cluster_id)
    return row


def delete_security_group(
    *,
    session: Session,
    project_id: str,
    security_group_id: str,
    if_match: str | None,
    scope: Scope | None = None,
) -> None:
    """Delete a group no live cluster uses (409 naming them otherwise)."""
    row = get_security_group(
        session=session, project_id=project_id, security_group_id=security_group_id, for_update=True,
        write=True, scope=scope,
    )
    check_if_match(if_match, row)
    users = cluster_ids_using(session=session, groups=[row])[row.id]
    if users:
        fix = ("give them security_group_ids of their own" if row.is_default
               else "remove it from their security_group_ids")
        raise Conflict(
            f"the security group is used by cluster(s) {', '.join(users)}; {fix} first",
            field="security_group_id",
            code="security_group_in_use",
            extra={"cluster_ids": users},
        )
    # Links from clusters already being deleted go with the group.
    session.execute(delete(ClusterSecurityGroup).where(ClusterSecurityGroup.security_group_id == row.id))
    session.delete(row)
