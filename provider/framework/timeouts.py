"""The `timeouts { create = "2h" }` block of long-running resources (durations as Go spells them)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from provider.framework.durations import GO_DURATION, parse_duration
from provider.framework.schema import SingleNestedBlock, StringAttribute
from provider.framework.validators import custom

__all__ = ["parse_duration", "timeout", "timeouts_block"]


def _valid_duration(value: str) -> bool:
    return GO_DURATION.valid(value)


def timeouts_block(
    *,
    create: bool = False,
    read: bool = False,
    update: bool = False,
    delete: bool = False,
    defaults: dict[str, str] | None = None,
) -> SingleNestedBlock:
    """A `timeouts` block with a string attribute per chosen operation (documented with its default)."""
    defaults = defaults or {}
    attributes = {}
    for op, wanted in (("create", create), ("read", read), ("update", update), ("delete", delete)):
        if wanted:
            default = f" Default: `{defaults[op]}`." if op in defaults else ""
            attributes[op] = StringAttribute(
                optional=True,
                description=f'How long to wait for the {op} to finish, a duration such as "30m" or '
                f'"2h" (units s, m, h).{default}',
                validators=[custom('must be a duration such as "30m" or "1h30m"', _valid_duration)],
            )
    return SingleNestedBlock(attributes=attributes, description="Operation timeouts.")


def timeout(value: Any, operation: str, default: dt.timedelta) -> dt.timedelta:
    """The configured timeout for `operation` in a resource value that has a `timeouts` block."""
    block = value.get("timeouts") if isinstance(value, dict) else None
    text = block.get(operation) if isinstance(block, dict) else None
    if not isinstance(text, str):
        return default
    return parse_duration(text)
