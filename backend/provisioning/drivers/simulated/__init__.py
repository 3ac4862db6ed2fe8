"""The `simulated` driver: a modelled datacenter (phase durations, seeded faults, a spot market and a
modelled Slurm workload), the default and the model for scale tests."""

from __future__ import annotations

from pathlib import Path

from backend.domain.clock import Clock
from backend.provisioning.driver import Capabilities, ProvisioningDriver
from backend.provisioning.settings import EngineSettings

CAPABILITIES = Capabilities(
    orchestrators=("slurm", "kubernetes", "none"),
    telemetry=True,
    workload=True,
    logs=True,
    spot_market=True,
)


def build(settings: EngineSettings, data_dir: Path | None, clock: Clock) -> ProvisioningDriver:
    """The modelled datacenter (it keeps its operations in the engine's database, not in `data_dir`, and
    takes time from the engine's passes, not from `clock`)."""
    del data_dir, clock
    from backend.provisioning.drivers.simulated.datacenter import SimulatedDatacenter

    return SimulatedDatacenter(settings)
