"""Write-only attributes (Terraform 1.11+): values the configuration sets that never reach plan or state.

Terraform refuses a planned or new state holding a value in a write-only attribute, and keeps none in
the prior state; the value exists only in the configuration. So the server
- nulls write-only values in the proposed state before planning (a configured secret is no change by
  itself: a companion attribute such as `*_wo_version` says when to send it again),
- hands create and update the planned values with the configuration's write-only values put back (the
  resource sends them like any other value), and nulls them again in every state it returns;
- refuses a configured write-only value from a Terraform that cannot keep it out of state (before 1.11
  the flag is unknown to Terraform, which would store the value like any other).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from provider.framework.diagnostics import Diagnostics
from provider.framework.resource import root
from provider.framework.schema import Schema


def without_write_only(schema: Schema, value: Any) -> Any:
    """`value` (an object of `schema`, or None) with every write-only attribute null."""
    if not schema.write_only or not isinstance(value, dict):
        return value
    if all(value.get(name) is None for name in schema.write_only):
        return value
    return {**value, **dict.fromkeys(schema.write_only)}


def with_write_only(schema: Schema, planned: Any, config: Any) -> Any:
    """The planned values with the configuration's write-only values, for create and update to send."""
    if not schema.write_only or not isinstance(planned, dict) or not isinstance(config, dict):
        return planned
    return {**planned, **{name: config.get(name) for name in schema.write_only}}


def refuse_without_support(
    schema: Schema, config: Any, diags: Diagnostics, alternatives: Mapping[str, str]
) -> None:
    """Errors for write-only values set in a configuration of a Terraform without write-only support.
    `alternatives` names, per write-only attribute, the attribute to use there instead."""
    if not isinstance(config, dict):
        return
    for name in schema.write_only:
        if config.get(name) is None:
            continue
        instead = alternatives.get(name)
        fix = f"set `{instead}` instead (kept in state, marked sensitive), or " if instead else ""
        diags.error(
            "Write-Only Attribute Not Supported",
            f"`{name}` is write-only, which needs Terraform 1.11 or later: this Terraform would store its "
            f"value in the state. To fix it, {fix}upgrade Terraform to 1.11 or later.",
            root(name),
        )
