"""ECDSA over NIST P-256 with SHA-256: key generation and signing, nothing else.

Why not `cryptography`: importing it costs ~27 ms and a key + certificate ~8 ms more, paid on every
provider launch (Terraform launches a provider 3-4 times per command). This module needs only the
stdlib's `hashlib` and `os.urandom` and signs once per launch, for the throwaway self-signed
certificate that pins the plugin's TLS endpoint. The TLS handshakes themselves are OpenSSL's (the
`ssl` module); this code never sees peer data. Its results are checked against `cryptography` in
tests/provider/plugin/test_selfsigned.py.
"""

from __future__ import annotations

import hashlib
import os

# Curve parameters (SEC 2 / FIPS 186-4, secp256r1); a = -3.
P = 0xFFFFFFFF00000001000000000000000000000000FFFFFFFFFFFFFFFFFFFFFFFF
B = 0x5AC635D8AA3A93E7B3EBBD55769886BC651D06B0CC53B0F63BCE3C3E27D2604B
N = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
GX = 0x6B17D1F2E12C4247F8BCE6E563A440F277037D812DEB33A0F4A13945D898C296
GY = 0x4FE342E2FE1A7F9B8EE7EB4A7C0F9E162BCE33576B315ECECBB6406837BF51F5

# A point in Jacobian coordinates (X, Y, Z) meaning (X/Z^2, Y/Z^3); Z == 0 is the point at infinity.
_Jacobian = tuple[int, int, int]
_INFINITY: _Jacobian = (1, 1, 0)


def _double(pt: _Jacobian) -> _Jacobian:
    x, y, z = pt
    if z == 0 or y == 0:
        return _INFINITY
    ysq = y * y % P
    s = 4 * x * ysq % P
    zsq = z * z % P
    m = 3 * (x - zsq) * (x + zsq) % P  # a = -3 shortcut
    nx = (m * m - 2 * s) % P
    ny = (m * (s - nx) - 8 * ysq * ysq) % P
    nz = 2 * y * z % P
    return nx, ny, nz


def _add(p1: _Jacobian, p2: _Jacobian) -> _Jacobian:
    x1, y1, z1 = p1
    x2, y2, z2 = p2
    if z1 == 0:
        return p2
    if z2 == 0:
        return p1
    z1sq = z1 * z1 % P
    z2sq = z2 * z2 % P
    u1 = x1 * z2sq % P
    u2 = x2 * z1sq % P
    s1 = y1 * z2sq * z2 % P
    s2 = y2 * z1sq * z1 % P
    if u1 == u2:
        return _double(p1) if s1 == s2 else _INFINITY
    h = (u2 - u1) % P
    r = (s2 - s1) % P
    hsq = h * h % P
    hcu = hsq * h % P
    u1hsq = u1 * hsq % P
    nx = (r * r - hcu - 2 * u1hsq) % P
    ny = (r * (u1hsq - nx) - s1 * hcu) % P
    nz = h * z1 * z2 % P
    return nx, ny, nz


def _multiply_base(k: int) -> tuple[int, int]:
    """k * G in affine coordinates, with a 4-bit fixed window (256 doublings, 64 additions)."""
    table = [_INFINITY, (GX, GY, 1)]
    for _ in range(14):
        table.append(_add(table[-1], table[1]))
    acc = _INFINITY
    for shift in range(252, -4, -4):
        for _ in range(4):
            acc = _double(acc)
        acc = _add(acc, table[(k >> shift) & 0xF])
    x, y, z = acc
    if z == 0:
        raise ValueError("scalar is a multiple of the group order")
    zinv = pow(z, -1, P)
    zinv2 = zinv * zinv % P
    return x * zinv2 % P, y * zinv2 * zinv % P


def _random_scalar() -> int:
    """Uniform in [1, N-1] by rejection sampling from the OS CSPRNG."""
    while True:
        k = int.from_bytes(os.urandom(32), "big")
        if 0 < k < N:
            return k


class PrivateKey:
    """A P-256 private key: the scalar `d` and its public point."""

    __slots__ = ("d", "public_x", "public_y")

    def __init__(self, d: int) -> None:
        if not 0 < d < N:
            raise ValueError("private scalar out of range")
        self.d = d
        self.public_x, self.public_y = _multiply_base(d)

    @classmethod
    def generate(cls) -> PrivateKey:
        return cls(_random_scalar())

    def public_point_bytes(self) -> bytes:
        """SEC 1 uncompressed point: 0x04 || X || Y."""
        return b"\x04" + self.public_x.to_bytes(32, "big") + self.public_y.to_bytes(32, "big")

    def sign_sha256(self, message: bytes) -> tuple[int, int]:
        """ECDSA signature (r, s) of SHA-256(message), with a fresh random nonce."""
        e = int.from_bytes(hashlib.sha256(message).digest(), "big")
        while True:
            k = _random_scalar()
            r = _multiply_base(k)[0] % N
            if r == 0:
                continue
            s = pow(k, -1, N) * (e + r * self.d) % N
            if s != 0:
                return r, s
