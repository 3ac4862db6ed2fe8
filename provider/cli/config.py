"""Where the CLI finds its endpoint and API key: the environment first (GPUCLOUD_ENDPOINT,
GPUCLOUD_API_KEY, as for the provider), then ~/.config/gpucloud/config.toml (written by `gpucloud login`,
mode 0600; $XDG_CONFIG_HOME is honoured), then the default endpoint. The file also keeps the SSH key ids
`gpucloud login --ssh-key` chose: the keys `cluster create` installs when given none."""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provider.client import DEFAULT_ENDPOINT


class ConfigError(Exception):
    """The configuration cannot be used; the message says how to fix it."""


@dataclass(frozen=True)
class Credentials:
    endpoint: str
    api_key: str | None
    endpoint_from: str  # where the endpoint came from, for messages (never the key itself)


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpucloud" / "config.toml"


def _load(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"cannot read {path}: {error}; run `gpucloud login` to write it again") from None


def read_config(path: Path | None = None) -> dict[str, str]:
    data = _load(path or config_path())
    return {k: v for k, v in data.items() if k in ("endpoint", "api_key") and isinstance(v, str)}


def read_ssh_key_ids(path: Path | None = None) -> list[str]:
    """The key ids saved by `gpucloud login --ssh-key` (none when the file has none)."""
    saved = _load(path or config_path()).get("ssh_key_ids")
    return [k for k in saved if isinstance(k, str)] if isinstance(saved, list) else []


def write_config(
    endpoint: str, api_key: str, path: Path | None = None, *, ssh_key_ids: Sequence[str] = ()
) -> Path:
    """Save the values, readable by the owner only (the file is created 0600, never widened)."""
    path = path or config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # JSON string escapes are valid TOML basic-string escapes (and a JSON array of strings a TOML array).
    text = f"endpoint = {json.dumps(endpoint)}\napi_key = {json.dumps(api_key)}\n"
    if ssh_key_ids:
        text += f"ssh_key_ids = {json.dumps(list(ssh_key_ids))}\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as sink:
        sink.write(text)
    return path


def resolve_credentials() -> Credentials:
    saved = read_config()
    if os.environ.get("GPUCLOUD_ENDPOINT"):
        endpoint, source = os.environ["GPUCLOUD_ENDPOINT"], "GPUCLOUD_ENDPOINT"
    elif saved.get("endpoint"):
        endpoint, source = saved["endpoint"], str(config_path())
    else:
        endpoint, source = DEFAULT_ENDPOINT, "the default"
    if not endpoint.startswith(("http://", "https://")):
        raise ConfigError(f"the endpoint {endpoint!r} (from {source}) must start with http:// or https://")
    api_key = os.environ.get("GPUCLOUD_API_KEY") or saved.get("api_key") or None
    return Credentials(endpoint.rstrip("/"), api_key, source)


def ssh_key_ids_saved_for(endpoint: str, api_key: str | None) -> list[str]:
    """The saved default keys, when `endpoint` and `api_key` are the saved ones (another API key may be
    another project's, whose keys these are not)."""
    saved = read_config()
    if (endpoint.rstrip("/"), api_key) != (saved.get("endpoint", "").rstrip("/"), saved.get("api_key")):
        return []
    return read_ssh_key_ids()


def default_ssh_key_ids() -> list[str]:
    """The keys `cluster create` installs when given none (GPUCLOUD_API_KEY set to another key gets none)."""
    in_use = resolve_credentials()
    return ssh_key_ids_saved_for(in_use.endpoint, in_use.api_key)
