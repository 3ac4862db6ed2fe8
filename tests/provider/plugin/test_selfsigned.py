"""The pure-Python P-256 key and self-signed certificate, checked against `cryptography` and OpenSSL."""

from __future__ import annotations

import base64
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from provider.plugin.p256 import N, PrivateKey
from provider.plugin.selfsigned import ServerCertificate, generate_server_certificate


@pytest.mark.parametrize("scalar", [1, 2, 3, 0xDEADBEEF, N // 2, N - 1])
def test_p256_public_point_matches_cryptography(scalar: int) -> None:
    ours = PrivateKey(scalar)
    theirs = ec.derive_private_key(scalar, ec.SECP256R1()).public_key().public_numbers()
    assert (ours.public_x, ours.public_y) == (theirs.x, theirs.y)


def test_p256_signature_verifies_with_cryptography() -> None:
    key = PrivateKey.generate()
    public = ec.EllipticCurvePublicNumbers(key.public_x, key.public_y, ec.SECP256R1()).public_key()
    for message in (b"", b"tbs", bytes(range(256)) * 10):
        r, s = key.sign_sha256(message)
        public.verify(encode_dss_signature(r, s), message, ec.ECDSA(hashes.SHA256()))


def test_p256_rejects_out_of_range_scalars() -> None:
    for bad in (0, N, N + 1):
        with pytest.raises(ValueError):
            PrivateKey(bad)


def test_server_certificate_is_what_go_plugin_pins() -> None:
    generated = generate_server_certificate()
    cert = x509.load_der_x509_certificate(generated.der)
    public_key = cert.public_key()
    assert isinstance(public_key, ec.EllipticCurvePublicKey)
    assert isinstance(public_key.curve, ec.SECP256R1)
    public_key.verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(hashes.SHA256()))
    assert cert.subject == cert.issuer
    assert cert.serial_number > 0
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert x509.oid.ExtendedKeyUsageOID.SERVER_AUTH in usage
    assert cert.not_valid_before_utc < cert.not_valid_after_utc
    key = serialization.load_pem_private_key(generated.key_pem, password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    assert key.public_key().public_numbers() == public_key.public_numbers()
    assert x509.load_pem_x509_certificate(generated.pem) == cert


def test_server_certificate_loads_into_openssl(tmp_path: Path) -> None:
    generated = generate_server_certificate()
    (tmp_path / "c.pem").write_bytes(generated.pem)
    (tmp_path / "k.pem").write_bytes(generated.key_pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "c.pem", tmp_path / "k.pem")  # raises when key and cert differ


def test_handshake_text_is_unpadded_base64_of_the_der() -> None:
    generated = generate_server_certificate()
    text = generated.handshake_text()
    assert "=" not in text and "\n" not in text
    assert base64.b64decode(text + "=" * (-len(text) % 4)) == generated.der


@pytest.mark.parametrize("length", [30, 31, 32])  # every DER length modulo 3
def test_handshake_text_never_pads(length: int) -> None:
    der = bytes(range(length))
    assert ServerCertificate(der, b"").handshake_text() == base64.b64encode(der).decode().rstrip("=")


def test_each_certificate_is_fresh() -> None:
    first, second = generate_server_certificate(), generate_server_certificate()
    assert first.der != second.der and first.key_pem != second.key_pem
