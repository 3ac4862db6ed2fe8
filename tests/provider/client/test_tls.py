"""The TLS context a client verifies the API with: httpx's, built once per process for the default
environment, fresh where the environment names its own CAs, and none loaded for an http:// API."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
from pathlib import Path

import certifi
import httpx
import pytest

from provider.client import GpuCloudClient
from provider.client import http as client_http

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def default_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in client_http._TLS_ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(client_http, "_default_tls_context", None)


def _pool_context(client: GpuCloudClient) -> ssl.SSLContext:
    context: ssl.SSLContext = client._http._transport._pool._ssl_context  # type: ignore[attr-defined]
    return context


def test_tls_context_default_is_httpx_default_built_once(default_environment: None) -> None:
    first = client_http.tls_context()
    assert first is client_http.tls_context()
    assert first.verify_mode == ssl.CERT_REQUIRED and first.check_hostname
    assert first.cert_store_stats()["x509_ca"] == httpx.create_ssl_context().cert_store_stats()["x509_ca"] > 0


def test_tls_context_from_the_environment_is_read_afresh(
    default_environment: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    default = client_http.tls_context()
    monkeypatch.setenv("SSL_CERT_FILE", certifi.where())
    named = client_http.tls_context()
    assert named is not default and named is not client_http.tls_context()
    assert named.verify_mode == ssl.CERT_REQUIRED and named.cert_store_stats()["x509_ca"] > 0


def test_https_client_verifies_with_the_shared_context(default_environment: None) -> None:
    client = GpuCloudClient("https://api.example", "k")
    try:
        assert _pool_context(client) is client_http.tls_context()
    finally:
        client.close()


def test_http_client_loads_no_ca_and_would_refuse_any_tls(default_environment: None) -> None:
    client = GpuCloudClient("http://127.0.0.1:8080", "k")
    try:
        context = _pool_context(client)
        assert context is not client_http._default_tls_context
        assert context.cert_store_stats()["x509_ca"] == 0
        assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    finally:
        client.close()


def test_preload_builds_the_default_context_and_loads_the_first_request_modules() -> None:
    # What the warm daemon imports (provider.plugin.main.WARM_IMPORTS) in its scrubbed environment.
    probe = (
        "import json, sys; sys.path.insert(0, sys.argv[1]);"
        "from provider.plugin.main import WARM_IMPORTS; [__import__(name) for name in WARM_IMPORTS];"
        "from provider.client import http;"
        "print(json.dumps([http._default_tls_context is not None, sorted(sys.modules)]))"
    )
    result = subprocess.run(
        [sys.executable, "-I", "-c", probe, str(REPO)], capture_output=True, text=True, check=True, env={}
    )
    built, modules = json.loads(result.stdout)
    assert built
    assert {"httpcore", "h11", "certifi", "tenacity"} <= set(modules)
