"""The committed stubs under provider/_proto/ must be exactly what `make generate` produces."""

from __future__ import annotations

import filecmp
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
STUBS = REPO / "provider" / "_proto"


def test_generated_stubs_match_committed(tmp_path: Path) -> None:
    subprocess.run(
        ["bash", str(REPO / "scripts" / "generate.sh"), "stubs", str(tmp_path)],
        check=True,
        capture_output=True,
        env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable},
    )
    fresh = sorted(p.name for p in tmp_path.iterdir() if "_pb2" in p.name)
    committed = sorted(p.name for p in STUBS.iterdir() if "_pb2" in p.name)
    assert fresh == committed, "run `make generate`: the set of stub files changed"
    _, mismatch, errors = filecmp.cmpfiles(tmp_path, STUBS, fresh, shallow=False)
    assert not mismatch and not errors, f"run `make generate`: stale stubs {mismatch + errors}"


def test_stubs_import_package_qualified() -> None:
    from provider._proto import (
        grpc_broker_pb2_grpc,
        grpc_controller_pb2_grpc,
        grpc_stdio_pb2_grpc,
        health_pb2_grpc,
        tfplugin6_pb2,
        tfplugin6_pb2_grpc,
    )

    assert tfplugin6_pb2.DESCRIPTOR.package == "tfplugin6"
    methods = {m.name for m in tfplugin6_pb2.DESCRIPTOR.services_by_name["Provider"].methods}
    assert {"GetProviderSchema", "GetResourceIdentitySchemas", "StopProvider"} <= methods
    assert hasattr(tfplugin6_pb2_grpc, "add_ProviderServicer_to_server")
    for module in (grpc_broker_pb2_grpc, grpc_controller_pb2_grpc, grpc_stdio_pb2_grpc, health_pb2_grpc):
        assert module.__name__.startswith("provider._proto.")
