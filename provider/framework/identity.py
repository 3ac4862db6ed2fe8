"""Resource identity (protocol 6.9+, Terraform 1.12+): a small versioned object that names one remote
object for good (usually its API id), stored by Terraform next to the state.

Terraform uses it for `import { to = ..., identity = {...} }`, for `terraform query` results and to
notice an object replaced behind its back. A resource declares `identity_schema`; the framework then
returns the identity from create, read, import and plan, and upgrades stored identities through
`identity_upgraders()`. Terraform 1.11 never asks: the same provider serves both.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from provider.cty import STRING, CtyType, Object, is_unknown

Identity = dict[str, Any]

# Plain classes, not dataclasses: generating dataclass methods costs about 0.4 ms each at import, and
# this module loads on every provider launch.


class IdentityAttribute:
    """One identity value. `required_for_import`: an `import` block's `identity` must set it; otherwise
    it may be left out (the provider works it out)."""

    __slots__ = ("description", "required_for_import", "type")

    def __init__(
        self, type: CtyType = STRING, description: str = "", required_for_import: bool = True
    ) -> None:
        self.type = type
        self.description = description
        self.required_for_import = required_for_import


class IdentitySchema:
    """The identity of a resource type. Bump `version` whenever the attributes change and give an
    `IdentityUpgrader` for the old version (identities are stored by Terraform, like state)."""

    __slots__ = ("attributes", "cty_type", "version")

    def __init__(self, attributes: Mapping[str, IdentityAttribute], version: int = 0) -> None:
        self.attributes = dict(attributes)
        self.version = version
        self.cty_type = Object({name: attr.type for name, attr in self.attributes.items()})

    def of(self, values: Mapping[str, Any]) -> Identity | None:
        """The identity taken from same-named values (a state, a configuration): None unless every
        value is known and not null, since Terraform rejects a partial identity."""
        identity = {name: values.get(name) for name in self.attributes}
        if any(v is None or is_unknown(v) for v in identity.values()):
            return None
        return identity


class IdentityUpgrader:
    """Upgrades an identity stored at one older version straight to the current version: `upgrade`
    gets the parsed JSON Terraform stored and returns the current identity."""

    __slots__ = ("upgrade",)

    def __init__(self, upgrade: Callable[[Any], Identity]) -> None:
        self.upgrade = upgrade
