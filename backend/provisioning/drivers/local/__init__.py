"""The `local` driver: real nodes as network namespaces on this Linux machine (root only), running real
Slurm daemons and sshd, with real shared mounts (docs/local-driver.md)."""

from __future__ import annotations

from pathlib import Path

from backend.domain.clock import Clock
from backend.provisioning.driver import Capabilities, ProvisioningDriver
from backend.provisioning.settings import EngineSettings

# No Kubernetes control plane to start here; the nodes sit on host bridges (no public addresses).
CAPABILITIES = Capabilities(
    orchestrators=("slurm", "none"),
    host_network=True,
    telemetry=True,
    workload=True,
    logs=True,
    partitions=True,
    volume_data=True,
)


def host_problem() -> str | None:
    """Why this machine cannot run local nodes (one message), or None."""
    from backend.provisioning.drivers.local import preflight

    problems = preflight.host_problems(preflight.address_ranges())
    return preflight.report(problems) if problems else None


def build(settings: EngineSettings, data_dir: Path | None, clock: Clock) -> ProvisioningDriver:
    """Namespace nodes under `<data_dir>/local`; refuses to start where the host cannot run them."""
    from backend.provisioning.drivers.local.driver import LocalDriver, local_root
    from backend.provisioning.images import TransportPolicy

    if data_dir is None:  # the runtime always passes it; a caller without one has no place for nodes
        raise ValueError("the local driver keeps its nodes in the data dir: pass data_dir")
    return LocalDriver(local_root(data_dir), clock=clock,
                       registries=TransportPolicy(ca_dir=settings.registry_ca_dir))
