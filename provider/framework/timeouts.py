"""The `timeouts { create = "2h" }` block of long-running resources, and Go-style duration parsing."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from provider.framework.schema import SingleNestedBlock, StringAttribute
from provider.framework.validators import custom

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(text: str) -> dt.timedelta:
    """Parse a duration as Go's time.ParseDuration does: "90s", "1h30m", "1.5h", "-2m", "0"."""
    s = text.strip()
    sign = 1.0
    if s[:1] in "+-" and s:
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    if s == "0":
        return dt.timedelta(0)
    if not s:
        raise ValueError(f'invalid duration "{text}"')
    total = 0.0
    pos = 0
    while pos < len(s):
        m = _PART.match(s, pos)
        if m is None:
            raise ValueError(
                f'invalid duration "{text}": expected a number followed by a unit '
                '(ns, us, ms, s, m, h), for example "30m" or "1h30m"'
            )
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    return dt.timedelta(seconds=sign * total)


def _valid_duration(value: str) -> bool:
    try:
        return parse_duration(value) >= dt.timedelta(0)
    except ValueError:
        return False


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
