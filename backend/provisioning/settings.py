"""Engine and simulated-datacenter settings (`GPUCLOUD_*` environment variables).

Kept next to the engine so the core settings stay about the API; `serve` and `worker` read both.
"""

from __future__ import annotations

import functools
import ipaddress

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

SUBNET_PREFIX = 22  # backend.fabric.addressing: one cluster's subnet

# The orchestrators each driver can run: the local driver has no Kubernetes control plane to start.
DRIVER_ORCHESTRATORS = {"simulated": ("slurm", "kubernetes", "none"), "local": ("slurm", "none")}


class EngineSettings(BaseSettings):
    """Provisioning engine configuration; `GPUCLOUD_<NAME>` overrides each field."""

    model_config = SettingsConfigDict(env_prefix="GPUCLOUD_", extra="ignore", frozen=True)

    driver: str = "simulated"
    # Local driver only: the block cluster subnets come from (shared by all regions) instead of each
    # region's private_cidr, for a host whose own network already uses those (a laptop on 10.x).
    local_address_range: str = ""
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


    @field_validator("local_address_range")
    @classmethod
    def _an_ipv4_block(cls, value: str) -> str:
        if value:
            network = ipaddress.IPv4Network(value)  # a ValueError names the bad value
            if network.prefixlen > SUBNET_PREFIX:
                raise ValueError(f"{value} is smaller than one cluster subnet (/{SUBNET_PREFIX})")
        return value


@functools.cache
def configured() -> EngineSettings:
    """The engine settings of this process, read once (the read paths ask on every request)."""
    return EngineSettings()


def configured_driver() -> str:
    return configured().driver


def local_address_range() -> str | None:
    """The block every cluster subnet comes from instead of the catalog's region and fabric blocks: the
    local driver's configured range (all regions share this machine's routing table), else None."""
    settings = configured()
    if settings.driver == "local" and settings.local_address_range:
        return settings.local_address_range
    return None


def offered_orchestrators() -> tuple[str, ...]:
    """The orchestrators the configured driver runs (admission refuses others, the catalog says so)."""
    return DRIVER_ORCHESTRATORS.get(configured_driver(), ())
