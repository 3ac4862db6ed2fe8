"""The go-plugin handshake as seen from the plugin: cookie, protocol version, the stdout line.

Only stdlib modules that the interpreter has already loaded are used here: this runs before the
handshake line, on every launch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

MAGIC_COOKIE_KEY = "TF_PLUGIN_MAGIC_COOKIE"
MAGIC_COOKIE_VALUE = "d602bf8f470bc67ca7faa0386276bbdd4330efaf76d1a219cb4d6991ca9872b2"
CORE_PROTOCOL_VERSION = 1  # go-plugin's own handshake version
APP_PROTOCOL_VERSION = 6  # tfplugin6

NOT_LAUNCHED_BY_TERRAFORM = """\
This binary is a plugin. These are not meant to be executed directly.
It is a Terraform provider: Terraform starts it itself when a configuration
uses the provider, so there is nothing to run by hand. To use it, install it
(`{prog} install --mirror DIR`) and run `terraform init`; to debug it, run
`{prog} --debug` and follow the instructions it prints.
"""


class HandshakeError(Exception):
    """The process was not started the way go-plugin starts a plugin (message is for humans)."""


def check_magic_cookie(environ: Mapping[str, str], prog: str) -> None:
    if environ.get(MAGIC_COOKIE_KEY) != MAGIC_COOKIE_VALUE:
        raise HandshakeError(NOT_LAUNCHED_BY_TERRAFORM.format(prog=prog))


def negotiate_protocol_version(environ: Mapping[str, str]) -> int:
    """Pick protocol 6 from the versions Terraform offers (PLUGIN_PROTOCOL_VERSIONS, e.g. "5,6").

    Without the variable (very old hosts) go-plugin assumes the plugin's own version.
    """
    offered = environ.get("PLUGIN_PROTOCOL_VERSIONS", "").strip()
    if not offered:
        return APP_PROTOCOL_VERSION
    versions = {part.strip() for part in offered.split(",")}
    if str(APP_PROTOCOL_VERSION) not in versions:
        raise HandshakeError(
            f"This provider speaks plugin protocol {APP_PROTOCOL_VERSION}; the host offered {offered}. "
            "Use Terraform 1.0 or later.\n"
        )
    return APP_PROTOCOL_VERSION


def format_handshake_line(*, network: str, address: str, protocol_version: int, server_cert_b64: str) -> str:
    """`CORE|APP|NETWORK|ADDR|grpc|CERT`; CERT empty for plaintext. Ends with a newline."""
    fields = [str(CORE_PROTOCOL_VERSION), str(protocol_version), network, address, "grpc", server_cert_b64]
    return "|".join(fields) + "\n"


def socket_directory(environ: Mapping[str, str] = os.environ) -> str:
    """A fresh private (0700) directory for the plugin's sockets and key material.

    `tempfile.mkdtemp` would do, but importing `tempfile` costs ~3 ms; this is the same recipe.
    """
    base = environ.get("TMPDIR") or "/tmp"
    while True:
        path = os.path.join(base, "tfplugin-" + os.urandom(8).hex())
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        return path
