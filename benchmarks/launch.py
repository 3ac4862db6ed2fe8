"""Provider start-up: spawn to handshake line, the way Terraform launches it (target: median <= 60 ms).

The provider is installed into a throwaway filesystem mirror with `write_mirror` and its launcher is
spawned with the environment Terraform sets (magic cookie, protocol versions, a P-521 client
certificate for mutual TLS). Figures, over LAUNCHES launches each:

- handshake: spawn until the handshake line is read (what Terraform waits for before connecting);
- ready: spawn until a health check over mutual TLS is answered (the server and the provider loaded;
  includes this client's own channel set-up);
- baseline: spawn until exit of `python -c pass` with the same interpreter, in the same run.

Both launch paths are measured: warm (the launcher hands the launch to a pre-imported per-user daemon
that forks the provider; the default) and cold (GPUCLOUD_PROVIDER_WARM=0: the launcher imports and
serves the provider itself).

Every launched provider is stopped with SIGTERM, which removes its socket directory.
"""

from __future__ import annotations

import contextlib
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

LAUNCHES = 25
TARGET_MEDIAN_MS = 60.0


def _summary(seconds: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000.0 for s in seconds)
    return {
        "median": round(statistics.median(ms), 1),
        "p90": round(statistics.quantiles(ms, n=10)[8], 1),
        "min": round(ms[0], 1),
    }


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)
    if process.stdout is not None:
        process.stdout.close()


def _time_handshakes(launcher: Path, env: dict[str, str], launches: int) -> list[float]:
    samples = []
    for _ in range(launches):
        started = time.perf_counter()
        process = subprocess.Popen(
            [str(launcher)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
        )
        assert process.stdout is not None
        line = process.stdout.readline()
        samples.append(time.perf_counter() - started)
        _stop(process)
        if not line.startswith(b"1|6|unix|"):
            raise RuntimeError(f"unexpected handshake line {line!r}")
    return samples


def _time_ready(launcher: Path, env: dict[str, str], client_cert: Any, launches: int) -> list[float]:
    from provider._proto import health_pb2, health_pb2_grpc
    from tests.provider.plugin.launching import Handshake, LaunchedPlugin

    samples = []
    for _ in range(launches):
        started = time.perf_counter()
        process = subprocess.Popen(
            [str(launcher)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
        )
        assert process.stdout is not None
        plugin = LaunchedPlugin(process, Handshake.parse(process.stdout.readline().decode()))
        with plugin.channel(client_cert) as channel:
            health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service="plugin"), timeout=30
            )
        samples.append(time.perf_counter() - started)
        _stop(process)
    return samples


def _time_bare_python(launches: int) -> list[float]:
    samples = []
    for _ in range(launches):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        samples.append(time.perf_counter() - started)
    return samples


def _wait_for_warm_daemon(env: dict[str, str], seconds: float = 30.0) -> None:
    """Until the daemon the warm-up started accepts connections: a launch that finds none runs cold."""
    from provider.plugin.warm_client import runtime_directory

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for path in Path(runtime_directory(env)).glob("warm-*.sock"):
            with socket.socket(socket.AF_UNIX) as probe, contextlib.suppress(OSError):
                probe.connect(str(path))
                return
        time.sleep(0.05)
    raise RuntimeError(f"no warm daemon answered within {seconds:.0f} s")


def run(launches: int = LAUNCHES) -> dict[str, Any]:
    """Measure launches and transport cost, print tables, and return the figures (milliseconds)."""
    from benchmarks.stats import table
    from provider.plugin.install import write_mirror
    from tests.provider.plugin.launching import make_client_certificate, terraform_environment

    client_cert = make_client_certificate()
    env = terraform_environment(client_cert)
    env.pop("PYTHONPATH", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as on a user's machine
    with tempfile.TemporaryDirectory(prefix="bench-launch-") as mirror:
        launcher = write_mirror(
            mirror,
            namespace="gpucloud",
            type_name="gpucloud",
            version="0.0.0-bench",
            launch_module="provider.plugin.main",
        )
        cold_env = {**env, "GPUCLOUD_PROVIDER_WARM": "0"}
        _time_handshakes(launcher, cold_env, 3)  # warm the page cache and bytecode caches
        _time_handshakes(launcher, env, 3)  # starts the warm daemon (these launches run cold)
        _wait_for_warm_daemon(env)
        handshake = _summary(_time_handshakes(launcher, env, launches))
        ready = _summary(_time_ready(launcher, env, client_cert, launches))
        cold_handshake = _summary(_time_handshakes(launcher, cold_env, launches))
        cold_ready = _summary(_time_ready(launcher, cold_env, client_cert, launches))
    baseline = _summary(_time_bare_python(launches))
    figures: dict[str, Any] = {
        "launches": launches,
        "handshake_ms": handshake,
        "ready_ms": ready,
        "cold_handshake_ms": cold_handshake,
        "cold_ready_ms": cold_ready,
        "python_c_pass_ms": baseline,
        "handshake_to_baseline_ratio": round(handshake["median"] / baseline["median"], 2),
        "target_median_ms": TARGET_MEDIAN_MS,
        "meets_target": handshake["median"] <= TARGET_MEDIAN_MS,
    }
    rows = [
        [name, f"{values['median']:.1f}", f"{values['p90']:.1f}", f"{values['min']:.1f}"]
        for name, values in (
            ("warm provider: spawn -> handshake line", handshake),
            ("warm provider: spawn -> health check answered (mTLS)", ready),
            ("cold provider: spawn -> handshake line", cold_handshake),
            ("cold provider: spawn -> health check answered (mTLS)", cold_ready),
            ("baseline: python -c pass (spawn -> exit)", baseline),
        )
    ]
    print(f"provider launch, {launches} launches each (ms)")
    print(table(["measure", "median", "p90", "min"], rows))
    verdict = "meets" if figures["meets_target"] else "MISSES"
    print(
        f"warm handshake median / baseline median = {figures['handshake_to_baseline_ratio']}x; "
        f"target median <= {TARGET_MEDIAN_MS:.0f} ms: {verdict}"
    )
    figures["transport"] = tls_cost()
    figures["transport_out_of_process"] = relay_cost_out_of_process()
    return figures


def relay_cost_out_of_process(calls: int = 1000) -> dict[str, float]:
    """Median health-check latency against a launched plugin: mutual TLS via the relay vs plaintext."""
    from provider._proto import health_pb2, health_pb2_grpc
    from tests.provider.plugin.launching import (
        FAKE_PROVIDER,
        REPO,
        launched,
        make_client_certificate,
        terraform_environment,
    )

    client_cert = make_client_certificate()
    modes = {
        "mutual TLS by ssl, h2 on the loop (default)": terraform_environment(client_cert),
        "plaintext, h2 on the loop (TF_DISABLE_PLUGIN_TLS)": terraform_environment(
            None, TF_DISABLE_PLUGIN_TLS="1"
        ),
    }
    results: dict[str, float] = {}
    for name, env in modes.items():
        with launched(FAKE_PROVIDER, env, cwd=REPO) as plugin, plugin.channel(client_cert) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            request = health_pb2.HealthCheckRequest(service="plugin")
            for _ in range(50):
                stub.Check(request, timeout=30)
            samples = []
            for _ in range(calls):
                started = time.perf_counter()
                stub.Check(request, timeout=30)
                samples.append(time.perf_counter() - started)
            results[name] = round(statistics.median(samples) * 1000.0, 3)
    from benchmarks.stats import table

    print(f"transport cost, client in another process: median of {calls} health checks (ms)")
    print(table(["transport", "small RPC median"], [[name, f"{ms:.3f}"] for name, ms in results.items()]))
    return results


RPC_CALLS = 400
LARGE_STATE_BYTES = 8 * 1024 * 1024


class _EchoProvider:
    """ReadResource echoes the state back: the payload crosses the transport twice."""

    def read_resource(self, request: Any) -> Any:
        from provider._proto import tfplugin6_pb2

        return tfplugin6_pb2.ReadResource.Response(new_state=request.current_state)


def _rpc_latencies(channel: Any, calls: int) -> tuple[float, float]:
    """(median ms of a small RPC, ms for one ReadResource round trip of LARGE_STATE_BYTES)."""
    from provider._proto import health_pb2, health_pb2_grpc, tfplugin6_pb2, tfplugin6_pb2_grpc

    health = health_pb2_grpc.HealthStub(channel)
    request = health_pb2.HealthCheckRequest(service="plugin")
    health.Check(request, timeout=30)
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        health.Check(request, timeout=30)
        samples.append(time.perf_counter() - started)
    big = tfplugin6_pb2.ReadResource.Request(
        current_state=tfplugin6_pb2.DynamicValue(msgpack=os.urandom(LARGE_STATE_BYTES))
    )
    provider = tfplugin6_pb2_grpc.ProviderStub(channel)
    provider.ReadResource(big, timeout=60)  # warm-up: buffers grow on the first large message
    large = []
    for _ in range(7):
        started = time.perf_counter()
        provider.ReadResource(big, timeout=60)
        large.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000.0, statistics.median(large) * 1000.0


def tls_cost(calls: int = RPC_CALLS) -> dict[str, Any]:
    """Per-RPC cost of the transports, in-process: grpcio's server (the provider's before the HTTP/2
    server), and ours in plaintext and behind mutual TLS."""
    import asyncio
    import socket
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import grpc

    from benchmarks.stats import table
    from provider._proto import health_pb2_grpc, tfplugin6_pb2_grpc
    from provider.plugin.http2 import MAX_MESSAGE_BYTES, GrpcServer
    from provider.plugin.selfsigned import generate_server_certificate
    from provider.plugin.services import AsyncProviderServicer, HealthServicer, register_services
    from provider.plugin.tls_terminator import TlsTerminator, server_ssl_context, trust_client
    from tests.provider.plugin.launching import make_client_certificate

    limits = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]
    server_cert = generate_server_certificate()
    client_cert = make_client_certificate()
    executor = ThreadPoolExecutor(8)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-tls-") as directory:
        grpcio_path = os.path.join(directory, "grpcio.sock")
        loop = asyncio.new_event_loop()
        threading.Thread(target=loop.run_forever, daemon=True).start()

        async def start_grpcio() -> Any:
            server = grpc.aio.server(options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                                              ("grpc.max_send_message_length", MAX_MESSAGE_BYTES)])
            echo: Any = AsyncProviderServicer(_EchoProvider(), executor)  # RPC methods made at import
            tfplugin6_pb2_grpc.add_ProviderServicer_to_server(echo, server)
            health_pb2_grpc.add_HealthServicer_to_server(HealthServicer(), server)  # type: ignore[arg-type]
            server.add_insecure_port("unix:" + grpcio_path)
            await server.start()
            return server

        grpcio_server = asyncio.run_coroutine_threadsafe(start_grpcio(), loop).result()
        ours = GrpcServer()
        register_services(ours, AsyncProviderServicer(_EchoProvider(), executor), on_shutdown=lambda: None)
        mtls = server_ssl_context(cert_pem=server_cert.pem, key_pem=server_cert.key_pem, directory=directory)
        trust_client(mtls, client_cert.cert_pem.decode())
        paths = {}
        for name, context in (("plain", None), ("mtls", mtls)):
            paths[name] = os.path.join(directory, f"{name}.sock")
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(paths[name])
            listener.listen(16)
            terminator = TlsTerminator(listener, context)
            terminator.start()
            terminator.serve(ours)
        secure = [("grpc.ssl_target_name_override", "localhost"), *limits]
        plain = {
            "grpcio's server, plaintext (before)": grpcio_path,
            "ours (h2 on the loop), plaintext": paths["plain"],
        }
        channels = {
            **{name: grpc.insecure_channel("unix:" + path, options=limits) for name, path in plain.items()},
            "ours, mutual TLS by ssl (what Terraform gets)": grpc.secure_channel(
                "unix:" + paths["mtls"],
                grpc.ssl_channel_credentials(server_cert.pem, client_cert.key_pem, client_cert.cert_pem),
                options=secure,
            ),
        }
        for name, channel in channels.items():
            with channel:
                small, large = _rpc_latencies(channel, calls)
            results[name] = {"small_rpc_median_ms": round(small, 3), "large_rpc_ms": round(large, 1)}
        asyncio.run_coroutine_threadsafe(grpcio_server.stop(0), loop).result()
    print(f"transport cost, in-process: {calls} health checks, and ReadResource echoing 8 MiB (ms)")
    rows = [
        [name, f"{r['small_rpc_median_ms']:.3f}", f"{r['large_rpc_ms']:.1f}"] for name, r in results.items()
    ]
    print(table(["transport", "small RPC median", "8 MiB round trip"], rows))
    return results


def main() -> None:
    run()


if __name__ == "__main__":
    main()
