"""API key format: `gpc_` + 32 random base62 characters + a 6-character CRC32 checksum.

The prefix makes leaked keys easy to spot (secret scanners), the checksum lets us reject typos and
random strings without touching the database. Only a SHA-256 digest of the key is ever stored.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import zlib

KEY_PREFIX = "gpc_"
_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_RANDOM_LEN = 32
_CHECKSUM_LEN = 6
KEY_LENGTH = len(KEY_PREFIX) + _RANDOM_LEN + _CHECKSUM_LEN
# How many leading characters identify a key in listings and `revoke-api-key`.
DISPLAY_PREFIX_LEN = 12


def _base62(value: int, width: int) -> str:
    out = []
    for _ in range(width):
        value, rem = divmod(value, 62)
        out.append(_BASE62[rem])
    return "".join(reversed(out))


def _checksum(body: str) -> str:
    return _base62(zlib.crc32(body.encode()), _CHECKSUM_LEN)


def generate_api_key() -> str:
    """A new random key with prefix and checksum."""
    body = "".join(secrets.choice(_BASE62) for _ in range(_RANDOM_LEN))
    return f"{KEY_PREFIX}{body}{_checksum(body)}"


def is_well_formed(key: str) -> bool:
    """True when `key` has our prefix, length, alphabet and a matching checksum."""
    if len(key) != KEY_LENGTH or not key.startswith(KEY_PREFIX):
        return False
    body, checksum = key[len(KEY_PREFIX) : -_CHECKSUM_LEN], key[-_CHECKSUM_LEN:]
    if any(ch not in _BASE62 for ch in body):
        return False
    return hmac.compare_digest(_checksum(body), checksum)


def display_prefix(key: str) -> str:
    """The non-secret leading part of a key that names it."""
    return key[:DISPLAY_PREFIX_LEN]


def digest(key: str) -> str:
    """The stored form of a key: hex SHA-256 (keys carry 190 bits of entropy, no salt needed)."""
    return hashlib.sha256(key.encode()).hexdigest()


def matches(key: str, stored_digest: str) -> bool:
    """Constant-time comparison of a presented key with a stored digest."""
    return hmac.compare_digest(digest(key), stored_digest)
