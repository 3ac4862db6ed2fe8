"""Cookie check, protocol negotiation and the handshake line (unit level)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from provider.plugin.handshake import (
    MAGIC_COOKIE_KEY,
    MAGIC_COOKIE_VALUE,
    HandshakeError,
    check_magic_cookie,
    format_handshake_line,
    negotiate_protocol_version,
    socket_directory,
)


def test_check_magic_cookie_accepts_terraforms_cookie() -> None:
    check_magic_cookie({MAGIC_COOKIE_KEY: MAGIC_COOKIE_VALUE}, "terraform-provider-x")


@pytest.mark.parametrize("environ", [{}, {MAGIC_COOKIE_KEY: "wrong"}])
def test_check_magic_cookie_rejects_with_a_human_message(environ: dict[str, str]) -> None:
    with pytest.raises(HandshakeError, match="This binary is a plugin") as raised:
        check_magic_cookie(environ, "terraform-provider-x")
    assert "terraform-provider-x install --mirror" in str(raised.value)


@pytest.mark.parametrize("offered", ["5,6", "6", " 6 , 5 ", "4,5,6,7", ""])
def test_negotiate_protocol_version_picks_6(offered: str) -> None:
    assert negotiate_protocol_version({"PLUGIN_PROTOCOL_VERSIONS": offered}) == 6


def test_negotiate_protocol_version_without_6_fails() -> None:
    with pytest.raises(HandshakeError, match="protocol 6"):
        negotiate_protocol_version({"PLUGIN_PROTOCOL_VERSIONS": "4,5"})


def test_format_handshake_line() -> None:
    line = format_handshake_line(
        network="unix", address="/t/p.sock", protocol_version=6, server_cert_b64="QUJD"
    )
    assert line == "1|6|unix|/t/p.sock|grpc|QUJD\n"


def test_socket_directory_is_private_and_fresh(tmp_path: Path) -> None:
    first = socket_directory({"TMPDIR": str(tmp_path)})
    second = socket_directory({"TMPDIR": str(tmp_path)})
    assert first != second
    for path in (first, second):
        assert Path(path).parent == tmp_path
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
