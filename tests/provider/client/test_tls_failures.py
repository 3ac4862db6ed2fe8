"""An API whose certificate does not verify (self-signed, here) is reported as that: the endpoint, why,
and how to trust it (SSL_CERT_FILE, or http:// for a local backend), after one attempt; not as an API
that might not be running. Against a real HTTPS server on loopback."""

from __future__ import annotations

import datetime
import http.server
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from provider.client import TLS_VERIFICATION_FAILED, GpuCloudClient, TransportError
from provider.client import http as client_http
from provider.framework import Context
from provider.resources._common import api_error


def _self_signed(directory: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "cert.pem", directory / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file


class _Handshakes(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def self_signed_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Path]]:
    """https://localhost:PORT with a self-signed certificate; the CA environment of a plain machine."""
    for variable in client_http._TLS_ENVIRONMENT:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(client_http, "_default_tls_context", None)
    cert, key = _self_signed(tmp_path)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handshakes)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://localhost:{server.server_address[1]}", cert
    finally:
        server.shutdown()
        server.server_close()


def _verification_error(endpoint: str) -> TransportError:
    sleeps: list[float] = []
    client = GpuCloudClient(endpoint, "k", max_retries=3, sleep=sleeps.append)
    try:
        with pytest.raises(TransportError) as raised:
            client.verify_credentials()
    finally:
        client.close()
    assert sleeps == []  # not retried: the same certificate fails the same way every time
    return raised.value


def test_self_signed_certificate_names_the_endpoint_and_the_fix(self_signed_api: tuple[str, Path]) -> None:
    endpoint, _ = self_signed_api
    error = _verification_error(endpoint)
    assert error.code == TLS_VERIFICATION_FAILED and not error.may_have_arrived
    assert f"TLS verification of the API's certificate at {endpoint} failed" in error.detail
    assert "self-signed certificate" in error.detail
    assert "SSL_CERT_FILE" in error.detail and "http://" in error.detail
    assert "running" not in error.detail, error.detail


def test_terraform_diagnostic_of_a_tls_failure_keeps_to_the_tls_fix(
    self_signed_api: tuple[str, Path]
) -> None:
    endpoint, _ = self_signed_api
    ctx = Context(stop=threading.Event())
    api_error(ctx, "Error Reading GPU Cluster", _verification_error(endpoint), subject="GPU cluster")
    [diagnostic] = ctx.diagnostics
    assert "SSL_CERT_FILE" in diagnostic.detail and "API is running" not in diagnostic.detail


def test_trusting_the_certificate_through_ssl_cert_file_fixes_it(
    self_signed_api: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint, cert = self_signed_api
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # what the message says to do
    client = GpuCloudClient(endpoint, "k", max_retries=0)
    try:
        client.verify_credentials()
    finally:
        client.close()


def test_provider_block_with_an_untrusted_endpoint_says_so(self_signed_api: tuple[str, Path]) -> None:
    from provider._proto import tfplugin6_pb2 as pb
    from provider.cty import encode_msgpack
    from provider.framework.server import ProviderServer
    from provider.resources.provider import GpuCloudProvider

    endpoint, _ = self_signed_api
    values = {"endpoint": endpoint, "api_key": "k", "request_timeout": None, "max_retries": 2}
    server = ProviderServer(GpuCloudProvider())
    response = server.configure_provider(pb.ConfigureProvider.Request(
        terraform_version="1.11.4",
        config=pb.DynamicValue(msgpack=encode_msgpack(values, GpuCloudProvider.schema.cty_type)),
    ))
    (diagnostic,) = response.diagnostics
    assert diagnostic.summary == "Untrusted TLS Certificate"
    assert [step.attribute_name for step in diagnostic.attribute.steps] == ["endpoint"]
    assert endpoint in diagnostic.detail and "SSL_CERT_FILE" in diagnostic.detail
    assert "running" not in diagnostic.detail


def test_cli_error_line_of_a_tls_failure_names_the_endpoint_and_the_fix(
    self_signed_api: tuple[str, Path]
) -> None:
    from provider.cli.main import error_line

    endpoint, _ = self_signed_api
    line = error_line(_verification_error(endpoint))
    assert line.startswith(f"TLS verification of the API's certificate at {endpoint} failed (self-signed")
    assert "SSL_CERT_FILE" in line and "running" not in line
