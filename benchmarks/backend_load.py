"""Backend API under a bounded load on 127.0.0.1: GET /v1/clusters/{id} and POST /v1/ssh-keys.

Targets (issue 26), at 8 concurrent requests: GET /v1/clusters/{id} at >= 25 % of the bare ASGI rate
with p99 <= 10 ms, and POST p99 <= 50 ms, on SQLite and on PostgreSQL.

Each store (SQLite, and PostgreSQL when GPUCLOUD_TEST_POSTGRES_URL is set, as under `make bench`) gets a
fresh migrated database and a real `gpucloud-backend serve` process (uvicorn, request logging, auth,
the database-backed rate limiter, idempotency and audit all on). A bare ASGI app under the same uvicorn
is measured in the same run as the ceiling, right before each store (its ratios use that figure). The
load generator is a small keep-alive HTTP/1.1 client on asyncio streams (so the client costs as little
as possible) at a fixed concurrency. GET /healthz of the same server process shows what the framework
stack alone (uvicorn, FastAPI, middleware, log line, metrics) allows, between the bare ceiling and the
real GET.

The GET repeats one unchanged cluster, so after its first answer the server serves it from its answer
cache (backend/api/cluster_reads.py; each GET still checks the database's change stamp). A second
`serve` with the cache off (GPUCLOUD_CLUSTER_READ_CACHE_ENTRIES=0) measures the same GET as the route
itself answers it: what each GET costs while the database changes between them.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

CONCURRENCY = int(os.environ.get("GPUCLOUD_BENCH_CONCURRENCY", "8"))
GET_REQUESTS = int(os.environ.get("GPUCLOUD_BENCH_GET_REQUESTS", "3000"))
POST_REQUESTS = int(os.environ.get("GPUCLOUD_BENCH_POST_REQUESTS", "1000"))
WARMUP = 200
TARGET_GET_RATIO = 0.25
TARGET_GET_P99_MS = 10.0
TARGET_POST_P99_MS = 50.0

BARE_APP = """
import json, sys, uvicorn
BODY = json.dumps({"id": "cls_bench", "status": "RUNNING", "name": "bench"}).encode()
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": BODY})
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=False, log_level="warning")
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_ready(port: int, path: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}{path}", timeout=1).status_code < 500:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError("server did not become ready")


@contextmanager
def _server(command: list[str], env: dict[str, str], port: int, ready_path: str) -> Iterator[int]:
    """Run the server; yields its pid."""
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_ready(port, ready_path, process)
        yield process.pid
    finally:
        process.terminate()
        process.wait(timeout=20)


async def _worker(
    port: int,
    requests: Callable[[int], bytes],
    next_index: Callable[[], int | None],
    latencies: list[float],
    statuses: dict[int, int],
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while (index := next_index()) is not None:
            started = time.perf_counter()
            writer.write(requests(index))
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if length:
                await reader.readexactly(length)
            latencies.append(time.perf_counter() - started)
            statuses[status] = statuses.get(status, 0) + 1
    finally:
        writer.close()


async def _load(port: int, requests: Callable[[int], bytes], count: int) -> dict[str, Any]:
    counter = iter(range(count))
    latencies: list[float] = []
    statuses: dict[int, int] = {}

    def next_index() -> int | None:
        return next(counter, None)

    started = time.perf_counter()
    await asyncio.gather(
        *(_worker(port, requests, next_index, latencies, statuses) for _ in range(CONCURRENCY))
    )
    wall = time.perf_counter() - started
    ordered = sorted(latencies)
    return {
        "requests": count,
        "rps": round(count / wall, 1),
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 2),
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
    }


def _cpu_seconds(pid: int) -> float | None:
    """CPU time (user + system) the process has used so far; None where /proc is not there."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _timed(pid: int, port: int, requests: Callable[[int], bytes], count: int) -> dict[str, Any]:
    """One load, with the server's CPU time per request: on a shared machine it moves far less than
    the rates, since time spent waiting for a core does not count."""
    before = _cpu_seconds(pid)
    figures = asyncio.run(_load(port, requests, count))
    after = _cpu_seconds(pid)
    if before is not None and after is not None:
        figures["server_cpu_us"] = round((after - before) / count * 1e6)
    return figures


def _measure(pid: int, port: int, requests: Callable[[int], bytes], count: int) -> dict[str, Any]:
    asyncio.run(_load(port, requests, min(WARMUP, count)))
    return _timed(pid, port, requests, count)


def _get_request(path: str, key: str) -> Callable[[int], bytes]:
    raw = (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n\r\n").encode()
    return lambda _index: raw


def _post_ssh_key_request(key: str, public_keys: list[str]) -> Callable[[int], bytes]:
    def build(index: int) -> bytes:
        body = json.dumps({"name": f"bench-{index}", "public_key": public_keys[index]}).encode()
        return (
            f"POST /v1/ssh-keys HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: application/json\r\nIdempotency-Key: {uuid.uuid4()}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body

    return build


def _public_keys(count: int) -> list[str]:
    return [
        ed25519.Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
        for _ in range(count)
    ]


@contextmanager
def _postgres_database() -> Iterator[str | None]:
    admin_url = os.environ.get("GPUCLOUD_TEST_POSTGRES_URL")
    if not admin_url:
        yield None
        return
    name = f"gpucloud_bench_{uuid.uuid4().hex[:10]}"
    admin = create_engine(make_url(admin_url), isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def _cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "backend.cli", *args], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def _measure_backend(store: str, database_url: str, data_dir: Path) -> dict[str, Any]:
    port = _free_port()
    env = {
        **os.environ,
        "GPUCLOUD_DATABASE_URL": database_url,
        "GPUCLOUD_DATA_DIR": str(data_dir),
        "GPUCLOUD_EMBEDDED_WORKER": "false",
        "GPUCLOUD_EMBEDDED_BILLING": "false",
        "GPUCLOUD_RATE_LIMIT_REQUESTS": "1000000000",
        # /healthz is measured without authenticating: 3000 such requests from one address.
        "GPUCLOUD_UNAUTHENTICATED_RATE_LIMIT_REQUESTS": "0",
    }
    _cli(env, "migrate")
    _cli(env, "create-project", "bench")
    key = _cli(env, "create-api-key", "--project", "bench", "--role", "admin")
    public_keys = _public_keys(POST_REQUESTS + WARMUP)
    serve = [sys.executable, "-m", "backend.cli", "serve", "--port", str(port)]
    with _server(serve, env, port, "/readyz") as pid:
        created = httpx.post(
            f"http://127.0.0.1:{port}/v1/clusters",
            headers={"Authorization": f"Bearer {key}"},
            json={"name": "bench", "region": "us-east-1", "instance_type": "1xH100"},
        )
        created.raise_for_status()
        framework = _measure(pid, port, _get_request("/healthz", key), GET_REQUESTS)
        get_cluster = _get_request(f"/v1/clusters/{created.json()['id']}", key)
        get = _measure(pid, port, get_cluster, GET_REQUESTS)
        post_requests = _post_ssh_key_request(key, public_keys)
        asyncio.run(_load(port, lambda i: post_requests(POST_REQUESTS + i), WARMUP))
        post = _timed(pid, port, post_requests, POST_REQUESTS)
    # The same GET with the answer cache off: what every GET costs while the database changes between
    # them (a cluster being provisioned, a busy project), and what a cache miss costs.
    uncached_env = {**env, "GPUCLOUD_CLUSTER_READ_CACHE_ENTRIES": "0"}
    with _server(serve, uncached_env, port, "/readyz") as pid:
        uncached = _measure(pid, port, get_cluster, GET_REQUESTS)
    return {"store": store, "healthz": framework, "get_cluster": get, "get_cluster_uncached": uncached,
            "post_ssh_key": post}


def _measure_bare() -> dict[str, Any]:
    port = _free_port()
    with _server([sys.executable, "-c", BARE_APP, str(port)], dict(os.environ), port, "/") as pid:
        return _measure(pid, port, _get_request("/", "none"), GET_REQUESTS)


def _with_bare(store: dict[str, Any]) -> dict[str, Any]:
    """A store's figures with the bare ceiling measured just before them, ratios and verdicts."""
    bare = store["bare_asgi"]["rps"]
    store["get_ratio_to_bare"] = round(store["get_cluster"]["rps"] / bare, 3)
    store["targets"] = {
        f"GET >= {TARGET_GET_RATIO:.0%} of bare": store["get_ratio_to_bare"] >= TARGET_GET_RATIO,
        f"GET p99 <= {TARGET_GET_P99_MS:.0f} ms": store["get_cluster"]["p99_ms"] <= TARGET_GET_P99_MS,
        f"POST p99 <= {TARGET_POST_P99_MS:.0f} ms": store["post_ssh_key"]["p99_ms"] <= TARGET_POST_P99_MS,
    }
    return store


def run() -> dict[str, Any]:
    """Run the load and print a table; returns the figures."""
    results: dict[str, Any] = {"concurrency": CONCURRENCY, "stores": []}
    with tempfile.TemporaryDirectory(prefix="gpucloud-bench-") as tmp:
        bare = _measure_bare()
        store = _measure_backend("sqlite", f"sqlite:///{tmp}/bench.db", Path(tmp))
        results["stores"].append(_with_bare({**store, "bare_asgi": bare}))
        with _postgres_database() as postgres_url:
            if postgres_url is None:
                results["postgresql_skipped"] = "GPUCLOUD_TEST_POSTGRES_URL not set (run under make bench)"
            else:
                bare = _measure_bare()
                store = _measure_backend("postgresql", postgres_url, Path(tmp))
                results["stores"].append(_with_bare({**store, "bare_asgi": bare}))
    _print(results)
    return results


def _print(results: dict[str, Any]) -> None:
    from benchmarks.stats import table

    def row(label: str, figures: dict[str, Any], bare: dict[str, Any]) -> list[str]:
        cpu = figures.get("server_cpu_us")
        return [
            label,
            f"{figures['rps']:.0f}",
            f"{figures['p50_ms']:.2f}",
            f"{figures['p99_ms']:.2f}",
            f"{figures['rps'] / bare['rps']:.2f}",
            "-" if cpu is None else str(cpu),
            "-" if cpu is None or not bare.get("server_cpu_us") else f"{cpu / bare['server_cpu_us']:.1f}",
        ]

    rows = []
    for entry in results["stores"]:
        bare = entry["bare_asgi"]
        rows.append(row(f"bare ASGI GET / (before {entry['store']})", bare, bare))
        for label, key in (
            ("GET /healthz (app, no DB)", "healthz"),
            ("GET /v1/clusters/{id}", "get_cluster"),
            ("GET /v1/clusters/{id}, cache off", "get_cluster_uncached"),
            ("POST /v1/ssh-keys", "post_ssh_key"),
        ):
            rows.append(row(f"{entry['store']} {label}", entry[key], bare))
    print(
        f"backend load, concurrency {results['concurrency']} on 127.0.0.1 "
        f"(targets at 8: GET >= {TARGET_GET_RATIO:.0%} of bare ASGI and p99 <= {TARGET_GET_P99_MS:.0f} ms, "
        f"POST p99 <= {TARGET_POST_P99_MS:.0f} ms)"
    )
    print(table(["scenario", "req/s", "p50 ms", "p99 ms", "x bare", "server CPU us/req", "x bare CPU"], rows))
    for entry in results["stores"]:
        statuses = {k: entry[k]["statuses"] for k in ("get_cluster", "get_cluster_uncached", "post_ssh_key")}
        verdicts = ", ".join(
            f"{name}: {'met' if met else 'MISSED'}" for name, met in entry["targets"].items()
        )
        print(f"{entry['store']}: statuses {statuses}; {verdicts}")
    if "postgresql_skipped" in results:
        print(f"postgresql: skipped ({results['postgresql_skipped']})")


if __name__ == "__main__":
    run()
