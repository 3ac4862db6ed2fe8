"""The go-plugin bridge: serves a provider to Terraform (handshake, TLS, gRPC services).

`serve(make_server, debug=..., provider_address=...)` serves any provider server (an object with one
snake_case method per tfplugin6.Provider RPC); `provider.plugin.install.write_mirror` installs one.
This is the only package that imports grpc, and it does so after the handshake line.
"""

from provider.plugin.launch import serve

__all__ = ["serve"]
