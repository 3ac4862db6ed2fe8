"""Launch a provider executable as Terraform does and talk to it as Terraform does (test helpers)."""

from __future__ import annotations

import base64
import datetime
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from provider.plugin.handshake import MAGIC_COOKIE_KEY, MAGIC_COOKIE_VALUE

REPO = Path(__file__).resolve().parents[3]
FAKE_PROVIDER = [sys.executable, "-m", "tests.provider.plugin.fake_provider"]


@dataclass(frozen=True)
class ClientCertificate:
    """What go-plugin's host makes for each launch: a self-signed ECDSA P-521 cert (mtls.go)."""

    cert_pem: bytes
    key_pem: bytes


def make_client_certificate() -> ClientCertificate:
    key = ec.generate_private_key(ec.SECP521R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "HashiCorp"),
            x509.NameAttribute(NameOID.COMMON_NAME, "localhost"),
        ]
    )
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(seconds=30))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=True,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH]),
            critical=False,
        )
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA512())
    )
    return ClientCertificate(
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )


def terraform_environment(client_cert: ClientCertificate | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_", "PLUGIN_"))}
    env.update(
        {
            MAGIC_COOKIE_KEY: MAGIC_COOKIE_VALUE,
            "PLUGIN_PROTOCOL_VERSIONS": "5,6",
            "PLUGIN_MIN_PORT": "10000",
            "PLUGIN_MAX_PORT": "25000",
            "PYTHONPATH": str(REPO),
        }
    )
    if client_cert is not None:
        env["PLUGIN_CLIENT_CERT"] = client_cert.cert_pem.decode()
    env.update(extra)
    return env


@dataclass(frozen=True)
class Handshake:
    core_version: str
    protocol_version: str
    network: str
    address: str
    protocol: str
    server_cert_der: bytes | None

    @classmethod
    def parse(cls, line: str) -> Handshake:
        core, app, network, address, protocol, cert = line.rstrip("\n").split("|")
        der = None
        if cert:
            assert "=" not in cert, "go-plugin decodes with RawStdEncoding: no padding allowed"
            der = base64.b64decode(cert + "=" * (-len(cert) % 4))
        return cls(core, app, network, address, protocol, der)


@dataclass
class LaunchedPlugin:
    process: subprocess.Popen[bytes]
    handshake: Handshake

    def channel(self, client_cert: ClientCertificate | None) -> grpc.Channel:
        target = f"unix:{self.handshake.address}"
        limits = [("grpc.max_receive_message_length", 256 << 20), ("grpc.max_send_message_length", 256 << 20)]
        if self.handshake.server_cert_der is None:
            return grpc.insecure_channel(target, options=limits)
        server_pem = x509.load_der_x509_certificate(self.handshake.server_cert_der).public_bytes(
            serialization.Encoding.PEM
        )
        credentials = grpc.ssl_channel_credentials(
            root_certificates=server_pem,
            private_key=client_cert.key_pem if client_cert else None,
            certificate_chain=client_cert.cert_pem if client_cert else None,
        )
        return grpc.secure_channel(
            target, credentials, options=[("grpc.ssl_target_name_override", "localhost"), *limits]
        )


@contextmanager
def launched(
    command: Sequence[str], env: dict[str, str], cwd: Path | None = None
) -> Iterator[LaunchedPlugin]:
    process = subprocess.Popen(
        list(command),
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().decode()
        if not line:
            process.wait(10)
            assert process.stderr is not None
            raise AssertionError(f"no handshake line; stderr: {process.stderr.read().decode()}")
        yield LaunchedPlugin(process, Handshake.parse(line))
    finally:
        if process.poll() is None:
            process.terminate()  # SIGTERM: the plugin still removes its socket directory
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
        process.wait(10)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
