"""One duration grammar: a sequence of `<number><unit>` parts ("1h30m", "1d12h"), read with a unit table.

Go's `time.ParseDuration` (the `timeouts` block) and day-based lifetimes such as the gpucloud API's
`ttl` are the same grammar with different units, so both are parsed here and nowhere else.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass

_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([^\d.]+)")


@dataclass(frozen=True)
class DurationGrammar:
    """`units`: seconds per unit; `fractions`: "1.5h" allowed; `signed`: "-2m" and a bare "0" allowed
    (as Go's)."""

    units: Mapping[str, float]
    fractions: bool = False
    signed: bool = False

    @property
    def unit_names(self) -> str:
        return ", ".join(dict.fromkeys(self.units))

    def parse(self, text: str) -> dt.timedelta:
        """The duration `text` spells; ValueError naming the expected form otherwise."""
        s = text.strip()
        sign = 1.0
        if self.signed and s[:1] in ("+", "-") and s:
            sign, s = (-1.0 if s[0] == "-" else 1.0), s[1:]
        if self.signed and s == "0":
            return dt.timedelta(0)
        total, pos = 0.0, 0
        while pos < len(s):
            m = _PART.match(s, pos)
            if m is None or m.group(2) not in self.units or (not self.fractions and "." in m.group(1)):
                break
            total += float(m.group(1)) * self.units[m.group(2)]
            pos = m.end()
        if not s or pos < len(s):
            raise ValueError(
                f'invalid duration "{text}": expected numbers each followed by a unit '
                f'({self.unit_names}), for example "30m" or "1h30m"'
            )
        return dt.timedelta(seconds=sign * total)

    def valid(self, text: str) -> bool:
        try:
            return self.parse(text) >= dt.timedelta(0)
        except ValueError:
            return False


# Go's time.ParseDuration: "90s", "1h30m", "1.5h", "-2m", "0".
GO_DURATION = DurationGrammar(
    {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0},
    fractions=True,
    signed=True,
)
# Whole days, hours, minutes and seconds: "8h", "90m", "1d12h".
DAY_DURATION = DurationGrammar({"d": 86_400.0, "h": 3_600.0, "m": 60.0, "s": 1.0})


def parse_duration(text: str) -> dt.timedelta:
    """Parse a duration as Go's time.ParseDuration does: "90s", "1h30m", "1.5h", "-2m", "0"."""
    return GO_DURATION.parse(text)
