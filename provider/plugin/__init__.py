"""The go-plugin bridge: serves a provider to Terraform (handshake, TLS, gRPC services).

`serve(make_server, debug=..., provider_address=...)` serves any provider server (an object with one
snake_case method per tfplugin6.Provider RPC); `provider.plugin.install.write_mirror` installs one.
This is the only package that imports grpc, and it does so after the handshake line.

`serve` is loaded on first use: the warm launcher (`warm_client`) imports this package and must not
pay for `launch`'s imports (socket, signal: ~10 ms) when a warm daemon serves the launch.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from provider.plugin.launch import serve

__all__ = ["serve"]


def __getattr__(name: str) -> object:
    if name == "serve":
        from provider.plugin.launch import serve

        return serve
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
