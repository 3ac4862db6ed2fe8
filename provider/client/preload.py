"""Loaded ahead by a warm provider daemon (through `provider.resources.preload`) before it forks one
process per launch: what the first API client of a launch would otherwise load or build.

- httpx imports httpcore (with h11, anyio, certifi, and trio where it is installed) only when a
  transport is built, and `HttpCore` imports tenacity then: ~100 ms (~250 ms with trio) in each
  launch that runs `ConfigureProvider`, i.e. one or two per plan or apply.
- The default TLS context (`http.tls_context()`, certifi's CA bundle, 30-45 ms to load) is built here
  once and inherited by every forked launch. It holds public CA certificates only: nothing of any
  launch's configuration. A launch whose environment names its own CA file or directory builds its own.

The throwaway client below is never used to send anything. A cold launch does not import this module
(it would pay now what it may never need).
"""

from __future__ import annotations

import encodings.idna  # noqa: F401  (the codec of host names for `socket`: loaded by a first connection)

from provider.client.client import GpuCloudClient
from provider.client.http import tls_context

tls_context()
GpuCloudClient("http://127.0.0.1", "").close()
