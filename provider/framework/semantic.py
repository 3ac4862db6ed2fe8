"""Custom types with semantic equality, as terraform-plugin-framework's `...WithSemanticEquals`.

An attribute declared with `semantic=` keeps the value Terraform already holds whenever a new value
means the same thing in another spelling: "2026-12-01T08:00:00+00:00" for "2026-12-01T08:00:00Z", "90m"
for "1h30m", 100.0 for 100, a key line with a trailing newline. The server applies it to the results
of read, create and update (prior: the state read, or the plan applied), and the attribute's plan
modifier applies it to a configuration that changed only in spelling, so neither shows a diff.
Only top-level attributes carry semantic types.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any, Protocol

from provider.cty import is_unknown
from provider.framework.durations import DurationGrammar

if TYPE_CHECKING:
    from provider.framework.planmodifiers import PlanModification
    from provider.framework.schema import Schema


class SemanticType(Protocol):
    """What makes two known, non-null values of an attribute the same."""

    description: str

    def equal(self, prior: Any, new: Any) -> bool: ...


def parse_instant(value: Any) -> dt.datetime | None:
    """An RFC 3339 / ISO 8601 time as an aware datetime (a time without offset is UTC); None if not one."""
    if not isinstance(value, str):
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=dt.UTC)


def rfc3339_utc(value: Any) -> str:
    """A time as RFC 3339 in UTC ending in `Z`: one spelling whatever offset form it came in (a time
    without offset is UTC). Anything that is not a time is returned as text, unchanged."""
    parsed = parse_instant(value)
    if parsed is None:
        return value if isinstance(value, str) else str(value)
    return parsed.astimezone(dt.UTC).replace(tzinfo=None).isoformat() + "Z"


class Rfc3339Type:
    """Times equal when they are the same instant."""

    description = "The same instant in another offset or spelling is not a change."

    def equal(self, prior: Any, new: Any) -> bool:
        a, b = parse_instant(prior), parse_instant(new)
        return a is not None and a == b


class DurationType:
    """Durations equal when they are the same length ("90m" and "1h30m")."""

    def __init__(self, grammar: DurationGrammar) -> None:
        self.grammar = grammar
        self.description = "The same duration in other units (`90m` for `1h30m`) is not a change."

    def equal(self, prior: Any, new: Any) -> bool:
        try:
            return bool(self.grammar.parse(str(prior)) == self.grammar.parse(str(new)))
        except ValueError:
            return False


class NumberType:
    """Numbers (or decimal strings, such as money amounts) equal when they have the same value."""

    description = "The same number in another spelling (`100.0` for `100`) is not a change."

    def equal(self, prior: Any, new: Any) -> bool:
        if isinstance(prior, bool) or isinstance(new, bool):
            return False
        try:
            return Decimal(str(prior)) == Decimal(str(new))
        except (InvalidOperation, ValueError):
            return False


class NormalizedStringType:
    """Strings equal when one normalising function maps them to the same text."""

    def __init__(self, normalize: Callable[[str], str], description: str) -> None:
        self.normalize = normalize
        self.description = description

    def equal(self, prior: Any, new: Any) -> bool:
        if not isinstance(prior, str) or not isinstance(new, str):
            return False
        return self.normalize(prior) == self.normalize(new)


def collapse_whitespace(text: str) -> str:
    """Surrounding whitespace dropped and inner runs of blanks collapsed to one space."""
    return " ".join(text.split())


RFC3339 = Rfc3339Type()
NUMBER_VALUE = NumberType()


def _comparable(value: Any) -> bool:
    return value is not None and not is_unknown(value)


def keep_semantic_equals(schema: Schema, prior: Mapping[str, Any] | None, new: Any) -> Any:
    """`new` with each semantically typed attribute that means the same as in `prior` set back to the
    prior spelling (Terraform then sees no change). Other values, and a missing prior, pass through."""
    if not isinstance(new, dict) or not isinstance(prior, Mapping):
        return new
    kept = new
    for name, attribute in schema.attributes.items():
        semantic = attribute.semantic
        old, value = prior.get(name), new.get(name)
        if semantic is None or not (_comparable(old) and _comparable(value)) or old == value:
            continue
        if semantic.equal(old, value):
            kept = kept if kept is not new else dict(new)
            kept[name] = old
    return kept


class KeepPriorWhenSemanticallyEqual:
    """Plan modifier of an attribute with a semantic type: a configuration that differs from the state
    only in spelling plans the prior value (no diff, no replacement)."""

    def __init__(self, semantic: SemanticType) -> None:
        self.semantic = semantic
        self.description = semantic.description

    def modify(self, m: PlanModification) -> None:
        prior, planned = m.state_value, m.plan_value
        if m.creating or not (_comparable(prior) and _comparable(planned)) or prior == planned:
            return
        if self.semantic.equal(prior, planned):
            m.plan_value = prior
