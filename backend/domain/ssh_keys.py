"""OpenSSH public keys: parse, check the algorithm and size, compute the ssh-keygen SHA256 fingerprint.

The rules (no private key, accepted types, key data, RSA size) are the `SshKeyCreate` rules of
`domain.input_rules`, checked in that order; no message echoes the key, which may be a secret.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import load_ssh_public_key

from backend.domain.errors import FieldError
from backend.domain.input_rules import MIN_RSA_BITS, SSH_KEY_TYPES, broken, rule

ALLOWED_TYPES = SSH_KEY_TYPES
MAX_KEY_CHARS = 16_384


@dataclass(frozen=True)
class ParsedSshKey:
    key_type: str
    fingerprint: str  # "SHA256:<base64 without padding>", as `ssh-keygen -lf` prints it
    bits: int


def _error(message: str, code: str = "invalid_ssh_key") -> FieldError:
    return FieldError(path="public_key", code=code, message=message)


def _broken_rule(code: str) -> FieldError:
    found = rule("SshKeyCreate", code)
    return FieldError(path=found.field, code=found.code, message=found.message)


def parse_public_key(text: str) -> ParsedSshKey | FieldError:
    """The key's type and fingerprint, or a FieldError for `public_key` saying what is wrong."""
    if broken(rule("SshKeyCreate", "private_key"), {"public_key": text}):
        return _broken_rule("private_key")
    if len(text) > MAX_KEY_CHARS:
        return _error(f"public_key is longer than {MAX_KEY_CHARS} characters")
    line = text.strip()
    if line.split(None, 1)[:1] and line.split(None, 1)[0] not in ALLOWED_TYPES:
        return _broken_rule("unsupported_key_type")
    if not line or any((ord(ch) < 32 and ch != "\t") or ord(ch) == 127 for ch in line):
        return _error("public_key must be one OpenSSH public key line: '<type> <base64> [comment]'")
    parts = line.split(None, 2)
    if len(parts) < 2:
        return _error("public_key must look like 'ssh-ed25519 AAAA... [comment]'")
    key_type, blob_b64 = parts[0], parts[1]
    try:
        blob = base64.b64decode(blob_b64.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeError, ValueError):
        return _error("the key data is not valid base64")
    if _embedded_type(blob) != key_type:
        return _error(f"the key data does not hold a {key_type} key")
    try:
        key = load_ssh_public_key(f"{key_type} {blob_b64}".encode("ascii"))
    except (ValueError, TypeError, UnicodeError) as error:
        return _error(f"the key data is not a valid {key_type} key ({error})")
    if isinstance(key, rsa.RSAPublicKey):
        bits = key.key_size
        if bits < MIN_RSA_BITS:
            return _error(
                f"RSA keys must have at least {MIN_RSA_BITS} bits; this one has {bits}", code="key_too_weak"
            )
    elif isinstance(key, ec.EllipticCurvePublicKey):
        bits = key.curve.key_size
    elif isinstance(key, ed25519.Ed25519PublicKey):
        bits = 256
    else:  # pragma: no cover - excluded by ALLOWED_TYPES
        return _error("unsupported key algorithm", code="unsupported_key_type")
    fingerprint = "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    return ParsedSshKey(key_type=key_type, fingerprint=fingerprint, bits=bits)


def _embedded_type(blob: bytes) -> str | None:
    """The algorithm name at the start of an SSH wire-format key blob."""
    if len(blob) < 4:
        return None
    (length,) = struct.unpack(">I", blob[:4])
    if length > 64 or len(blob) < 4 + length:
        return None
    try:
        return blob[4 : 4 + length].decode("ascii")
    except UnicodeDecodeError:
        return None
