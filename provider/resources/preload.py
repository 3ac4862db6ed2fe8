"""Loaded ahead by the provider's warm daemon (`provider.plugin.main.WARM_IMPORTS`) before it forks one
process per launch: what a launch would otherwise build for itself, none of it configuration.

- The API client's modules and default TLS context (`provider.client.preload`): ~150 ms in each launch
  that runs `ConfigureProvider` (one per plan, two per apply).
- The message of every schema (`framework.protocol.schema_to_pb` keeps one per schema): the launch that
  answers `GetProviderSchema`, the first of every command, assembles the response from them (~0.1 ms
  instead of 2-4 ms, more in a freshly forked process).

A cold launch does not import this module (it would pay now for what it may never need).
"""

from __future__ import annotations

import provider.client.preload  # noqa: F401
from provider._proto import tfplugin6_pb2 as pb
from provider.framework.server import ProviderServer
from provider.resources.provider import GpuCloudProvider

ProviderServer(GpuCloudProvider()).get_provider_schema(pb.GetProviderSchema.Request())
