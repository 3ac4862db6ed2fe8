"""A cluster's time to live: `ttl` durations such as "8h" or "1d12h", `expires_at`, idle teardown.

Pure rules shared by the API (validation, expires_at from ttl) and the engine (when a cluster is due).
"""

from __future__ import annotations

import datetime as dt
import re

TTL_PATTERN = r"^([0-9]{1,6}[dhms])+$"
TTL_MIN = dt.timedelta(minutes=1)
TTL_MAX = dt.timedelta(days=365)
TTL_DOC = (
    "How long the cluster lives from its creation, as a duration of days, hours, minutes and seconds "
    '("8h", "90m", "1d12h"; 1 minute to 365 days); the cluster is deleted at created_at + ttl'
)
IDLE_MIN_MINUTES, IDLE_MAX_MINUTES = 1, 43_200
_UNITS = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}
_PART = re.compile(r"([0-9]+)([dhms])")


def parse_ttl(text: str) -> dt.timedelta:
    """The duration a ttl stands for; ValueError (with the rule) when it is malformed or out of range."""
    if not re.fullmatch(TTL_PATTERN, text):
        raise ValueError(f'ttl {text!r} is not a duration such as "8h", "90m" or "1d12h"')
    seconds = sum(int(number) * _UNITS[unit] for number, unit in _PART.findall(text))
    value = dt.timedelta(seconds=seconds)
    if not TTL_MIN <= value <= TTL_MAX:
        raise ValueError(f"ttl {text!r} must be between 1 minute and 365 days")
    return value
