"""What the warm daemon builds ahead for every launch (`provider.resources.preload`), and that it is
what a launch would build itself."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from provider._proto import tfplugin6_pb2 as pb
from provider.framework import protocol
from provider.framework.server import ProviderServer
from provider.resources.provider import GpuCloudProvider

REPO = Path(__file__).resolve().parents[3]


def test_preload_builds_every_schema_message_of_the_provider() -> None:
    probe = (
        "import json, sys; sys.path.insert(0, sys.argv[1]);"
        "from provider.plugin.main import WARM_IMPORTS; [__import__(name) for name in WARM_IMPORTS];"
        "from provider.framework import protocol;"
        "from provider.resources.provider import GpuCloudProvider as P;"
        "p = P(); schemas = [p.schema, *(r.schema for r in [*p.resources(), *p.data_sources(),"
        " *p.ephemeral_resources(), *p.list_resources(), *p.actions()])];"
        "print(json.dumps(all(s in protocol._SCHEMA_MESSAGES for s in schemas)))"
    )
    result = subprocess.run(
        [sys.executable, "-I", "-c", probe, str(REPO)], capture_output=True, text=True, check=True, env={}
    )
    assert json.loads(result.stdout) is True


def test_schema_response_from_kept_messages_is_the_one_built_afresh() -> None:
    def response() -> bytes:
        answer = ProviderServer(GpuCloudProvider()).get_provider_schema(pb.GetProviderSchema.Request())
        return answer.SerializeToString(deterministic=True)

    kept = response()
    protocol._SCHEMA_MESSAGES.clear()
    fresh = response()
    assert kept == fresh and len(protocol._SCHEMA_MESSAGES) > 20
