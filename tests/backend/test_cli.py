"""The `gpucloud-backend` command line: projects and keys, revocation, and `serve` on a fresh data dir."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_cli_serve_creates_and_migrates_sqlite_store_on_first_start(tmp_path: Path) -> None:
    data_dir = tmp_path / "fresh" / "gpucloud"
    env = {**os.environ, "GPUCLOUD_DATA_DIR": str(data_dir), "GPUCLOUD_EMBEDDED_WORKER": "false"}
    env.pop("GPUCLOUD_DATABASE_URL", None)
    port = _free_port()
    server = subprocess.Popen(
        [*CLI, "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, "server did not start"
            time.sleep(0.1)
        assert (data_dir / "gpucloud.db").exists()
        assert _run(env, "create-project", "first").returncode == 0
        key = _run(env, "create-api-key", "--project", "first", "--role", "admin").stdout.strip()
        response = httpx.get(
            f"http://127.0.0.1:{port}/v1/ssh-keys", headers={"Authorization": f"Bearer {key}"}
        )
        assert response.status_code == 200 and response.json()["items"] == []
    finally:
        server.terminate()
        server.communicate(timeout=10)
