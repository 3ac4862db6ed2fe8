"""The driver registry: every driver's class declares its registry entry's capabilities and implements
exactly the day-2 sources it declares; the engine, the catalog and the views ask the registry."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from backend.domain.clock import ManualClock
from backend.provisioning import drivers, spot
from backend.provisioning import settings as engine_settings
from backend.provisioning.driver import (
    Capabilities,
    LogSource,
    Operation,
    OperationRequest,
    PartitionSource,
    TelemetrySource,
    VolumeStore,
    WorkloadSource,
    logs_of,
    partitions_of,
    telemetry_of,
    volume_store_of,
    workload_of,
)
from backend.provisioning.drivers.local.driver import LocalDriver
from backend.provisioning.drivers.routing import PoolRouting
from backend.provisioning.drivers.simulated.datacenter import SimulatedDatacenter
from backend.provisioning.drivers.ssh_hosts.driver import SshHostsDriver
from backend.provisioning.settings import EngineSettings

# One row per registered driver: a driver added to the registry without one fails the first test.
CLASSES: dict[str, type] = {"simulated": SimulatedDatacenter, "local": LocalDriver}
SOURCES: dict[str, type] = {
    "telemetry": TelemetrySource,
    "workload": WorkloadSource,
    "logs": LogSource,
    "partitions": PartitionSource,
    "volume_data": VolumeStore,
    "spot_market": spot.SpotMarket,
}


def _methods(protocol: type) -> set[str]:
    return {name for name in vars(protocol) if not name.startswith("_")}


@pytest.fixture
def in_force() -> Iterator[None]:
    """Puts back the engine settings a test installs."""
    previous = engine_settings.use(EngineSettings())
    yield
    engine_settings.use(previous)


def test_driver_registry_covers_every_driver_class() -> None:
    assert set(CLASSES) == set(drivers.DRIVERS)


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_driver_class_declares_its_entry_and_implements_what_it_declares(name: str) -> None:
    cls = CLASSES[name]
    declared = drivers.capabilities(name)
    assert cls.capabilities is declared  # type: ignore[attr-defined]
    assert cls.name == name  # type: ignore[attr-defined]
    for flag, protocol in SOURCES.items():
        implemented = _methods(protocol) <= set(dir(cls))
        assert implemented == getattr(declared, flag), f"{name}: {flag} declared {getattr(declared, flag)}"


def test_the_own_hosts_driver_implements_what_it_declares() -> None:
    """The ssh_hosts driver is not a GPUCLOUD_DRIVER choice (it serves the clusters on host pools beside the
    configured one) but keeps the same contract between its capabilities and its methods."""
    declared = SshHostsDriver.capabilities
    for flag, protocol in SOURCES.items():
        assert (_methods(protocol) <= set(dir(SshHostsDriver))) == getattr(declared, flag), flag


def test_driver_registry_builds_the_configured_driver_with_the_clock(tmp_path: Path) -> None:
    clock = ManualClock(dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    built = drivers.make_driver(EngineSettings(driver="simulated"), data_dir=tmp_path, clock=clock)
    # The configured driver, with clusters on host pools handed to the ssh_hosts driver.
    assert isinstance(built, PoolRouting) and isinstance(built.configured, SimulatedDatacenter)
    assert built.own_hosts.clock is clock and built.own_hosts.root == tmp_path / "ssh_hosts"
    assert (telemetry_of(built), workload_of(built), logs_of(built)) == (built, built, built)
    # Partitions: the ssh_hosts driver's (real Slurm); volume data: the local driver's only.
    assert (partitions_of(built), volume_store_of(built)) == (built, None)
    assert spot.market_of(built) is built
    with pytest.raises(drivers.UnknownDriver, match=r"'cloud' \(available: simulated, local\)"):
        drivers.make_driver(EngineSettings.model_construct(driver="cloud"), data_dir=tmp_path, clock=clock)


class _Bare:
    """A driver that declares no day-2 source (it still has every method name a probe would find)."""

    name = "bare"
    capabilities = Capabilities(orchestrators=("none",))

    def submit(self, session: Session, request: OperationRequest, now: dt.datetime) -> Operation:
        raise NotImplementedError

    def get(self, session: Session, client_token: str) -> Operation | None:
        return None

    def cluster_jobs(self) -> None:  # present, but not declared: not a workload source
        raise AssertionError("never asked")


def test_driver_sources_come_from_the_declaration_not_from_the_methods() -> None:
    bare = _Bare()
    assert (telemetry_of(bare), workload_of(bare), logs_of(bare), spot.market_of(bare)) == (None,) * 4


def test_driver_registry_answers_for_the_driver_in_force(in_force: None) -> None:
    engine_settings.use(EngineSettings(driver="simulated", local_address_range="10.200.0.0/16"))
    assert drivers.offered_orchestrators() == ("slurm", "kubernetes", "none")
    assert drivers.local_address_range() is None  # the simulated nodes are not on this host's network
    engine_settings.use(EngineSettings(driver="local", local_address_range="10.200.0.0/16"))
    assert drivers.offered_orchestrators() == ("slurm", "none")
    assert drivers.local_address_range() == "10.200.0.0/16"
    engine_settings.use(EngineSettings.model_construct(driver="cloud"))
    assert (drivers.configured_capabilities(), drivers.offered_orchestrators()) == (None, ())
