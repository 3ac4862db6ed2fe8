"""The filesystem mirror: layout, launcher, and a package directory that never changes (lock file)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from provider._proto import grpc_controller_pb2, grpc_controller_pb2_grpc, health_pb2, health_pb2_grpc
from provider.plugin.install import cli_config_block, terraform_platform, write_mirror
from tests.provider.plugin.launching import launched, make_client_certificate, terraform_environment

FAKE_MODULE = "tests.provider.plugin.fake_provider"


def _snapshot(directory: Path) -> dict[str, str]:
    """Every path under `directory` with the SHA-256 of its bytes (directories map to "")."""
    return {
        str(path.relative_to(directory)): hashlib.sha256(path.read_bytes()).hexdigest()
        if path.is_file()
        else ""
        for path in sorted(directory.rglob("*"))
    }


def _write_fake(mirror: Path, version: str = "0.1.0") -> Path:
    return write_mirror(
        mirror, namespace="gpucloud", type_name="fake", version=version, launch_module=FAKE_MODULE
    )


def test_write_mirror_layout_and_exec_bit(tmp_path: Path) -> None:
    launcher = _write_fake(tmp_path / "mirror")
    expected_dir = (
        tmp_path / "mirror" / "registry.terraform.io" / "gpucloud" / "fake" / "0.1.0" / terraform_platform()
    )
    assert launcher == expected_dir / "terraform-provider-fake_v0.1.0"
    assert [p.name for p in expected_dir.iterdir()] == [launcher.name]
    mode = stat.S_IMODE(launcher.stat().st_mode)
    assert mode & 0o111 == 0o111
    text = launcher.read_text()
    assert text.startswith("#!/bin/sh\n")
    assert f"exec {sys.executable} -I -S " in text
    assert "from provider.plugin.warm_client import launch" in text
    assert f'launch("{FAKE_MODULE}", "' in text  # the warm path, or this module's main() when cold


def test_write_mirror_is_reproducible(tmp_path: Path) -> None:
    first = _snapshot_after_write(tmp_path / "a")
    second = _snapshot_after_write(tmp_path / "a")
    assert first == second
    assert _snapshot_after_write(tmp_path / "b") == first  # content does not depend on the mirror path


def _snapshot_after_write(mirror: Path) -> dict[str, str]:
    _write_fake(mirror)
    return _snapshot(mirror)


def test_write_mirror_rejects_unknown_module(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not importable"):
        write_mirror(
            tmp_path, namespace="n", type_name="t", version="1.0.0", launch_module="no_such_module.main"
        )


def test_launcher_starts_isolated_and_leaves_the_package_untouched(tmp_path: Path) -> None:
    launcher = _write_fake(tmp_path / "mirror")
    package_dir = launcher.parent
    before = _snapshot(tmp_path / "mirror")
    # Terraform's working directory must not shadow our modules (`python -m` would put it on sys.path).
    workdir = tmp_path / "work"
    (workdir / "provider").mkdir(parents=True)
    (workdir / "provider" / "__init__.py").write_text(
        "raise SystemExit('imported from the working directory')\n"
    )
    (workdir / "tests").mkdir()
    (workdir / "tests" / "__init__.py").write_text(
        "raise SystemExit('imported from the working directory')\n"
    )
    client_cert = make_client_certificate()
    env = terraform_environment(client_cert)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # users' machines write bytecode; it must not land in the mirror
    env.pop("PYTHONPATH", None)
    for _ in range(2):
        with launched([str(launcher)], env, cwd=workdir) as plugin:
            with plugin.channel(client_cert) as channel:
                status = health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(), timeout=20
                )
                assert status.status == health_pb2.HealthCheckResponse.SERVING
                with contextlib.suppress(grpc.RpcError):  # the process may exit before answering
                    grpc_controller_pb2_grpc.GRPCControllerStub(channel).Shutdown(grpc_controller_pb2.Empty())
            assert plugin.process.wait(10) == 0
    assert _snapshot(tmp_path / "mirror") == before
    assert not (package_dir / "__pycache__").exists()


def test_cli_config_block_includes_and_excludes_the_providers(tmp_path: Path) -> None:
    block = cli_config_block(tmp_path / "m${x}", ["registry.terraform.io/gpucloud/gpucloud"])
    assert block.startswith("provider_installation {\n  filesystem_mirror {\n")
    assert f'path    = "{tmp_path.resolve()}/m$${{x}}"' in block
    assert 'include = ["registry.terraform.io/gpucloud/gpucloud"]' in block
    assert 'direct {\n    exclude = ["registry.terraform.io/gpucloud/gpucloud"]' in block


def test_install_command_writes_mirror_and_prints_cli_config(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_", "PLUGIN_"))}
    result = subprocess.run(
        [
            str(Path(sys.executable).parent / "terraform-provider-gpucloud"),
            "install",
            "--mirror",
            str(tmp_path / "mirror"),
            "--version",
            "1.2.3",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert result.stdout == cli_config_block(tmp_path / "mirror", ["registry.terraform.io/gpucloud/gpucloud"])
    launcher = (
        tmp_path
        / "mirror"
        / "registry.terraform.io/gpucloud/gpucloud/1.2.3"
        / terraform_platform()
        / "terraform-provider-gpucloud_v1.2.3"
    )
    assert os.access(launcher, os.X_OK)
    assert 'launch("provider.plugin.main", "' in launcher.read_text()
