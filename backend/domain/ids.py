"""Resource ids: a kind prefix plus a time-ordered, random body (sortable, so keyset pages follow age)."""

from __future__ import annotations

import re
import secrets
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower case
PREFIXES = {
    "project": "prj",
    "ssh_key": "ssh",
    "volume": "vol",
    "cluster": "cls",
    "api_key": "key",
    "audit_event": "aud",
    "budget": "bud",
    "security_group": "sgr",
    "reservation": "rsv",
    "reserved_ip": "rip",
    "host_pool": "hpl",
}
_BODY_LEN = 26
ID_PATTERN = re.compile(r"^[a-z]{3}_[0-9a-hjkmnp-tv-z]{26}$")


def _encode(value: int, length: int) -> str:
    chars = []
    for _ in range(length):
        value, rem = divmod(value, 32)
        chars.append(_ALPHABET[rem])
    return "".join(reversed(chars))


def new_id(kind: str) -> str:
    """A new id for `kind`: 48 bits of milliseconds then 80 random bits, in 26 base32 characters."""
    value = (int(time.time() * 1000) << 80) | secrets.randbits(80)
    return f"{PREFIXES[kind]}_{_encode(value, _BODY_LEN)}"


def is_id_of(kind: str, value: str) -> bool:
    """True when `value` is well-formed and carries the prefix of `kind`."""
    return bool(ID_PATTERN.match(value)) and value.startswith(PREFIXES[kind] + "_")
