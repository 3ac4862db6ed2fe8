"""A tiny stand-in for provider.framework.server.ProviderServer, served through the real launch path.

Run as `python -m tests.provider.plugin.fake_provider` (what the launch tests spawn). It answers
GetProviderSchema with one resource, raises inside ValidateResourceConfig (to prove exceptions become
diagnostics), echoes ReadResource (large messages), holds ApplyResourceChange until 12 run at once
(worker pool size), and implements nothing else (to prove missing RPCs become diagnostics).
"""

from __future__ import annotations

import threading

from provider._proto import tfplugin6_pb2

ADDRESS = "registry.terraform.io/gpucloud/fake"
CONCURRENT_APPLIES = 12  # more than Terraform's default -parallelism of 10
_all_applies_running = threading.Barrier(CONCURRENT_APPLIES)


class FakeProviderServer:
    def get_provider_schema(
        self, request: tfplugin6_pb2.GetProviderSchema.Request
    ) -> tfplugin6_pb2.GetProviderSchema.Response:
        block = tfplugin6_pb2.Schema.Block(
            attributes=[tfplugin6_pb2.Schema.Attribute(name="id", type=b'"string"', computed=True)]
        )
        return tfplugin6_pb2.GetProviderSchema.Response(
            provider=tfplugin6_pb2.Schema(block=tfplugin6_pb2.Schema.Block()),
            resource_schemas={"fake_thing": tfplugin6_pb2.Schema(block=block)},
            server_capabilities=tfplugin6_pb2.ServerCapabilities(plan_destroy=True),
        )

    def validate_resource_config(
        self, request: tfplugin6_pb2.ValidateResourceConfig.Request
    ) -> tfplugin6_pb2.ValidateResourceConfig.Response:
        raise RuntimeError("boom in " + request.type_name)

    def read_resource(
        self, request: tfplugin6_pb2.ReadResource.Request
    ) -> tfplugin6_pb2.ReadResource.Response:
        return tfplugin6_pb2.ReadResource.Response(new_state=request.current_state)

    def apply_resource_change(
        self, request: tfplugin6_pb2.ApplyResourceChange.Request
    ) -> tfplugin6_pb2.ApplyResourceChange.Response:
        """Returns only once CONCURRENT_APPLIES calls are in flight at the same time (raises otherwise)."""
        _all_applies_running.wait(timeout=15)
        return tfplugin6_pb2.ApplyResourceChange.Response(new_state=request.planned_state)


make_server = FakeProviderServer  # what tells the warm daemon this module serves a provider


def main() -> None:
    import sys

    from provider.plugin import serve

    serve(FakeProviderServer, debug="--debug" in sys.argv[1:], provider_address=ADDRESS)


if __name__ == "__main__":
    main()
