"""The driver interface between the engine and the hardware (real or modelled).

Every call carries a deterministic client token; submitting the same token twice returns the same
operation (so a step retried after a crash never starts a second machine). An operation's result is
visible once `ready_at` has passed; `ready_at is None` means it never completes (a health watch on a
healthy node).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar, Protocol, cast

from sqlalchemy.orm import Session

from backend.node_agent.host import HostReading
from backend.node_agent.links import LinkReading
from backend.node_agent.nvidia import GpuReading
from backend.node_agent.xid import XidEvent


class OpKind(StrEnum):
    CONTROL_PLANE_CREATE = "control_plane_create"
    CONTROL_PLANE_RELEASE = "control_plane_release"
    NODE_BOOT = "node_boot"
    FABRIC_JOIN = "fabric_join"
    DRIVERS_INSTALL = "drivers_install"
    VOLUME_ATTACH = "volume_attach"
    ORCHESTRATOR_JOIN = "orchestrator_join"
    ACCEPTANCE = "acceptance"
    CONTAINER_START = "container_start"
    RECONFIGURE = "reconfigure"
    CONTAINER_RECREATE = "container_recreate"
    NODE_POWER_OFF = "node_power_off"  # credit pause: shut down, keep the machine (and its disk)
    NODE_POWER_ON = "node_power_on"  # resume: power on and boot from the installed image
    NODE_RESTART = "node_restart"  # day 2: reboot the machine in place (node action `restart`)
    NODE_DRAIN = "node_drain"  # day 2: no new work on the node (Slurm DRAIN / Kubernetes cordon)
    NODE_RESUME = "node_resume"  # day 2: undo a drain
    NODE_REQUEUE = "node_requeue"  # scale-down past its grace: requeue the jobs left on a drained node
    NODE_RELEASE = "node_release"
    HEALTH_WATCH = "health_watch"
    IMAGES_IMPORT = "images_import"  # pull the cluster's container images once onto its shared storage


@dataclass(frozen=True)
class OperationRequest:
    client_token: str
    kind: OpKind
    # What the operation is about, stable across retries (the simulated datacenter derives its
    # seeded randomness from these, not from ids, so a scenario replays identically).
    cluster_name: str
    node_name: str | None = None
    attempt: int = 1
    instance_type: str | None = None
    fabric: str | None = None
    slot: int | None = None
    volumes_changed: bool = True
    # The caller minted this token in the current transaction and never submitted it before, so a
    # driver may skip its idempotency lookup (an optimisation only; submitting stays idempotent).
    first_submission: bool = False
    # Which cluster and node (engine ids): a driver acting on real machines reads their addresses,
    # keys and volumes from the engine's tables with these.
    cluster_id: str | None = None
    node_id: str | None = None
    # IMAGES_IMPORT: the images the cluster declares, (name, reference) sorted by name; the driver reads
    # the registry credentials from the cluster itself (they never travel in a request).
    images: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ImageOutcome:
    """One image of an IMAGES_IMPORT: imported (digest and unpacked size) and shown at /images/<name>, or
    not (`error`: why, naming the image; the name keeps what it showed before)."""

    name: str
    reference: str
    digest: str | None = None
    size_bytes: int | None = None
    error: str | None = None


@dataclass(frozen=True)
class Operation:
    client_token: str
    kind: OpKind
    submitted_at: dt.datetime
    ready_at: dt.datetime | None
    succeeded: bool
    reason: str | None = None
    # NODE_BOOT and CONTROL_PLANE_CREATE, once succeeded: the machine's SSH host key as an OpenSSH
    # public-key line (`ssh-ed25519 AAAA...`), which the API publishes for clients to verify; None: the
    # driver does not know it.
    host_key: str | None = None
    # IMAGES_IMPORT, once done: one outcome per declared image (the operation failed if any failed).
    images: tuple[ImageOutcome, ...] = ()

    def done(self, now: dt.datetime) -> bool:
        return self.ready_at is not None and now >= self.ready_at


@dataclass(frozen=True)
class Capabilities:
    """What a driver offers, declared once by the driver (its registry entry and its class carry the same
    object): admission, the catalog, the views and the day-2 reads ask this, never the driver object."""

    orchestrators: tuple[str, ...]  # what admission accepts and the catalog lists
    # Nodes have no public address: the host reaches the login node at its private address, which is
    # what `ssh` is pointed at; and cluster subnets may come from `local_address_range`.
    host_network: bool = False
    telemetry: bool = False  # TelemetrySource: what each node's agent reports
    workload: bool = False  # WorkloadSource: the scheduler's jobs
    logs: bool = False  # LogSource: controller and node logs
    partitions: bool = False  # PartitionSource: a real scheduler's partitions
    volume_data: bool = False  # VolumeStore: real volume data to free on delete
    spot_market: bool = False  # spot.SpotMarket: spot nodes are reclaimed and capacity returns


class ProvisioningDriver(Protocol):
    """Hardware operations. `session` is the caller's transaction: a driver may keep its own records
    there (the simulated datacenter does), so they commit or roll back with the engine's step."""

    name: str
    capabilities: Capabilities

    def submit(self, session: Session, request: OperationRequest, now: dt.datetime) -> Operation:
        """Start the operation named by `request.client_token`, or return it if it exists."""
        ...

    def get(self, session: Session, client_token: str) -> Operation | None:
        """The operation with this client token, or None if it was never submitted."""
        ...


# Node telemetry (day 2, optional): a driver that can say what a node reports implements
# `TelemetrySource` next to `ProvisioningDriver` and declares `Capabilities.telemetry`. Readings use the
# node agent's own types, so the simulated datacenter and a real agent answer in one shape.


@dataclass(frozen=True)
class TelemetryTarget:
    """The node asked about: its machine (`instance_id`) and what the simulated model seeds from."""

    cluster_name: str
    node_name: str
    instance_id: str
    attempt: int
    instance_type: str
    gpu_count: int
    watch_token: str | None  # the node's current health watch (where a fault would come from)
    created_at: dt.datetime


@dataclass(frozen=True)
class NodeTelemetry:
    read_at: str  # ISO 8601, UTC
    gpus: list[GpuReading] | None  # None: no GPU readings (`gpus_unavailable_reason` says why)
    gpus_unavailable_reason: str | None
    xid_events: list[XidEvent]  # oldest first
    host: HostReading | None = None  # the machine's CPU and memory, where a real agent read them
    # The scheduler's own view of the node (Slurm: IDLE, MIXED, ALLOCATED, DRAIN, DOWN, UNKNOWN), where the
    # driver can ask it; None: derived from the engine's state and the GPU readings instead.
    orchestrator_state: str | None = None
    # The scheduler's reason for a drained or down node (Slurm's `Reason=`), where the driver can tell.
    orchestrator_reason: str | None = None
    # NVLink and InfiniBand link state, where a real agent read it (None: not read by this driver).
    links: LinkReading | None = None


class TelemetrySource(Protocol):
    def nodes_telemetry(self, session: Session, targets: Sequence[TelemetryTarget], now: dt.datetime
                        ) -> list[NodeTelemetry]:
        """What each node's agent reports at `now`, in the order of `targets` (one call per read, so a
        driver can fetch what it needs for all nodes at once)."""
        ...


def telemetry_of(driver: ProvisioningDriver) -> TelemetrySource | None:
    """The driver as a telemetry source, or None when it declares none."""
    return cast(TelemetrySource, driver) if driver.capabilities.telemetry else None


# The orchestrator's jobs (day 2, optional): a driver that can read its cluster's scheduler (squeue /
# sacct under Slurm) implements `WorkloadSource`.
@dataclass(frozen=True)
class Outage:
    """A span in which a node's machine was off while staying the node's (a credit pause powers it off):
    Slurm had the node DOWN, so the jobs running on it were requeued at `start`."""

    start: dt.datetime
    end: dt.datetime | None  # RUNNING again at (None: still off)
    reason: str  # why the machine was off, as its Slurm reason says it (`powered off (credits exhausted)`)


@dataclass(frozen=True)
class NodeRun:
    """One member node as the scheduler sees it."""

    name: str
    index: int
    attempt: int
    gpu_count: int
    up_since: dt.datetime | None  # RUNNING since (None: not up)
    failed_at: dt.datetime | None  # FAILED at (None: not failed)
    drained: bool
    # A repair in place: when the machine this one replaces failed, or was taken out to be replaced (its
    # running job was requeued and restarts here). None: not a replacement.
    replaced_failure: dt.datetime | None = None
    # When this machine first ran (before `up_since` when it was off since, e.g. paused and resumed; set
    # while it is off too). None: `up_since`.
    first_up: dt.datetime | None = None
    outages: tuple[Outage, ...] = ()  # its spans off since `first_up`, oldest first (the last may be open)
    # A replacement: when the machine it replaces first ran (None: unknown; the slot before it went out).
    replaced_since: dt.datetime | None = None


@dataclass(frozen=True)
class Job:
    job_id: int
    name: str
    user: str
    partition: str
    nodes: str
    gpus: int  # the job's GPUs over all its nodes (Slurm's gres/gpu TRES: 3 nodes x gpu:4 = 12)
    state: str  # Slurm's own job state as squeue/sacct print it: RUNNING, PENDING, COMPLETED, CANCELLED, ...
    submitted_at: dt.datetime
    started_at: dt.datetime | None
    ended_at: dt.datetime | None
    time_limit: dt.timedelta
    priority: int
    reason: str | None
    node_count: int = 1  # nodes the job asks for (a pending job) or holds
    array_job_id: int | None = None  # an array task's array (Slurm's `1234_5`: 1234), else None
    array_task_id: int | None = None  # its index in the array (5); None: not one task (a pending rest)
    # An array's tasks not started yet, which Slurm keeps as one record (job id the array's) until they
    # start: its task list as Slurm writes it (`3-5`, `1,4-9`, `3-5%2` with a limit), squeue's
    # `1234_[3-5]`; None: not such a record.
    array_tasks: str | None = None

    # Slurm's states of a job that still holds its nodes, and of one waiting to be given some.
    HOLDING_STATES: ClassVar[frozenset[str]] = frozenset(
        {"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "RESIZING", "SIGNALING", "STAGE_OUT"})
    WAITING_STATES: ClassVar[frozenset[str]] = frozenset(
        {"PENDING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESV_DEL_HOLD"})

    def run_time(self, now: dt.datetime) -> dt.timedelta:
        if self.started_at is None:
            return dt.timedelta(0)
        return (self.ended_at or now) - self.started_at

    def holds_nodes(self) -> bool:
        """Slurm has the job on its nodes (running, completing, configuring, suspended, ...)."""
        return self.state in self.HOLDING_STATES

    def is_waiting(self) -> bool:
        """The job waits for nodes (pending, or requeued and not pending yet)."""
        return self.state in self.WAITING_STATES


_RANGE = re.compile(r"^(.*)\[([\d,-]+)\]$")


def node_names(expression: str) -> set[str]:
    """The nodes of a Slurm NodeList (`train-[0-2,5]`, `train-1,train-3`)."""
    names: set[str] = set()
    for part in re.split(r",(?![^\[]*\])", expression.strip()):
        found = _RANGE.match(part)
        if found is None:
            names.update([part] if part else [])
            continue
        prefix, ranges = found.groups()
        for span in ranges.split(","):
            low, _, high = span.partition("-")
            names.update(f"{prefix}{i}" for i in range(int(low), int(high or low) + 1))
    return names


class WorkloadSource(Protocol):
    def cluster_jobs(self, session: Session, cluster_name: str, nodes: Sequence[NodeRun], now: dt.datetime,
                     *, cluster_id: str) -> list[Job]:
        """The cluster's jobs (the last day and the queue), newest first."""
        ...


def workload_of(driver: ProvisioningDriver) -> WorkloadSource | None:
    """The driver as a workload source, or None when it declares none."""
    return cast(WorkloadSource, driver) if driver.capabilities.workload else None


@dataclass(frozen=True)
class PowerRequests:
    """What slurmctld's power saving asked for and the cluster does not have yet
    (backend.provisioning.power_saving)."""

    resume: tuple[str, ...] = ()  # names Slurm powers up that have no machine
    suspend: tuple[str, ...] = ()  # members Slurm powered down

    def __bool__(self) -> bool:
        return bool(self.resume or self.suspend)


class PowerRequestSource(Protocol):
    def power_requests(self, session: Session, cluster_id: str, members: Sequence[str]
                       ) -> PowerRequests | None:
        """What slurmctld's power saving asked for (ResumeProgram, SuspendProgram) that the cluster's
        `members` do not satisfy yet; requests already satisfied are acknowledged (dropped). None: the
        cluster is not elastic, or its controller cannot be asked now."""
        ...


def power_requests_of(driver: ProvisioningDriver) -> PowerRequestSource | None:
    """The driver as a source of Slurm power-saving requests (an optional capability), or None."""
    return cast(PowerRequestSource, driver) if callable(getattr(driver, "power_requests", None)) else None


@dataclass(frozen=True)
class LogRequest:
    """Logs of the controller (`source` = "controller") or of one member node (`source` = its name)."""

    cluster_id: str
    cluster_name: str
    source: str
    nodes: Sequence[NodeRun]
    node: TelemetryTarget | None  # the node asked about (None for the controller)
    tail: int


class LogSource(Protocol):
    def cluster_logs(self, session: Session, request: LogRequest, now: dt.datetime) -> list[str]:
        """The last `request.tail` lines, oldest first (slurmctld, or the node's slurmd and kernel)."""
        ...


def logs_of(driver: ProvisioningDriver) -> LogSource | None:
    """The driver as a log source, or None when it declares none."""
    return cast(LogSource, driver) if driver.capabilities.logs else None


@dataclass(frozen=True)
class Partition:
    """One scheduler partition as the product's partition card shows it."""

    name: str
    nodes: int
    gpus_available: int
    gpus_total: int
    default_time: str
    max_time: str
    state: str


class PartitionSource(Protocol):
    def cluster_partitions(self, session: Session, cluster_id: str, now: dt.datetime
                           ) -> list[Partition] | None:
        """The scheduler's partitions as it reports them (None: it cannot be asked now)."""
        ...


def partitions_of(driver: ProvisioningDriver) -> PartitionSource | None:
    """The driver as a partition source (a real scheduler to ask), or None when it declares none."""
    return cast(PartitionSource, driver) if driver.capabilities.partitions else None


class VolumeStore(Protocol):
    def delete_volume_data(self, volume_id: str) -> None:
        """Remove a deleted volume's data where the driver keeps it (idempotent)."""
        ...


def volume_store_of(driver: ProvisioningDriver) -> VolumeStore | None:
    """The driver as the keeper of volume data (real storage to free), or None when it declares none."""
    return cast(VolumeStore, driver) if driver.capabilities.volume_data else None
