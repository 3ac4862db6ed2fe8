"""The real executable, launched with the environment Terraform sets, spoken to as Terraform speaks."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from google.protobuf import empty_pb2

from provider._proto import (
    grpc_broker_pb2,
    grpc_broker_pb2_grpc,
    grpc_controller_pb2,
    grpc_controller_pb2_grpc,
    grpc_stdio_pb2_grpc,
    health_pb2,
    health_pb2_grpc,
    tfplugin6_pb2,
    tfplugin6_pb2_grpc,
)
from tests.provider.plugin.launching import (
    FAKE_PROVIDER,
    REPO,
    ClientCertificate,
    LaunchedPlugin,
    launched,
    make_client_certificate,
    terraform_environment,
)

RPC_TIMEOUT = 20


@pytest.fixture(scope="module")
def client_cert() -> ClientCertificate:
    return make_client_certificate()


def _check_health(plugin: LaunchedPlugin, cert: ClientCertificate | None) -> health_pb2.HealthCheckResponse:
    with plugin.channel(cert) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return stub.Check(health_pb2.HealthCheckRequest(service="plugin"), timeout=RPC_TIMEOUT)


def _shutdown(plugin: LaunchedPlugin, cert: ClientCertificate | None) -> float:
    """Calls GRPCController/Shutdown; returns seconds until the process has exited."""
    with plugin.channel(cert) as channel:
        started = time.monotonic()
        try:
            grpc_controller_pb2_grpc.GRPCControllerStub(channel).Shutdown(
                grpc_controller_pb2.Empty(), timeout=RPC_TIMEOUT
            )
        except grpc.RpcError as exc:  # the process may exit before the response is flushed
            assert exc.code() == grpc.StatusCode.UNAVAILABLE
        plugin.process.wait(10)
        return time.monotonic() - started


def test_launch_serves_provider_over_mutual_tls_and_shuts_down(client_cert: ClientCertificate) -> None:
    with launched(FAKE_PROVIDER, terraform_environment(client_cert), cwd=REPO) as plugin:
        handshake = plugin.handshake
        assert (handshake.core_version, handshake.protocol_version) == ("1", "6")
        assert (handshake.network, handshake.protocol) == ("unix", "grpc")
        assert handshake.server_cert_der is not None
        socket_dir = Path(handshake.address).parent
        assert socket_dir.stat().st_mode & 0o777 == 0o700

        assert _check_health(plugin, client_cert).status == health_pb2.HealthCheckResponse.SERVING
        with plugin.channel(client_cert) as channel:
            provider = tfplugin6_pb2_grpc.ProviderStub(channel)
            schema = provider.GetProviderSchema(
                tfplugin6_pb2.GetProviderSchema.Request(), timeout=RPC_TIMEOUT
            )
            assert list(schema.resource_schemas) == ["fake_thing"]
            # exceptions and missing RPCs come back as error diagnostics, never as gRPC errors
            validated = provider.ValidateResourceConfig(
                tfplugin6_pb2.ValidateResourceConfig.Request(type_name="fake_thing"), timeout=RPC_TIMEOUT
            )
            assert [d.summary for d in validated.diagnostics] == ["Internal Provider Error"]
            assert "boom in fake_thing" in validated.diagnostics[0].detail
            planned = provider.PlanResourceChange(
                tfplugin6_pb2.PlanResourceChange.Request(type_name="fake_thing"), timeout=RPC_TIMEOUT
            )
            assert planned.diagnostics[0].severity == tfplugin6_pb2.Diagnostic.ERROR
            assert "PlanResourceChange" in planned.diagnostics[0].detail

        assert _shutdown(plugin, client_cert) < 2.0
        assert plugin.process.returncode == 0
        assert not socket_dir.exists()
        assert plugin.process.stdout is not None
        assert plugin.process.stdout.read() == b"", "nothing but the handshake line may reach stdout"


def test_launch_without_cookie_explains_and_exits_1() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_", "PLUGIN_"))}
    result = subprocess.run(
        [str(Path(sys.executable).parent / "terraform-provider-gpucloud")],
        env=env,
        capture_output=True,
        timeout=30,
    )
    assert result.returncode == 1
    assert result.stdout == b""
    assert b"This binary is a plugin" in result.stderr


def test_launch_refuses_hosts_without_protocol_6(client_cert: ClientCertificate) -> None:
    env = terraform_environment(client_cert, PLUGIN_PROTOCOL_VERSIONS="4,5")
    result = subprocess.run(FAKE_PROVIDER, env=env, cwd=REPO, capture_output=True, timeout=30)
    assert result.returncode == 1
    assert result.stdout == b""
    assert b"protocol 6" in result.stderr


def test_launch_rejects_a_client_certificate_it_was_not_given(client_cert: ClientCertificate) -> None:
    impostor = make_client_certificate()
    with launched(FAKE_PROVIDER, terraform_environment(client_cert), cwd=REPO) as plugin:
        for wrong in (impostor, None):
            with pytest.raises(grpc.RpcError) as raised:
                _check_health(plugin, wrong)
            assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
        assert _check_health(plugin, client_cert).status == health_pb2.HealthCheckResponse.SERVING
        _shutdown(plugin, client_cert)


def test_launch_without_client_cert_still_pins_a_server_cert() -> None:
    with launched(FAKE_PROVIDER, terraform_environment(None), cwd=REPO) as plugin:
        assert plugin.handshake.server_cert_der is not None
        assert _check_health(plugin, None).status == health_pb2.HealthCheckResponse.SERVING
        _shutdown(plugin, None)


def test_launch_with_tls_disabled_serves_plaintext() -> None:
    with launched(FAKE_PROVIDER, terraform_environment(None, TF_DISABLE_PLUGIN_TLS="1"), cwd=REPO) as plugin:
        assert plugin.handshake.server_cert_der is None
        assert _check_health(plugin, None).status == health_pb2.HealthCheckResponse.SERVING
        _shutdown(plugin, None)


def test_launch_ignores_sigint_and_keeps_streams_open(client_cert: ClientCertificate) -> None:
    with launched(FAKE_PROVIDER, terraform_environment(client_cert), cwd=REPO) as plugin:
        with plugin.channel(client_cert) as channel:
            stdio = grpc_stdio_pb2_grpc.GRPCStdioStub(channel).StreamStdio(empty_pb2.Empty())
            plugin.process.send_signal(signal.SIGINT)
            time.sleep(0.3)
            assert plugin.process.poll() is None
            # parallel RPCs beside the pinned stream (Terraform's -parallelism is 10 by default)
            provider = tfplugin6_pb2_grpc.ProviderStub(channel)
            futures = [
                provider.GetProviderSchema.future(
                    tfplugin6_pb2.GetProviderSchema.Request(), timeout=RPC_TIMEOUT
                )
                for _ in range(20)
            ]
            assert all(f.result().resource_schemas for f in futures)
            stdio.cancel()
        assert _shutdown(plugin, client_cert) < 2.0


def test_launch_logs_hclog_json_at_tf_log_provider_level(client_cert: ClientCertificate) -> None:
    env = terraform_environment(client_cert, TF_LOG_PROVIDER="debug")
    with launched(FAKE_PROVIDER, env, cwd=REPO) as plugin:
        with plugin.channel(client_cert) as channel:
            tfplugin6_pb2_grpc.ProviderStub(channel).ValidateResourceConfig(
                tfplugin6_pb2.ValidateResourceConfig.Request(type_name="fake_thing"), timeout=RPC_TIMEOUT
            )
        _shutdown(plugin, client_cert)
        assert plugin.process.stderr is not None
        lines = [json.loads(line) for line in plugin.process.stderr.read().decode().splitlines()]
    levels = {entry["@level"] for entry in lines}
    assert {"debug", "error"} <= levels
    failure = next(entry for entry in lines if entry["@level"] == "error")
    assert failure["@message"] == "ValidateResourceConfig failed"
    assert "RuntimeError: boom in fake_thing" in failure["exception"]
    assert failure["@timestamp"].endswith("Z")


def test_debug_mode_prints_reattach_value_and_stops_on_ctrl_c() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_", "PLUGIN_"))}
    env["PYTHONPATH"] = str(REPO)
    process = subprocess.Popen(
        [*FAKE_PROVIDER, "--debug"], env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert process.stdout is not None
        export_line = ""
        while not export_line:
            line = process.stdout.readline().decode()
            assert line, "debug mode ended without printing TF_REATTACH_PROVIDERS"
            if "TF_REATTACH_PROVIDERS=" in line:
                export_line = line
        value = json.loads(export_line.split("TF_REATTACH_PROVIDERS=", 1)[1].strip().strip("'"))
        entry = value["registry.terraform.io/gpucloud/fake"]
        assert entry["Protocol"] == "grpc" and entry["ProtocolVersion"] == 6 and entry["Pid"] == process.pid
        socket_path = entry["Addr"]["String"]
        with grpc.insecure_channel(f"unix:{socket_path}") as channel:
            status = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=RPC_TIMEOUT
            )
            assert status.status == health_pb2.HealthCheckResponse.SERVING
            # reattached providers outlive terraform commands: Shutdown must not stop them
            grpc_controller_pb2_grpc.GRPCControllerStub(channel).Shutdown(grpc_controller_pb2.Empty())
        assert process.poll() is None
        process.send_signal(signal.SIGINT)
        assert process.wait(10) == 0
        assert not Path(socket_path).parent.exists()
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def test_sigterm_right_after_the_handshake_still_cleans_up(client_cert: ClientCertificate) -> None:
    with launched(FAKE_PROVIDER, terraform_environment(client_cert), cwd=REPO) as plugin:
        plugin.process.terminate()
        assert plugin.process.wait(10) == 0
        assert not Path(plugin.handshake.address).parent.exists()


def test_plugin_exits_when_terraform_dies(client_cert: ClientCertificate, tmp_path: Path) -> None:
    """A host killed with SIGKILL never calls Shutdown: the orphaned plugin must not linger."""
    env = terraform_environment(client_cert)
    host = subprocess.Popen(
        [
            "/bin/sh",
            "-c",
            f"{' '.join(FAKE_PROVIDER)} > {tmp_path / 'out'} & echo $! > {tmp_path / 'pid'}; sleep 60",
        ],
        env=env,
        cwd=REPO,
    )
    try:
        deadline = time.monotonic() + 60  # a ceiling: a cold Python start on a busy machine
        while not (tmp_path / "out").exists() or not (tmp_path / "out").read_text():
            assert time.monotonic() < deadline, "plugin never printed its handshake"
            time.sleep(0.05)
        plugin_pid = int((tmp_path / "pid").read_text())
        socket_dir = Path((tmp_path / "out").read_text().split("|")[3]).parent
        host.kill()
        host.wait(10)
        deadline = time.monotonic() + 60
        while _alive(plugin_pid):
            assert time.monotonic() < deadline, "orphaned plugin still running"
            time.sleep(0.1)
        assert not socket_dir.exists()
    finally:
        if host.poll() is None:
            host.kill()
            host.wait(10)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped by init) counts as gone
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(") ", 1)[1][0] != "Z"


def test_launch_carries_messages_far_above_grpcs_4_mib_default(client_cert: ClientCertificate) -> None:
    state = tfplugin6_pb2.DynamicValue(msgpack=os.urandom(40 * 1024 * 1024))
    with launched(FAKE_PROVIDER, terraform_environment(client_cert), cwd=REPO) as plugin:
        with plugin.channel(client_cert) as channel:
            response = tfplugin6_pb2_grpc.ProviderStub(channel).ReadResource(
                tfplugin6_pb2.ReadResource.Request(type_name="fake_thing", current_state=state), timeout=60
            )
        assert response.new_state == state
        _shutdown(plugin, client_cert)


def test_launch_runs_parallel_rpcs_beside_the_pinned_streams(client_cert: ClientCertificate) -> None:
    """Terraform holds GRPCStdio and GRPCBroker streams open; -parallelism RPCs must still run at once."""
    from tests.provider.plugin.fake_provider import CONCURRENT_APPLIES

    with launched(FAKE_PROVIDER, terraform_environment(client_cert), cwd=REPO) as plugin:
        with plugin.channel(client_cert) as channel:
            stdio = grpc_stdio_pb2_grpc.GRPCStdioStub(channel).StreamStdio(empty_pb2.Empty())
            broker_requests: queue.Queue[grpc_broker_pb2.ConnInfo | None] = queue.Queue()
            broker = grpc_broker_pb2_grpc.GRPCBrokerStub(channel).StartStream(iter(broker_requests.get, None))
            provider = tfplugin6_pb2_grpc.ProviderStub(channel)
            futures = [
                provider.ApplyResourceChange.future(
                    tfplugin6_pb2.ApplyResourceChange.Request(type_name="fake_thing"), timeout=RPC_TIMEOUT
                )
                for _ in range(CONCURRENT_APPLIES)
            ]
            results = [future.result() for future in futures]
            assert all(not result.diagnostics for result in results), results[0].diagnostics
            broker_requests.put(None)
            stdio.cancel()
            broker.cancel()
        assert _shutdown(plugin, client_cert) < 2.0


def test_debug_mode_stops_on_sigint_even_when_started_in_the_background(tmp_path: Path) -> None:
    """Non-interactive shells start background jobs with SIGINT ignored; Ctrl-C must still work."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_", "PLUGIN_"))}
    env["PYTHONPATH"] = str(REPO)
    out = tmp_path / "out"
    shell = subprocess.run(
        ["/bin/sh", "-c", f"{' '.join(FAKE_PROVIDER)} --debug > {out} 2>&1 & echo $!"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    pid = int(shell.stdout.strip())
    try:
        deadline = time.monotonic() + 60  # a ceiling: a cold Python start on a busy machine
        while "TF_REATTACH_PROVIDERS=" not in (out.read_text() if out.exists() else ""):
            assert time.monotonic() < deadline, "debug mode never printed TF_REATTACH_PROVIDERS"
            time.sleep(0.05)
        os.kill(pid, signal.SIGINT)
        deadline = time.monotonic() + 60
        while _alive(pid):
            assert time.monotonic() < deadline, "debug-mode provider ignored SIGINT"
            time.sleep(0.05)
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
