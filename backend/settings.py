"""Every setting of the backend in one place: flags and `GPUCLOUD_*` environment variables."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def _default_data_dir() -> Path:
    return Path("~/.local/share/gpucloud").expanduser()


class Settings(BaseSettings):
    """Backend configuration; `GPUCLOUD_<NAME>` overrides each field."""

    model_config = SettingsConfigDict(env_prefix="GPUCLOUD_", extra="ignore", frozen=True)

    host: str = "127.0.0.1"
    port: int = 8080
    data_dir: Path = Field(default_factory=_default_data_dir)
    # Empty means: an SQLite file `gpucloud.db` in `data_dir`.
    database_url: str = ""
    sqlite_busy_timeout_ms: int = 15_000
    # Connections each process keeps open (pool) and may open beyond that under load (overflow); the
    # pool opens lazily, so a process holds only what it uses at once. Budget in docs/operations.md.
    db_pool_size: int = Field(default=20, ge=1)
    db_max_overflow: int = Field(default=20, ge=0)
    max_body_bytes: int = 1_048_576
    # Requests per API key per window, counted in the database so replicas share the budget.
    rate_limit_requests: int = 1200
    rate_limit_window_seconds: int = 60
    # Each replica adds its local count to the database every N requests (or 0.5 s): fewer writes,
    # at most N requests of overshoot per replica. 1 = every request is counted in the database.
    rate_limit_sync_every: int = 20
    # Requests without a valid API key (none, malformed, unknown, revoked; health checks and metrics
    # scrapes too) per client address per window, counted in memory by each replica. 0 disables.
    unauthenticated_rate_limit_requests: int = 600
    unauthenticated_rate_limit_window_seconds: int = Field(default=60, ge=1)
    # A revoked key keeps working in a replica for at most this long (lookups are cached).
    auth_cache_seconds: float = 2.0
    # The cache also remembers unknown keys; bounded so invented keys cannot grow memory without end.
    auth_cache_max_keys: int = Field(default=10_000, ge=1)
    idempotency_ttl_hours: int = 24
    # How long a cluster's admin kubeconfig token stays valid after a read or renewal (/credentials).
    credentials_ttl_seconds: int = Field(default=3600, ge=60)
    default_page_size: int = 50
    max_page_size: int = 200
    log_level: str = "info"
    # Threads that run the hot read routes' database work at once. Few on purpose: more threads only
    # fight over the GIL (measured: 40 threads serve ~30 % fewer GETs than 2-4; benchmarks.md).
    read_threads: int = Field(default=4, ge=1)
    # `serve` runs one engine worker in-process unless disabled (deployments with `worker` processes).
    embedded_worker: bool = True
    # `serve` runs the billing meter in-process unless disabled (deployments with a `billing-run`);
    # independent of `embedded_worker`: passes are idempotent, so a meter in every replica is safe.
    embedded_billing: bool = True
    # The provider packages that the provider registry (`/.well-known/terraform.json`) and network
    # mirror (`/v1/mirror/`) serve: a directory of signed zips (docs/installing.md). Unset: none.
    provider_packages_dir: Path | None = None
    # The ASCII-armored public key of the packages' signatures. Unset: signing-key.asc in that directory.
    provider_signing_key_file: Path | None = None
    # `serve` speaks HTTPS with this certificate (chain) and key, both PEM files; unset: plain HTTP
    # (Terraform's registry protocols need HTTPS: set these or terminate TLS in front).
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    # Base64url of 32 random bytes: the AES-256-GCM key of secrets stored in the database. Empty: the
    # key file `secret.key` in `data_dir` (created with mode 0600). Every process must use the same key.
    secret_key: str = Field(default="", repr=False)
    # Earlier keys, comma separated, still accepted for reading during a rotation (docs/engine.md).
    secret_keys_previous: str = Field(default="", repr=False)

    @cached_property
    def resolved_database_url(self) -> str:
        """The SQLAlchemy URL in use: the configured one or the SQLite file in the data dir."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir.expanduser() / 'gpucloud.db'}"

    @property
    def is_sqlite(self) -> bool:
        """True when the store is an SQLite database."""
        return self.resolved_database_url.startswith("sqlite")
