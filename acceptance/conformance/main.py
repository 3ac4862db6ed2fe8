"""Entry point of the conformance provider: `python -m acceptance.conformance.main [--debug]`.

Nothing but the plugin's launch module is imported before the handshake line: the provider (the
framework, every resource) loads after it, like the gpucloud provider's.
"""

from __future__ import annotations

import sys

ADDRESS = "registry.terraform.io/gpucloud/conformance"


def make_server() -> object:
    from acceptance.conformance.provider import ConformanceProvider
    from provider.framework.server import ProviderServer

    return ProviderServer(ConformanceProvider())


def main() -> None:
    from provider.plugin import serve

    serve(make_server, debug="--debug" in sys.argv[1:], provider_address=ADDRESS)


if __name__ == "__main__":
    main()
