"""The real backend for acceptance tests: `gpucloud-backend serve` on a free loopback port with a fresh
SQLite store, a project and an admin API key made with the backend's own CLI.

    from acceptance.backend import running_backend
    with running_backend(tmp_dir) as backend:
        backend.url, backend.api_key, backend.client   # client: a GpuCloudClient for out-of-band changes
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from acceptance.harness.waiting import WAIT_CEILING_S
from provider.client import GpuCloudClient

BACKEND = Path(sys.executable).with_name("gpucloud-backend")
# Imports, migrations and the embedded engine worker: seconds when idle, a minute or more on a loaded machine.
START_TIMEOUT = WAIT_CEILING_S


@dataclass
class Backend:
    url: str
    api_key: str
    client: GpuCloudClient
    data_dir: Path
    process: subprocess.Popen[bytes]

    @property
    def provider_env(self) -> dict[str, str]:
        """What a Terraform run needs to reach this backend (the provider reads these variables)."""
        return {"GPUCLOUD_ENDPOINT": self.url, "GPUCLOUD_API_KEY": self.api_key}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([str(BACKEND), *args], env=env, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"gpucloud-backend {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout.strip()


def _wait_healthy(
    url: str, process: subprocess.Popen[bytes], log: Path, verify: ssl.SSLContext | bool = True
) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the backend exited with {process.returncode}:\n{log.read_text()}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/healthz", timeout=2, verify=verify).status_code == 200:
                return
        time.sleep(0.1)
    raise RuntimeError(f"the backend did not become healthy within {START_TIMEOUT:g}s:\n{log.read_text()}")


@dataclass(frozen=True)
class Tls:
    """HTTPS for the backend: its certificate and key, and the CA that clients trust (SSL_CERT_FILE)."""

    cert: Path
    key: Path
    ca: Path


@contextlib.contextmanager
def running_backend(
    data_dir: Path, *, env: dict[str, str] | None = None, tls: Tls | None = None
) -> Iterator[Backend]:
    """Start the backend in `data_dir` (extra `GPUCLOUD_*` settings in `env`; with `tls`, HTTPS at
    https://localhost:PORT); stop it (SIGTERM, then SIGKILL) when the block ends."""
    port = _free_port()
    env = {
        **os.environ,
        "GPUCLOUD_DATA_DIR": str(data_dir),
        "GPUCLOUD_PORT": str(port),
        "GPUCLOUD_HOST": "127.0.0.1",
        **(env or {}),
    }
    _cli(env, "create-project", "acceptance")
    api_key = _cli(env, "create-api-key", "--project", "acceptance", "--role", "admin")
    log = data_dir / "backend.log"
    with log.open("wb") as sink:
        tls_flags = ["--tls-cert", str(tls.cert), "--tls-key", str(tls.key)] if tls else []
        process = subprocess.Popen(
            [str(BACKEND), "serve", *tls_flags], env=env, stdout=sink, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"https://localhost:{port}" if tls else f"http://127.0.0.1:{port}"
    client = GpuCloudClient(url, api_key, max_retries=2)
    try:
        _wait_healthy(url, process, log, verify=ssl.create_default_context(cafile=tls.ca) if tls else True)
        yield Backend(url, api_key, client, data_dir, process)
    finally:
        client.close()
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


class LosingProxy:
    """An HTTP proxy in front of the backend that can lose answers: while `lose` matches a request
    (method, path), the request reaches the backend but the client gets a 503 instead of its answer, as
    when a connection breaks after the server committed. Used to test creates whose outcome is unknown."""

    def __init__(self, backend_url: str) -> None:
        import http.server
        import threading

        self.backend_url = backend_url
        self.lose: tuple[str, str] | None = None
        self.lost: list[tuple[str, str, int]] = []
        self.seen: list[tuple[str, str, int]] = []  # every forwarded request: method, path, status
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _forward(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {
                    k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")
                }
                answer = httpx.request(
                    self.command, proxy.backend_url + self.path, content=body, headers=headers, timeout=30
                )
                proxy.seen.append((self.command, self.path, answer.status_code))
                if proxy.lose == (self.command, self.path.split("?")[0]):
                    proxy.lost.append((self.command, self.path, answer.status_code))
                    self.send_response(503)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                self.send_response(answer.status_code)
                for key, value in answer.headers.items():
                    if key.lower() not in (
                        "content-length",
                        "transfer-encoding",
                        "connection",
                        "content-encoding",
                    ):
                        self.send_header(key, value)
                self.send_header("content-length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            do_GET = do_POST = do_PATCH = do_DELETE = _forward

            def log_message(self, format: str, *args: object) -> None:  # quiet
                return

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
