"""Guard the fast launch path: what runs before the handshake line must not pull in heavy modules."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.provider.plugin.launching import REPO

HEAVY = ["grpc", "google.protobuf", "cryptography", "asyncio", "ssl", "logging", "typing", "argparse"]


def test_modules_before_the_handshake_line_stay_light() -> None:
    probe = (
        "import sys, json; sys.path.append(sys.argv[1]);"
        "import provider.plugin.main, provider.plugin.launch, provider.plugin.selfsigned;"
        "provider.plugin.selfsigned.generate_server_certificate();"
        "print(json.dumps(sorted(sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c", probe, str(REPO)], capture_output=True, text=True, check=True
    )
    loaded = set(json.loads(result.stdout))
    assert not [name for name in HEAVY if name in loaded]
