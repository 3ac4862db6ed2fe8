"""SSH public keys for tests, generated once per process."""

from __future__ import annotations

from functools import cache

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa


def _openssh(private_key: ed25519.Ed25519PrivateKey | rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> str:
    return (
        private_key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )


def ed25519_key(comment: str = "alice@laptop") -> str:
    """A fresh ed25519 key line."""
    return f"{_openssh(ed25519.Ed25519PrivateKey.generate())} {comment}"


@cache
def rsa_key(bits: int) -> str:
    """An RSA key line of `bits` bits (cached: generation is slow)."""
    return _openssh(rsa.generate_private_key(public_exponent=65537, key_size=bits))


def ecdsa_key() -> str:
    return _openssh(ec.generate_private_key(ec.SECP256R1()))
