"""Entry point of the conformance provider: `python -m acceptance.conformance.main [--debug]`."""

from __future__ import annotations

import sys


def make_server() -> object:
    from acceptance.conformance.provider import ConformanceProvider
    from provider.framework.server import ProviderServer

    return ProviderServer(ConformanceProvider())


def main() -> None:
    from acceptance.conformance.provider import ADDRESS
    from provider.plugin import serve

    serve(make_server, debug="--debug" in sys.argv[1:], provider_address=ADDRESS)


if __name__ == "__main__":
    main()
