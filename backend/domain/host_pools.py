"""Rules of host pools: what a pool's connection settings and hosts must be, and its status from its hosts'.

Everything that reaches an `ssh` command line is checked here first (addresses, user, bastion): a value
starting with `-` would be read by ssh as an option, so none can.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from backend.domain.errors import FieldError
from backend.domain.ssh_keys import ParsedSshKey, parse_public_key

HOST_STATUSES = ("pending", "ready", "degraded", "unreachable")
REASON_CODES = (
    "auth_refused",
    "host_key_changed",
    "unreachable",
    "no_sudo",
    "not_linux",
    "package_missing",
    "clock_skew",
    "agent_failed",
)
MAX_HOSTS = 64
# What Slurm accounting needs on a cluster's controller (slurmdbd and its MariaDB): program -> Debian package.
# Optional: a host without them is ready, and a cluster whose controller lacks them runs without accounting.
ACCOUNTING_PROGRAMS = {"slurmdbd": "slurmdbd", "mariadbd": "mariadb-server"}
MIN_RSA_BITS = 2048
REGION_PATTERN = r"^[a-z][a-z0-9-]{0,62}$"
SSH_USER_PATTERN = r"^[a-z_][a-z0-9_-]{0,31}$"
_HOSTNAME = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$"
)
_USER = re.compile(SSH_USER_PATTERN)


@dataclass(frozen=True)
class PrivateKey:
    """A pool's key: the private key in OpenSSH's format (what ssh reads) and its public half."""

    openssh: str
    public_key: str  # `ssh-ed25519 AAAA... gpucloud-host-pool`
    fingerprint: str


def parse_private_key(text: str, field: str = "ssh_private_key") -> PrivateKey | FieldError:
    """The key as ssh will use it, or what is wrong with it (the message never quotes the key)."""
    data = text.strip().encode()
    key: object
    try:
        if data.startswith(b"-----BEGIN OPENSSH PRIVATE KEY-----"):
            key = serialization.load_ssh_private_key(data, password=None)
        else:
            key = serialization.load_pem_private_key(data, password=None)
    except TypeError:  # cryptography's word for "it is encrypted and no password was given"
        return FieldError(
            field,
            "encrypted_private_key",
            f"{field} is protected by a passphrase: the backend "
            "connects unattended, so give the key without one (`ssh-keygen -p -N '' -f KEY` "
            "removes it from a copy)",
        )
    except (ValueError, UnicodeError):
        return FieldError(
            field,
            "invalid_private_key",
            f"{field} is not a private key: give the whole file "
            "(`-----BEGIN OPENSSH PRIVATE KEY-----` ... `-----END ...-----`), e.g. from "
            "`ssh-keygen -t ed25519 -N ''`",
        )
    if isinstance(key, rsa.RSAPrivateKey) and key.key_size < MIN_RSA_BITS:
        return FieldError(
            field,
            "key_too_weak",
            f"RSA keys must have at least {MIN_RSA_BITS} bits; this one has {key.key_size}",
        )
    if not isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey):
        return FieldError(
            field,
            "unsupported_key_type",
            f"{field} must be an ed25519, ECDSA or RSA key (ssh-keygen -t ed25519)",
        )
    openssh = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )
    parsed = parse_public_key(public)
    assert isinstance(parsed, ParsedSshKey), parsed  # made by cryptography from a key it accepted
    return PrivateKey(
        openssh=openssh, public_key=f"{public} gpucloud-host-pool", fingerprint=parsed.fingerprint
    )


def address_error(address: str, field: str) -> FieldError | None:
    """An IP address or a DNS name; None when `address` is one."""
    try:
        ipaddress.ip_address(address)
        return None
    except ValueError:
        pass
    if _HOSTNAME.match(address):
        return None
    return FieldError(
        field,
        "invalid_address",
        f"{field} {address!r} is neither an IP address nor a host "
        "name: give e.g. '10.0.0.5', 'fd00::5' or 'gpu-a.lab.example'",
    )


def host_key_error(text: str, field: str) -> tuple[str | None, FieldError | None]:
    """A host key pin as `<type> <base64>` (the comment dropped), or what is wrong with it."""
    parsed = parse_public_key(text)
    if not isinstance(parsed, ParsedSshKey):
        return None, FieldError(
            field,
            parsed.code,
            parsed.message.replace("public_key", field)
            + " (the host's key is in /etc/ssh/ssh_host_ed25519_key.pub)",
        )
    key_type, blob = text.split()[:2]
    return f"{key_type} {blob}", None


def parse_proxy_jump(text: str, field: str = "proxy_jump") -> tuple[str | None, str, int] | FieldError:
    """`[user@]host[:port]` as (user, host, port); IPv6 hosts in brackets (`[fd00::1]:2222`)."""
    user, at, rest = text.rpartition("@")
    if not at:
        user, rest = "", text
    if user and not _USER.match(user):
        return FieldError(field, "invalid_proxy_jump", f"{field}: user {user!r} is not a user name")
    port = 22
    if rest.startswith("["):
        host, _, tail = rest[1:].partition("]")
        port_text = tail.removeprefix(":") if tail.startswith(":") else ("" if not tail else "x")
    else:
        host, _, port_text = rest.partition(":")
    if port_text:
        if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            return FieldError(field, "invalid_proxy_jump", f"{field}: port {port_text!r} must be 1-65535")
        port = int(port_text)
    problem = address_error(host, field)
    if problem is not None:
        return FieldError(
            field, "invalid_proxy_jump", f"{field} must be '[user@]host[:port]': {problem.message}"
        )
    return (user or None), host, port


def storage_path_error(path: str, field: str = "shared_storage_path") -> FieldError | None:
    """An absolute, normal path without odd characters (it is used in mount and shell commands)."""
    if (
        not path.startswith("/")
        or posixpath.normpath(path) != path
        or path == "/"
        or not re.fullmatch(r"[A-Za-z0-9._/+-]+", path)
    ):
        return FieldError(
            field,
            "invalid_path",
            f"{field} must be an absolute path such as '/mnt/shared' "
            "(letters, digits, '._+-/', no '..', not '/'), mounted on every host of the pool",
        )
    return None


@dataclass(frozen=True)
class HostEntry:
    """One host as declared: address, own port (None: the pool's) and pinned key."""

    address: str
    port: int | None
    host_key: str | None


def duplicate_hosts(hosts: Sequence[HostEntry], pool_port: int) -> list[FieldError]:
    """An error per host declared twice (same address and effective port)."""
    seen: dict[tuple[str, int], int] = {}
    errors = []
    for index, host in enumerate(hosts):
        where = (host.address.lower(), host.port or pool_port)
        if where in seen:
            errors.append(
                FieldError(
                    f"hosts[{index}]",
                    "duplicate_host",
                    f"hosts[{index}] repeats "
                    f"hosts[{seen[where]}] ({host.address} port {where[1]}): list each host once",
                )
            )
        seen.setdefault(where, index)
    return errors


def pool_status(host_statuses: Sequence[str]) -> str:
    """ready: a host is; probing: none is and some are still to be checked; unavailable: none can be used."""
    if "ready" in host_statuses:
        return "ready"
    if "pending" in host_statuses:
        return "probing"
    return "unavailable"


def accounting_ready(inventory: Mapping[str, Any] | None) -> bool:
    """Whether a host's inventory has what a controller needs for Slurm accounting: slurmdbd and MariaDB
    installed, and no MariaDB of the host's own running (it would hold the socket the cluster's uses)."""
    found = (inventory or {}).get("packages") or {}
    mine = not (inventory or {}).get("mariadb_in_use")
    return mine and all(found.get(program) for program in ACCOUNTING_PROGRAMS)
