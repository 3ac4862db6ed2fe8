"""A throwaway self-signed TLS server certificate for one plugin process, in plain DER.

go-plugin pins the server certificate given in the handshake line: Terraform trusts exactly this
certificate, for the name `localhost`. The certificate mirrors what go-plugin's own servers make:
ECDSA (P-256 here), self-signed, CA:TRUE, key usage digitalSignature + keyCertSign, extended key usage
serverAuth, SAN DNS:localhost. A few dozen lines of DER keep `cryptography` off the start-up path.
"""

from __future__ import annotations

import binascii
import os
import time

from provider.plugin.p256 import PrivateKey

_OID_ECDSA_SHA256 = "1.2.840.10045.4.3.2"
_OID_EC_PUBLIC_KEY = "1.2.840.10045.2.1"
_OID_PRIME256V1 = "1.2.840.10045.3.1.7"
_OID_ORGANIZATION = "2.5.4.10"
_OID_COMMON_NAME = "2.5.4.3"
_OID_BASIC_CONSTRAINTS = "2.5.29.19"
_OID_KEY_USAGE = "2.5.29.15"
_OID_EXT_KEY_USAGE = "2.5.29.37"
_OID_SUBJECT_ALT_NAME = "2.5.29.17"
_OID_SERVER_AUTH = "1.3.6.1.5.5.7.3.1"

_VALIDITY_BACKDATE_S = 60  # tolerate small clock differences
_VALIDITY_S = 30 * 24 * 3600  # one launch needs minutes; a month leaves room for very long applies


class ServerCertificate:
    """DER certificate and PEM private key (a plain class: `dataclasses` costs ~5 ms to import)."""

    __slots__ = ("der", "key_pem")

    def __init__(self, der: bytes, key_pem: bytes) -> None:
        self.der = der
        self.key_pem = key_pem

    @property
    def pem(self) -> bytes:
        return _pem("CERTIFICATE", self.der)

    def handshake_text(self) -> str:
        """Base64 of the DER without `=` padding, as go-plugin reads it (RawStdEncoding)."""
        return binascii.b2a_base64(self.der, newline=False).rstrip(b"=").decode("ascii")


def generate_server_certificate(hostname: str = "localhost") -> ServerCertificate:
    key = PrivateKey.generate()
    now = int(time.time())
    name = _seq(
        _set(_seq(_oid(_OID_ORGANIZATION), _tlv(0x0C, b"gpucloud"))),
        _set(_seq(_oid(_OID_COMMON_NAME), _tlv(0x0C, hostname.encode()))),
    )
    extensions = _seq(
        _extension(_OID_BASIC_CONSTRAINTS, _seq(_tlv(0x01, b"\xff")), critical=True),
        # digitalSignature (bit 0) + keyCertSign (bit 5): 6 bits used, 2 unused
        _extension(_OID_KEY_USAGE, _tlv(0x03, b"\x02\x84"), critical=True),
        _extension(_OID_EXT_KEY_USAGE, _seq(_oid(_OID_SERVER_AUTH))),
        _extension(_OID_SUBJECT_ALT_NAME, _seq(_tlv(0x82, hostname.encode("ascii")))),
    )
    signature_algorithm = _seq(_oid(_OID_ECDSA_SHA256))
    tbs = _seq(
        _tlv(0xA0, _integer(2)),  # version v3
        _integer(int.from_bytes(os.urandom(16), "big") | 1),  # positive, non-zero
        signature_algorithm,
        name,
        _seq(_utc_time(now - _VALIDITY_BACKDATE_S), _utc_time(now + _VALIDITY_S)),
        name,
        _seq(
            _seq(_oid(_OID_EC_PUBLIC_KEY), _oid(_OID_PRIME256V1)),
            _bit_string(key.public_point_bytes()),
        ),
        _tlv(0xA3, extensions),
    )
    r, s = key.sign_sha256(tbs)
    der = _seq(tbs, signature_algorithm, _bit_string(_seq(_integer(r), _integer(s))))
    sec1_key = _seq(
        _integer(1),
        _tlv(0x04, key.d.to_bytes(32, "big")),
        _tlv(0xA0, _oid(_OID_PRIME256V1)),
        _tlv(0xA1, _bit_string(key.public_point_bytes())),
    )
    return ServerCertificate(der=der, key_pem=_pem("EC PRIVATE KEY", sec1_key))


# --- DER encoding -------------------------------------------------------------------------------


def _tlv(tag: int, content: bytes) -> bytes:
    size = len(content)
    if size < 0x80:
        header = bytes((tag, size))
    else:
        size_bytes = size.to_bytes((size.bit_length() + 7) // 8, "big")
        header = bytes((tag, 0x80 | len(size_bytes))) + size_bytes
    return header + content


def _seq(*items: bytes) -> bytes:
    return _tlv(0x30, b"".join(items))


def _set(*items: bytes) -> bytes:
    return _tlv(0x31, b"".join(items))


def _integer(value: int) -> bytes:
    """Minimal two's-complement encoding of a non-negative integer."""
    return _tlv(0x02, value.to_bytes(value.bit_length() // 8 + 1, "big"))


def _bit_string(data: bytes) -> bytes:
    return _tlv(0x03, b"\x00" + data)


def _oid(dotted: str) -> bytes:
    first, second, *rest = (int(part) for part in dotted.split("."))
    body = bytearray([40 * first + second])
    for arc in rest:
        chunk = [arc & 0x7F]
        arc >>= 7
        while arc:
            chunk.append(0x80 | (arc & 0x7F))
            arc >>= 7
        body.extend(reversed(chunk))
    return _tlv(0x06, bytes(body))


def _extension(oid: str, value: bytes, *, critical: bool = False) -> bytes:
    return _seq(_oid(oid), *([_tlv(0x01, b"\xff")] if critical else []), _tlv(0x04, value))


def _utc_time(epoch_seconds: int) -> bytes:
    return _tlv(0x17, time.strftime("%y%m%d%H%M%SZ", time.gmtime(epoch_seconds)).encode("ascii"))


def _pem(label: str, der: bytes) -> bytes:
    body = binascii.b2a_base64(der, newline=False)
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    tag = label.encode("ascii")
    return b"-----BEGIN " + tag + b"-----\n" + b"\n".join(lines) + b"\n-----END " + tag + b"-----\n"
