"""Private keys in the forms people paste by mistake, generated at test time (never committed)."""

from __future__ import annotations

from functools import cache

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa

FORMATS = {
    "openssh": serialization.PrivateFormat.OpenSSH,  # ssh-keygen's default: BEGIN OPENSSH PRIVATE KEY
    "pkcs8": serialization.PrivateFormat.PKCS8,  # BEGIN PRIVATE KEY
    "traditional": serialization.PrivateFormat.TraditionalOpenSSL,  # BEGIN RSA PRIVATE KEY (PEM)
}
# ed25519 has no traditional (PKCS#1-style) PEM form.
FORMS = [("ed25519", "openssh"), ("ed25519", "pkcs8"), ("rsa", "openssh"), ("rsa", "pkcs8"),
         ("rsa", "traditional")]


@cache
def _key(kind: str) -> ed25519.Ed25519PrivateKey | rsa.RSAPrivateKey:
    if kind == "ed25519":
        return ed25519.Ed25519PrivateKey.generate()
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def private_key(kind: str, form: str) -> str:
    """A private key file's text, as `cat ~/.ssh/id_<kind>` prints it."""
    return _key(kind).private_bytes(
        serialization.Encoding.PEM, FORMATS[form], serialization.NoEncryption()
    ).decode()


def secret_lines(text: str) -> list[str]:
    """The lines of a private key that carry key material (everything but the BEGIN/END armour)."""
    return [line for line in text.splitlines() if line and not line.startswith("-----")]
