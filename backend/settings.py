"""Every setting of the backend in one place: flags and `GPUCLOUD_*` environment variables.

`Settings()` reads the environment once, when a process starts (`backend.cli` builds the runtime from
it); the engine and billing sections are nested models with their historical variable names
(`GPUCLOUD_DRIVER`, `GPUCLOUD_BILLING_INTERVAL_SECONDS`). Nothing else reads the environment: a change
takes effect at the next start. This module sits at the bottom of the layers, beside `backend.domain`.
"""

from __future__ import annotations

import ipaddress
from datetime import timedelta
from functools import cached_property
from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

SUBNET_PREFIX = 22  # backend.fabric.addressing: one cluster's subnet


def _default_data_dir() -> Path:
    return Path("~/.local/share/gpucloud").expanduser()


class EngineSettings(BaseSettings):
    """Provisioning engine configuration; `GPUCLOUD_<NAME>` overrides each field."""

    model_config = SettingsConfigDict(env_prefix="GPUCLOUD_", extra="ignore", frozen=True)

    driver: str = "simulated"
    # Local driver only: the block cluster subnets come from (shared by all regions) instead of each
    # region's private_cidr, for a host whose own network already uses those (a laptop on 10.x).
    local_address_range: str = ""
    # Container image imports: a directory of `*.crt` CA certificates that registries' TLS certificates
    # are verified against besides the system's (a registry with a private CA); unset: the system's only.
    registry_ca_dir: Path | None = None
    # Simulated time runs this many times faster than real time (1 = real time; 600 turns a 20-minute
    # cluster bring-up into 2 seconds). Phase durations are the reference table's divided by it.
    simulation_speed: float = Field(default=1.0, gt=0)
    simulation_seed: int = 0
    simulation_boot_failure_rate: float = Field(default=0.025, ge=0, le=1)
    simulation_acceptance_failure_rate: float = Field(default=0.02, ge=0, le=1)
    # Chance that a RUNNING node suffers a GPU hardware fault (XID) within the window below.
    simulation_xid_rate: float = Field(default=0.0, ge=0, le=1)
    simulation_xid_window_seconds: float = Field(default=86_400.0, gt=0)
    # Spot market (capacity_type spot / spot_with_fallback): the chance that a spot node is reclaimed within
    # the window after it starts running (drawn from the seed, cluster and node name: a scenario replays
    # identically), and how long reclaimed capacity stays off the market for that cluster.
    simulation_spot_preemption_rate: float = Field(default=0.05, ge=0, le=1)
    simulation_spot_preemption_window_seconds: float = Field(default=86_400.0, gt=0)
    simulation_spot_reclaim_seconds: float = Field(default=1_800.0, gt=0)
    # Replacements from the pool allowed per node position during one bring-up before rolling back.
    engine_max_replacements: int = Field(default=2, ge=0)
    # Automatic repairs (replacements of a failed RUNNING node) per node name in 24 hours: a bad pool
    # cannot loop; once used up the node stays failed with the reason.
    engine_max_repairs_per_node_per_day: int = Field(default=3, ge=0)
    # How often a worker samples every RUNNING node's GPUs into the metrics ring buffer (the fine tier
    # holds 10-second samples: a longer interval leaves gaps).
    metrics_interval_seconds: float = Field(default=10.0, gt=0)
    engine_lease_seconds: float = Field(default=10.0, gt=0)
    engine_poll_seconds: float = Field(default=0.2, gt=0)
    engine_batch_size: int = Field(default=20, ge=1)
    # A worker whose heartbeat is older than this is dead: live workers delete its `engine_workers` row
    # (its leases expired long before; until then `/metrics` shows its heartbeat age for alerting).
    engine_worker_prune_seconds: float = Field(default=300.0, gt=0)
    # Clusters with idle_teardown_minutes: how often a busy one's job queue is read again.
    idle_check_seconds: float = Field(default=60.0, gt=0)
    # Autoscaled clusters: how often their job queue is read for a scale decision, and the length of one
    # "minute" of scale_down_idle_minutes (60; tests set 1 to count the idle time in seconds).
    autoscale_interval_seconds: float = Field(default=30.0, gt=0)
    autoscale_idle_unit_seconds: float = Field(default=60.0, gt=0)
    # Host pools: how often each host of a pool is checked again (SSH, packages, clock, inventory).
    host_check_interval_seconds: float = Field(default=300.0, gt=0)

    @field_validator("local_address_range")
    @classmethod
    def _an_ipv4_block(cls, value: str) -> str:
        if value:
            network = ipaddress.IPv4Network(value)  # a ValueError names the bad value
            if network.prefixlen > SUBNET_PREFIX:
                raise ValueError(f"{value} is smaller than one cluster subnet (/{SUBNET_PREFIX})")
        return value


class BillingSettings(BaseSettings):
    """Billing configuration; `GPUCLOUD_BILLING_<NAME>` overrides each field."""

    model_config = SettingsConfigDict(env_prefix="GPUCLOUD_BILLING_", extra="ignore", frozen=True)

    # How often the embedded metering job runs.
    interval_seconds: float = 60.0
    # Hour slices are charged once they ended at least this long ago, so status changes the engine
    # records a little late are seen before a slice is priced.
    settle_seconds: int = 60
    # Credit exhaustion timeline (see backend.billing.credits).
    decommission_after_hours: float = 72.0
    attach_refused_after_hours: float = 24.0
    volume_data_kept_days: float = 30.0
    # A reserved cluster set to be decommissioned at term end stays covered by its reservation this
    # long after the end, while the engine tears it down.
    expiry_grace_minutes: float = 15.0

    @property
    def settle(self) -> timedelta:
        return timedelta(seconds=self.settle_seconds)

    @property
    def expiry_grace(self) -> timedelta:
        return timedelta(minutes=self.expiry_grace_minutes)


class Settings(BaseSettings):
    """Backend configuration; `GPUCLOUD_<NAME>` overrides each field (sections: see their classes)."""

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
    # Unset: 20, or 1 % of the limit where that is more (so a high limit costs no write every few
    # requests); see `rate_limit_batch`.
    rate_limit_sync_every: int | None = Field(default=None, ge=1)
    # Requests without a valid API key (none, malformed, unknown, revoked; health checks and metrics
    # scrapes too) per client address per window, counted in memory by each replica. 0 disables.
    unauthenticated_rate_limit_requests: int = 600
    unauthenticated_rate_limit_window_seconds: int = Field(default=60, ge=1)
    # A revoked key keeps working in a replica for at most this long (lookups are cached).
    auth_cache_seconds: float = 2.0
    # The cache also remembers unknown keys; bounded so invented keys cannot grow memory without end.
    auth_cache_max_keys: int = Field(default=10_000, ge=1)
    # GET /v1/clusters/{id} answers kept per replica, each served again only while the database is
    # unchanged since it was read (never stale); 0 turns the cache off.
    cluster_read_cache_entries: int = Field(default=2048, ge=0)
    idempotency_ttl_hours: int = 24
    # How long a cluster's admin kubeconfig token stays valid after a read or renewal (/credentials).
    credentials_ttl_seconds: int = Field(default=3600, ge=60)
    default_page_size: int = 50
    max_page_size: int = 200
    log_level: str = "info"
    # Threads that run the hot read routes' database work at once on PostgreSQL (SQLite's runs on the
    # event loop, see api.state.run_read). Few on purpose: more threads only fight over the GIL
    # (measured: 40 threads serve ~30 % fewer GETs than 2-4; benchmarks.md).
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
    # A JSON catalog (regions, instance types, prices, capacity; the shape of `catalog_to_dict`) replacing
    # the built-in one. Unset or empty: the built-in catalog. Loaded once by the runtime.
    catalog_file: Path | None = None
    # The sections, read from the same environment (their own variable names) when Settings is built.
    engine: EngineSettings = Field(default_factory=EngineSettings)
    billing: BillingSettings = Field(default_factory=BillingSettings)

    @field_validator("catalog_file", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        return None if value == "" else value

    @cached_property
    def resolved_database_url(self) -> str:
        """The SQLAlchemy URL in use: the configured one or the SQLite file in the data dir."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir.expanduser() / 'gpucloud.db'}"

    @property
    def rate_limit_batch(self) -> int:
        """Requests a replica counts before adding them to the database: `rate_limit_sync_every`, or by
        default 20 or 1 % of the limit, whichever is more. The overshoot it allows stays the same share
        of the budget (20 of the default 1200), while a key allowed millions of requests a minute is not
        written every 10 of them (at ~1,000 GET/s that was a sixth of a GET's CPU and most of its p99;
        docs/benchmarks.md)."""
        if self.rate_limit_sync_every is not None:
            return self.rate_limit_sync_every
        return max(20, self.rate_limit_requests // 100)

    @property
    def is_sqlite(self) -> bool:
        """True when the store is an SQLite database."""
        return self.resolved_database_url.startswith("sqlite")
