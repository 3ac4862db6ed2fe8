"""Secrets at rest: AES-256-GCM with a key from `GPUCLOUD_SECRET_KEY` or the data dir's `secret.key`.

A stored secret reads `gcs1:<key id>:<base64url(nonce | ciphertext | tag)>`; the key id (the first 8 hex
digits of the key's SHA-256) says which key sealed it, so a wrong or missing key is named in the error
instead of surfacing as a bare authentication failure, and a rotation can re-seal only what the new key
did not seal (`gpucloud-backend rotate-secret-key`). Plaintext never reaches a log or an error message.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from sqlalchemy import Dialect, String, column, select, table, update
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.types import TypeDecorator

from backend.domain.errors import ApiError
from backend.settings import Settings

PREFIX = "gcs1"
KEY_FILE = "secret.key"
_AAD = b"gpucloud-secret-v1"
_NONCE_BYTES = 12


class SecretKeyError(ApiError):
    """The configured key cannot open a stored secret (or is malformed): an operator must fix the key."""

    status, code, title = 500, "secret_key_unavailable", "Internal Server Error"


def generate_key() -> str:
    """A fresh key in the form `GPUCLOUD_SECRET_KEY` takes (base64url of 32 random bytes)."""
    return base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()


def key_id(key: bytes) -> str:
    return hashlib.sha256(key).hexdigest()[:8]


def _decode_key(text: str, source: str) -> bytes:
    try:
        key = base64.urlsafe_b64decode(text.strip().encode())
    except (binascii.Error, ValueError):
        key = b""
    if len(key) != 32:
        raise SecretKeyError(
            f"{source} is not a secret key: expected base64url of 32 bytes "
            "(make one with `gpucloud-backend generate-secret-key`)"
        )
    return key


def is_sealed(value: str) -> bool:
    return value.startswith(PREFIX + ":")


@dataclass(frozen=True)
class Keyring:
    """The key that seals new secrets and the earlier keys still accepted for opening them."""

    current: bytes
    previous: tuple[bytes, ...] = ()

    @property
    def current_id(self) -> str:
        return key_id(self.current)

    def seal(self, plaintext: str) -> str:
        nonce = os.urandom(_NONCE_BYTES)
        sealed = AESGCM(self.current).encrypt(nonce, plaintext.encode(), _AAD)
        return f"{PREFIX}:{self.current_id}:{base64.urlsafe_b64encode(nonce + sealed).decode()}"

    def sealed_id(self, stored: str) -> str:
        """The id of the key that sealed `stored`."""
        if not is_sealed(stored):
            raise SecretKeyError("a stored secret is not encrypted: run `gpucloud-backend migrate`")
        return stored.split(":", 2)[1]

    def open(self, stored: str) -> str:
        wanted = self.sealed_id(stored)
        key = next((k for k in (self.current, *self.previous) if key_id(k) == wanted), None)
        if key is None:
            raise SecretKeyError(
                f"a stored secret was encrypted with key {wanted}, but the configured keys are "
                f"{', '.join(key_id(k) for k in (self.current, *self.previous))}: set GPUCLOUD_SECRET_KEY "
                "to the key every process shares (an earlier one in GPUCLOUD_SECRET_KEYS_PREVIOUS)"
            )
        try:
            payload = base64.urlsafe_b64decode(stored.split(":", 2)[2].encode())
            plain = AESGCM(key).decrypt(payload[:_NONCE_BYTES], payload[_NONCE_BYTES:], _AAD)
        except (InvalidTag, binascii.Error, ValueError):
            raise SecretKeyError(f"a stored secret sealed with key {wanted} is corrupt") from None
        return plain.decode()


def _key_file(data_dir: Path) -> bytes:
    """The data dir's key, created on first use with mode 0600 (atomically: concurrent first starts of
    processes sharing the directory all end up with the one key that won)."""
    path = data_dir.expanduser() / KEY_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        draft = path.with_name(f".{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}")
        descriptor = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as out:
            out.write(generate_key() + "\n")
        try:
            os.link(draft, path)  # fails if another process created it first: theirs is kept
        except FileExistsError:
            pass
        finally:
            draft.unlink()
    return _decode_key(path.read_text(), str(path))


_keyrings: dict[tuple[str, str, str], Keyring] = {}


def keyring(settings: Settings) -> Keyring:
    """The keyring `settings` configure (cached; the key file is read or created once per process)."""
    cache_key = (settings.secret_key, settings.secret_keys_previous, str(settings.data_dir))
    found = _keyrings.get(cache_key)
    if found is None:
        if settings.secret_key:
            current = _decode_key(settings.secret_key, "GPUCLOUD_SECRET_KEY")
        else:
            current = _key_file(settings.data_dir)
        previous = tuple(
            _decode_key(text, "GPUCLOUD_SECRET_KEYS_PREVIOUS")
            for text in settings.secret_keys_previous.split(",")
            if text.strip()
        )
        found = _keyrings[cache_key] = Keyring(current, previous)
    return found


def bind_settings(dialect: Dialect, settings: Settings) -> None:
    """Make the columns of engines built from `settings` use its keys (see `EncryptedString`)."""
    dialect.gpucloud_settings = settings  # type: ignore[attr-defined]


def keyring_of(dialect: Dialect) -> Keyring:
    """The keyring of an engine made by `make_engine` (or bound with `bind_settings`); any other engine
    has no keys: reading or writing a sealed column through it fails, naming the cause."""
    settings = getattr(dialect, "gpucloud_settings", None)
    if not isinstance(settings, Settings):
        raise SecretKeyError("this database engine has no secret keys: make it with backend.store.db."
                             "make_engine (or bind_settings) to read or write sealed columns")
    return keyring(settings)


class EncryptedString(TypeDecorator[str]):
    """A string column stored sealed (the application reads and writes plaintext). Sealing adds 14
    characters of prefix and base64 of 28 bytes: `String(128)` holds secrets of up to 57 characters."""

    impl = String
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> str | None:
        return None if value is None else keyring_of(dialect).seal(str(value))

    def process_result_value(self, value: Any, dialect: Dialect) -> str | None:
        return None if value is None else keyring_of(dialect).open(str(value))


# Every sealed column as (table, primary key column, secret column): what a rotation re-seals.
SEALED_COLUMNS = (("engine_clusters", "cluster_id", "kube_admin_token"),
                  ("clusters", "id", "registry_credentials"),
                  ("host_pools", "id", "ssh_private_key"))


def rotate_secrets(*, sessions: sessionmaker[Session], settings: Settings) -> tuple[int, int]:
    """Re-seal with the current key every stored secret an earlier key sealed; returns (re-sealed, all).

    Safe to repeat and to run beside serving processes, which must already know both keys (current in
    GPUCLOUD_SECRET_KEY, earlier ones in GPUCLOUD_SECRET_KEYS_PREVIOUS)."""
    keys = keyring(settings)
    resealed = total = 0
    for table_name, key_column, secret_column in SEALED_COLUMNS:
        rows = table(table_name, column(key_column, String), column(secret_column, String))
        with sessions.begin() as session:
            stored = session.execute(
                select(rows.c[key_column], rows.c[secret_column]).where(rows.c[secret_column].is_not(None))
            ).all()
            for row_id, value in stored:
                total += 1
                if is_sealed(value) and keys.sealed_id(value) == keys.current_id:
                    continue
                plaintext = keys.open(value) if is_sealed(value) else value
                matching = rows.c[key_column] == row_id
                session.execute(update(rows).where(matching).values({secret_column: keys.seal(plaintext)}))
                resealed += 1
    return resealed, total
