"""Who may do what: roles, the permissions each holds, and team scopes of API keys.

This is the one declaration of access rules. Every route names the permission it needs (see
`backend.api.deps.allowed`); the role matrix in docs/api.md is generated from the routes and this table.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum


class Permission(StrEnum):
    READ = "read"  # every GET
    OPERATE = "operate"  # day-2 changes: scale, attach/detach volumes, node actions, labels
    MANAGE = "manage"  # create, delete, and every other change; credentials, credits, the audit log


# `member` is kept for keys made before the viewer and operator roles: it is an alias of `viewer`
# (read-only, as it always was), so existing keys keep exactly their meaning.
ROLE_PERMISSIONS: Mapping[str, frozenset[Permission]] = {
    "viewer": frozenset({Permission.READ}),
    "member": frozenset({Permission.READ}),
    "operator": frozenset({Permission.READ, Permission.OPERATE}),
    "admin": frozenset(Permission),
}
ROLES = tuple(ROLE_PERMISSIONS)

# The cluster fields an operator may change with PATCH; any other field needs `manage`.
OPERATOR_CLUSTER_FIELDS = frozenset({"node_count", "remove_node_names", "labels", "volume_ids"})


def allows(role: str, permission: Permission) -> bool:
    """Whether `role` holds `permission` (unknown roles hold nothing)."""
    return permission in ROLE_PERMISSIONS.get(role, frozenset())


def roles_with(permission: Permission) -> list[str]:
    """The roles holding `permission`, in declaration order."""
    return [role for role in ROLES if allows(role, permission)]


def fields_needing_manage(fields: Iterable[str]) -> list[str]:
    """The cluster PATCH fields an operator may not change, sorted."""
    return sorted(set(fields) - OPERATOR_CLUSTER_FIELDS)


# A scope is one label, `key=value`, with the label rules of cluster labels.
_SCOPE_KEY = re.compile(r"^[a-z0-9]([a-z0-9._/-]{0,61}[a-z0-9])?$")
_SCOPE_VALUE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")


@dataclass(frozen=True)
class Scope:
    """An API key's team scope: it sees and touches only resources labelled `key=value`."""

    key: str
    value: str

    @classmethod
    def parse(cls, text: str) -> Scope:
        """`team=nlp` -> Scope; ValueError with the rule broken otherwise."""
        key, sep, value = text.partition("=")
        if not sep or not _SCOPE_KEY.match(key) or not _SCOPE_VALUE.match(value):
            raise ValueError(
                f"scope {text[:80]!r} must be LABEL=VALUE, e.g. team=nlp (a label key of lower-case letters, "
                "digits and . _ / -; a value of letters, digits and . _ -, at most 63 characters each)"
            )
        return cls(key, value)

    def __str__(self) -> str:
        return f"{self.key}={self.value}"

    def matches(self, labels: Mapping[str, object] | None) -> bool:
        """Whether a resource with `labels` is within this scope."""
        return (labels or {}).get(self.key) == self.value

    def as_labels(self) -> dict[str, str]:
        return {self.key: self.value}
