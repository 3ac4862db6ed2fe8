"""The `gpucloud-backend` command line: projects and keys, revocation, and `serve` on a fresh data dir."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from backend.domain import api_keys

CLI = [sys.executable, "-m", "backend.cli"]


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture
def cli_env(database_url: str, tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "GPUCLOUD_DATABASE_URL": database_url, "GPUCLOUD_DATA_DIR": str(tmp_path)}
    return env


def test_cli_create_project_key_and_revoke(cli_env: dict[str, str]) -> None:
    project = _run(cli_env, "create-project", "acme")
    assert project.returncode == 0, project.stderr
    assert project.stdout.strip().startswith("prj_")
    duplicate = _run(cli_env, "create-project", "acme")
    assert duplicate.returncode == 1 and "already exists" in duplicate.stderr
    created = _run(cli_env, "create-api-key", "--project", "acme", "--role", "admin")
    assert created.returncode == 0, created.stderr
    key = created.stdout
    assert key.endswith("\n") and key.count("\n") == 1 and api_keys.is_well_formed(key.strip())
    revoked = _run(cli_env, "revoke-api-key", api_keys.display_prefix(key.strip()))
    assert revoked.returncode == 0 and revoked.stdout == ""
    unknown = _run(cli_env, "revoke-api-key", "gpc_nothere")
    assert unknown.returncode == 1
    bad_role = _run(cli_env, "create-api-key", "--project", "acme", "--role", "root")
    assert bad_role.returncode == 2



def test_cli_create_api_key_with_a_role_and_a_team_scope(cli_env: dict[str, str], database_url: str) -> None:
    assert _run(cli_env, "create-project", "acme").returncode == 0
    for role in ("viewer", "member", "operator"):
        assert _run(cli_env, "create-api-key", "--project", "acme", "--role", role).returncode == 0
    scoped = _run(cli_env, "create-api-key", "--project", "acme", "--role", "admin", "--scope", "team=nlp")
    assert scoped.returncode == 0, scoped.stderr
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            row = connection.execute(
                text("SELECT role, scope_key, scope_value FROM api_keys WHERE prefix = :p"),
                {"p": api_keys.display_prefix(scoped.stdout.strip())},
            ).one()
    finally:
        engine.dispose()
    assert tuple(row) == ("admin", "team", "nlp")
    bad = _run(cli_env, "create-api-key", "--project", "acme", "--role", "admin", "--scope", "team")
    assert bad.returncode == 2 and "--scope" in bad.stderr and "team=nlp" in bad.stderr

def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def _serving(env: dict[str, str]) -> Iterator[int]:
    """A `gpucloud-backend serve` process, ready; yields its port."""
    port = _free_port()
    server = subprocess.Popen(
        [*CLI, "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120  # a ceiling: imports and migrations on a busy machine
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, "server did not start"
            time.sleep(0.1)
        yield port
    finally:
        server.terminate()
        server.communicate(timeout=10)


def _fresh_env(data_dir: Path) -> dict[str, str]:
    env = {**os.environ, "GPUCLOUD_DATA_DIR": str(data_dir), "GPUCLOUD_EMBEDDED_WORKER": "false"}
    env.pop("GPUCLOUD_DATABASE_URL", None)
    return env


def test_cli_serve_creates_and_migrates_sqlite_store_on_first_start(tmp_path: Path) -> None:
    data_dir = tmp_path / "fresh" / "gpucloud"
    env = _fresh_env(data_dir)
    with _serving(env) as port:
        assert (data_dir / "gpucloud.db").exists()
        assert _run(env, "create-project", "first").returncode == 0
        key = _run(env, "create-api-key", "--project", "first", "--role", "admin").stdout.strip()
        response = httpx.get(
            f"http://127.0.0.1:{port}/v1/ssh-keys", headers={"Authorization": f"Bearer {key}"}
        )
        assert response.status_code == 200 and response.json()["items"] == []


def _raw_exchange(port: int, request: bytes) -> tuple[str, dict[str, str], bytes]:
    """Send `request` bytes as they are; the status line, headers and body of the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):  # the server closes the connection after these answers
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    return status, headers, body


def test_cli_serve_answers_bad_body_framing_with_a_400_problem_and_closes(tmp_path: Path) -> None:
    # h11 refuses a bad Content-Length before the app sees it (uvicorn's own answer is plain text); the
    # app refuses Content-Length with Transfer-Encoding (request smuggling). Both: problem+json, closed.
    cases = [
        (b"Content-Length: abc\r\n", "malformed_http_request"),
        (b"Content-Length: 5\r\nContent-Length: 7\r\n", "malformed_http_request"),
        (b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", "ambiguous_framing"),
    ]
    with _serving(_fresh_env(tmp_path / "data")) as port:
        for framing, code in cases:
            status, headers, body = _raw_exchange(
                port,
                b"POST /v1/volumes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + framing
                + b"\r\n0\r\n\r\n",
            )
            assert status.startswith("HTTP/1.1 400"), (framing, status, body)
            assert headers["content-type"] == "application/problem+json" and headers["connection"] == "close"
            problem = json.loads(body)
            assert problem["status"] == 400 and problem["code"] == code, (framing, problem)
            assert problem["request_id"] == headers["x-request-id"]


def test_cli_serve_refuses_half_a_tls_configuration(tmp_path: Path) -> None:
    env = {**os.environ, "GPUCLOUD_DATA_DIR": str(tmp_path)}
    cert = tmp_path / "cert.pem"
    cert.write_text("-----BEGIN CERTIFICATE-----\n")
    only_cert = _run(env, "serve", "--tls-cert", str(cert))
    assert only_cert.returncode == 2
    assert "--tls-key (GPUCLOUD_TLS_KEY_FILE) is not set" in only_cert.stderr
    missing = _run(env, "serve", "--tls-cert", str(cert), "--tls-key", str(tmp_path / "nope.pem"))
    assert missing.returncode == 2 and "--tls-key (GPUCLOUD_TLS_KEY_FILE): no such file" in missing.stderr
