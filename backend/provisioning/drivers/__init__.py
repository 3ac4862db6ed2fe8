"""The driver registry: each provisioning driver's name, declared capabilities and factory.

Every driver lives in its own folder (`simulated/`, `local/`) whose package declares `CAPABILITIES` (a
`Capabilities`: orchestrators offered, host-network nodes, the day-2 sources it answers) and
`build(settings, data_dir, clock)`. The engine, the API, the workers and the CLI ask this registry, never
the driver object, what a driver can do. Adding a driver (a cloud) is a new folder with those two names plus
one line in `DRIVERS`; its class carries the same `CAPABILITIES` as `capabilities`. The `ssh_hosts` driver
(a project's own servers) is no `GPUCLOUD_DRIVER` choice: `make_driver` puts it beside the configured one for
the clusters on host pools (`routing.py`).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from backend.domain.clock import SYSTEM_CLOCK, Clock
from backend.provisioning.driver import Capabilities, ProvisioningDriver
from backend.provisioning.drivers import local, simulated
from backend.provisioning.settings import EngineSettings, configured

DriverFactory = Callable[[EngineSettings, Path | None, Clock], ProvisioningDriver]


def _runs_anywhere() -> str | None:
    return None


@dataclass(frozen=True)
class DriverEntry:
    capabilities: Capabilities
    build: DriverFactory
    # Why this machine cannot run the driver (one message for `doctor` and `serve`), or None.
    host_problem: Callable[[], str | None] = _runs_anywhere


DRIVERS: dict[str, DriverEntry] = {
    "simulated": DriverEntry(simulated.CAPABILITIES, simulated.build),
    "local": DriverEntry(local.CAPABILITIES, local.build, local.host_problem),
}


class UnknownDriver(ValueError):
    """`GPUCLOUD_DRIVER` names no registered driver."""


def entry(name: str) -> DriverEntry:
    """The registered driver `name` (UnknownDriver names the available ones)."""
    found = DRIVERS.get(name)
    if found is None:
        raise UnknownDriver(f"unknown provisioning driver {name!r} (available: {', '.join(DRIVERS)})")
    return found


def capabilities(name: str) -> Capabilities:
    """What driver `name` offers, without building it (admission, the catalog, the views)."""
    return entry(name).capabilities


def make_driver(settings: EngineSettings, *, data_dir: Path | None = None, clock: Clock = SYSTEM_CLOCK
                ) -> ProvisioningDriver:
    """The configured driver (`settings.driver`), built by its registry entry, with the clusters on host
    pools handed to the `ssh_hosts` driver (`routing.py`). `data_dir`: where a driver keeps real state (the
    local driver's nodes, the pools' cluster keys; None: the core settings' `data_dir`)."""
    # Both read the engine's views, which ask this registry what the driver in force offers.
    from backend.provisioning.drivers.routing import PoolRouting
    from backend.provisioning.drivers.ssh_hosts.driver import SshHostsDriver

    configured = entry(settings.driver).build(settings, data_dir, clock)
    # The runtime always passes the data dir; an engine built without one (tests) keeps the pools' cluster
    # files in a private temporary directory.
    root = (data_dir.expanduser() if data_dir is not None
            else Path(tempfile.gettempdir()) / f"gpucloud-{os.getuid()}") / "ssh_hosts"
    return PoolRouting(configured, SshHostsDriver(root, clock=clock))


def configured_capabilities() -> Capabilities | None:
    """What the driver in force offers (None: `GPUCLOUD_DRIVER` names no registered driver)."""
    found = DRIVERS.get(configured().driver)
    return None if found is None else found.capabilities


def offered_orchestrators() -> tuple[str, ...]:
    """The orchestrators the driver in force runs (admission refuses others, the catalog lists these)."""
    offered = configured_capabilities()
    return () if offered is None else offered.orchestrators


def local_address_range() -> str | None:
    """The block every cluster subnet comes from instead of the catalog's region and fabric blocks: the
    configured `local_address_range` when the driver's nodes sit on this host's network (all regions share
    its routing table), else None."""
    settings, offered = configured(), configured_capabilities()
    if offered is not None and offered.host_network and settings.local_address_range:
        return settings.local_address_range
    return None
