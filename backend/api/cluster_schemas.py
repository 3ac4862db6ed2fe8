"""Wire schemas of /v1/clusters: the declared spec (create, partial update) and the cluster as returned."""

from __future__ import annotations

import re
from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict, StringConstraints
from pydantic.config import JsonDict

from backend.api.schemas import WRITE_ONLY, DateTimeInRange, StrictModel, money_text
from backend.domain.lifetime import IDLE_MAX_MINUTES, IDLE_MIN_MINUTES, TTL_DOC, TTL_PATTERN
from backend.provisioning.scale_down import DEFAULT_GRACE_MINUTES, GRACE_DOC, MAX_GRACE_MINUTES

Orchestrator = Literal["slurm", "kubernetes", "none"]
Interconnect = Literal["infiniband", "efa", "ethernet"]
Container = Annotated[str, StringConstraints(min_length=1, max_length=512), Field(
    description="A single-node cluster's container: an alias of the catalog (`base`, `pytorch`) or an OCI "
    "image reference; logins run inside it"
)]
NodeRepair = Literal["auto", "manual"]
NODE_REPAIR_DOC = (
    "auto: a failed or degraded node is drained and replaced in place (same hostname, new instance_id); "
    "manual: it stays failed or degraded until a node action"
)
CapacityType = Literal["on_demand", "spot", "spot_with_fallback"]
CAPACITY_TYPE_DOC = (
    "on_demand; spot: nodes from the region's spot pool at the spot price, preempted (with a 2-minute "
    "notice) when the market reclaims capacity and re-acquired when it returns; spot_with_fallback: spot, "
    "and on-demand nodes stand in while spot is short (at create and after a preemption). Changing it "
    "replaces the cluster"
)
ClusterName = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=r"^[a-z0-9-]+$")]
CatalogName = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._-]+$")]
RefId = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[a-z]{3}_[0-9a-z]+$")]
LabelKey = Annotated[
    str, StringConstraints(min_length=1, max_length=63, pattern=r"^[a-z0-9]([a-z0-9._/-]{0,61}[a-z0-9])?$")
]
LabelValue = Annotated[str, StringConstraints(max_length=256, pattern=r"^[^\x00-\x1f\x7f]*$")]
Labels = Annotated[dict[LabelKey, LabelValue], Field(max_length=64, description="Free-form key/value tags")]
MONEY_MAX_DIGITS, MONEY_DECIMAL_PLACES = 14, 4
# JSON Schema has no keyword for digits and places: published as extensions for plan-time checks.
# Strict(False): a JSON number or a plain decimal string (exact), never a boolean.
Money = Annotated[
    Decimal,
    Strict(False),
    Field(
        gt=0,
        le=Decimal("1000000000"),
        max_digits=MONEY_MAX_DIGITS,
        decimal_places=MONEY_DECIMAL_PLACES,
        json_schema_extra={"x-max-digits": MONEY_MAX_DIGITS, "x-decimal-places": MONEY_DECIMAL_PLACES},
    ),
    money_text(MONEY_DECIMAL_PLACES),  # after Field: the constraints stay in the JSON Schema
]


Ttl = Annotated[str, StringConstraints(max_length=32, pattern=TTL_PATTERN), Field(description=TTL_DOC)]
EXPIRES_AT_DOC = (
    "When the engine deletes the cluster (RFC 3339, in the future); with ttl it is created_at + ttl. "
    "deletion_protection keeps an expired cluster running with a warning instead"
)
IDLE_DOC = (
    "Slurm clusters: delete the cluster once it has had no running or pending job for this many minutes"
)


def _rfc3339_text(value: object) -> object:
    if not isinstance(value, str) or not re.match(r"^\d{4}-\d{2}-\d{2}T", value):
        raise ValueError("expected an RFC 3339 date-time string such as 2026-12-01T18:00:00Z")
    return value


# Strict(False): request bodies are strict, but a date-time arrives as a JSON string.
ExpiresAt = Annotated[datetime, Strict(False), BeforeValidator(_rfc3339_text), DateTimeInRange]
IdleMinutes = Annotated[int, Field(ge=IDLE_MIN_MINUTES, le=IDLE_MAX_MINUTES, description=IDLE_DOC)]
GraceMinutes = Annotated[int, Field(ge=0, le=MAX_GRACE_MINUTES, description=GRACE_DOC)]


AUTOSCALING_DOC = (
    "Slurm clusters: the engine sets node_count between min_nodes and max_nodes from the job queue (grows "
    "while jobs wait for nodes, releases nodes idle for scale_down_idle_minutes); node_count is then "
    "computed and must not be sent"
)
DEFAULT_SCALE_DOWN_IDLE_MINUTES = 10


class Autoscaling(StrictModel):
    min_nodes: int = Field(ge=1, le=4096, description="Fewest nodes (the cluster starts with this many)")
    max_nodes: int = Field(ge=1, le=4096, description="Most nodes (at most the fabric's capacity)")
    scale_down_idle_minutes: int = Field(
        default=DEFAULT_SCALE_DOWN_IDLE_MINUTES, ge=IDLE_MIN_MINUTES, le=IDLE_MAX_MINUTES,
        description="A node with no job for this many minutes is released (never below min_nodes)",
    )

SLURM_CONFIG_DOC = (
    "Slurm clusters: partitions beyond the default `gpu` one, QoS (in slurmdbd, allowed to the cluster's "
    "user) and a prolog / epilog script on one of the cluster's shared volumes. Changes apply in place "
    "(slurm.conf rewritten, `scontrol reconfigure`, QoS set with sacctmgr); null: none"
)
SlurmName = Annotated[str, StringConstraints(min_length=1, max_length=32, pattern=r"^[a-z][a-z0-9_-]*$")]
MAX_SLURM_MINUTES = 365 * 24 * 60
SLURM_SCRIPT_ROOT = "/mnt/shared/"  # where shared volumes are mounted on the nodes
SlurmScript = Annotated[
    str,
    StringConstraints(max_length=255, pattern=r"^/mnt/shared/[a-z]{3}_[0-9a-z]+(/[A-Za-z0-9._-]+)+$"),
    Field(description="Absolute path of an executable on an attached shared volume: "
          "/mnt/shared/<volume id>/<path>, run by slurmd as root"),
]


class SlurmPartition(StrictModel):
    name: SlurmName = Field(description="Partition name (not `gpu`, the generated default partition)")
    max_time_minutes: int = Field(
        default=7 * 24 * 60, ge=1, le=MAX_SLURM_MINUTES, description="Longest time limit of a job (MaxTime)"
    )
    default_time_minutes: int = Field(
        default=60, ge=1, le=MAX_SLURM_MINUTES,
        description="Time limit of a job that asks for none (DefaultTime); at most max_time_minutes",
    )
    default: bool = Field(default=False, description="The default partition in place of `gpu` (one at most)")


class SlurmQos(StrictModel):
    name: SlurmName = Field(description="QoS name (not `normal`, which every cluster has)")
    priority: int = Field(default=0, ge=0, le=1_000_000, description="Priority of the QoS' jobs (Priority)")
    max_wall_minutes: int | None = Field(
        default=None, ge=1, le=MAX_SLURM_MINUTES,
        description="Longest wall time of a job (MaxWall); null: none",
    )


class SlurmConfig(StrictModel):
    partitions: list[SlurmPartition] = Field(
        default_factory=list, max_length=16,
        description="Partitions beside `gpu`, each with every node of the cluster",
    )
    qos: list[SlurmQos] = Field(
        default_factory=list, max_length=16,
        description="QoS beside `normal`, each allowed to the cluster's user (sbatch --qos=<name>)",
    )
    prolog: SlurmScript | None = Field(default=None, description="Prolog= of slurm.conf")
    epilog: SlurmScript | None = Field(default=None, description="Epilog= of slurm.conf")


SECURITY_GROUPS_DOC = (
    "Security groups whose rules the nodes enforce (traffic between the cluster's own nodes is always "
    "allowed); empty: the project's default group (SSH in from anywhere, all out). Changes apply in place"
)


MAX_CONTAINER_IMAGES = 16
ImageReference = Annotated[str, StringConstraints(min_length=1, max_length=512)]
ContainerImages = Annotated[dict[str, ImageReference], Field(
    max_length=MAX_CONTAINER_IMAGES,
    description="Container images: name -> OCI reference (registry/repository:tag or @sha256:digest). "
    "Each is pulled once onto the cluster's shared storage and shown read-only at /images/<name> on every "
    "node (`srun --container=/images/<name> ...`); a change imports in place and switches the name",
)]


class RegistryLogin(StrictModel):
    username: str = Field(min_length=1, max_length=256)
    password: str = Field(min_length=1, max_length=4096, description="Write-only: never returned",
                          json_schema_extra=WRITE_ONLY)


RegistryCredentials = Annotated[dict[str, RegistryLogin], Field(
    max_length=16,
    description="Credentials per registry (host[:port], e.g. registry.internal:5000) for private images; "
    "stored sealed, the password never returned. A PATCH replaces the whole map",
)]


class Billing(StrictModel):
    type: Literal["on_demand", "reserved"] = Field(default="on_demand", description="on_demand or reserved")
    duration_days: int | None = Field(default=None, ge=1, le=90, description="Reserved term (reserved only)")
    on_expiry: Literal["decommission", "convert_to_on_demand"] | None = Field(
        default=None, description="What happens at the end of a reserved term (default decommission)"
    )


HOST_POOL_DOC = (
    "Make the nodes of the project's own servers in this host pool (docs/guides/own-hosts.md): one ready, "
    "free host per node, each with the GPUs of instance_type (default: what the pool's servers have); region "
    "is the pool's; Slurm only (the default); no reservation, spot, reserved billing, autoscaling, reserved "
    "IP or containers; no compute charge"
)


# region and instance_type are required unless host_pool_id names a pool (services.pool_clusters.complete).
REGION_AND_TYPE_OR_POOL: JsonDict = {"anyOf": [
    {"required": ["region", "instance_type"]},
    {"required": ["host_pool_id"], "properties": {"host_pool_id": {"type": "string"}}},
]}


class ClusterCreate(StrictModel):
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=REGION_AND_TYPE_OR_POOL)

    name: ClusterName = Field(description="DNS label prefix of the node hostnames")
    region: CatalogName | None = Field(
        default=None, description="Required, unless host_pool_id is set (then the pool's region)"
    )
    instance_type: CatalogName | None = Field(
        default=None,
        description="Required, unless host_pool_id is set (then the catalog's type that the pool's ready "
        "servers are: their GPU count and model)",
    )
    node_count: int = Field(default=1, ge=1, le=4096)
    orchestrator: Orchestrator | None = Field(
        default=None, description="Default: none for 1 node, else slurm"
    )
    interconnect: Interconnect | None = Field(default=None, description="Default: the instance type's fabric")
    container: Container | None = Field(default=None, description="Single-node clusters only")
    ssh_key_ids: list[RefId] = Field(default_factory=list, max_length=64)
    volume_ids: list[RefId] = Field(default_factory=list, max_length=64)
    security_group_ids: list[RefId] = Field(
        default_factory=list, max_length=16, description=SECURITY_GROUPS_DOC
    )
    billing: Billing | None = None
    reservation_id: RefId | None = Field(
        default=None,
        description="Draw the nodes from this capacity reservation (same region and instance type; "
        "prepaid, so not metered on-demand); they go back to it when the cluster goes",
    )
    host_pool_id: RefId | None = Field(default=None, description=HOST_POOL_DOC)
    labels: Labels = Field(default_factory=dict)
    deletion_protection: bool = False
    max_hourly_cost_usd: Money | None = Field(default=None, description="Refuse specs that would cost more")
    node_repair: NodeRepair = Field(default="auto", description=NODE_REPAIR_DOC)
    capacity_type: CapacityType = Field(default="on_demand", description=CAPACITY_TYPE_DOC)
    ttl: Ttl | None = None
    expires_at: ExpiresAt | None = Field(default=None, description=EXPIRES_AT_DOC)
    idle_teardown_minutes: IdleMinutes | None = None
    scale_down_grace_minutes: GraceMinutes = DEFAULT_GRACE_MINUTES
    autoscaling: Autoscaling | None = Field(default=None, description=AUTOSCALING_DOC)
    slurm_config: SlurmConfig | None = Field(default=None, description=SLURM_CONFIG_DOC)
    reserved_ip_id: RefId | None = Field(
        default=None,
        description="A reserved IP of the cluster's region its login node answers on (default: a floating "
        "address). Naming one another cluster holds moves it here; that cluster gets a floating address",
    )
    container_images: ContainerImages = Field(default_factory=dict)
    registry_credentials: RegistryCredentials = Field(default_factory=dict)


class ClusterUpdate(StrictModel):
    """Partial update: absent fields keep their value; region, instance_type, orchestrator, interconnect,
    capacity_type, billing.type and billing.duration_days may only repeat their current value."""

    name: ClusterName | None = None
    region: CatalogName | None = None
    instance_type: CatalogName | None = None
    node_count: int | None = Field(default=None, ge=1, le=4096)
    orchestrator: Orchestrator | None = None
    interconnect: Interconnect | None = None
    container: Container | None = None
    ssh_key_ids: list[RefId] | None = Field(default=None, max_length=64)
    volume_ids: list[RefId] | None = Field(default=None, max_length=64)
    security_group_ids: list[RefId] | None = Field(
        default=None, max_length=16, description=SECURITY_GROUPS_DOC
    )
    billing: Billing | None = None
    reservation_id: RefId | None = Field(default=None, description="May only repeat its current value")
    host_pool_id: RefId | None = Field(default=None, description="May only repeat its current value")
    labels: Labels | None = None
    deletion_protection: bool | None = None
    max_hourly_cost_usd: Money | None = None
    node_repair: NodeRepair | None = Field(default=None, description=NODE_REPAIR_DOC)
    capacity_type: CapacityType | None = Field(default=None, description="May only repeat its current value")
    ttl: Ttl | None = Field(default=None, description=TTL_DOC + "; null clears the expiry")
    expires_at: ExpiresAt | None = Field(default=None, description=EXPIRES_AT_DOC + "; null clears it")
    idle_teardown_minutes: IdleMinutes | None = None
    scale_down_grace_minutes: GraceMinutes | None = None
    autoscaling: Autoscaling | None = Field(default=None, description=AUTOSCALING_DOC + "; null turns it off")
    slurm_config: SlurmConfig | None = Field(
        default=None, description=SLURM_CONFIG_DOC + ". Replaced whole by a PATCH"
    )
    reserved_ip_id: RefId | None = Field(
        default=None, description="A reserved IP to answer on (moved from its holder); null: floating address"
    )
    container_images: ContainerImages | None = None
    registry_credentials: RegistryCredentials | None = None
    remove_node_names: (
        list[Annotated[str, StringConstraints(max_length=80, pattern=r"^[a-z0-9-]+$")]] | None
    ) = Field(
        default=None,
        max_length=4096,
        description="With a lower node_count: which nodes to release (default: idle nodes first, then the "
        "newest); a node running jobs is drained first and given scale_down_grace_minutes",
    )


# Fields whose null in a PATCH means "clear it"; for the others null means "leave unchanged".
NULLABLE_FIELDS = (
    "container", "max_hourly_cost_usd", "ttl", "expires_at", "idle_teardown_minutes", "autoscaling",
    "reserved_ip_id", "slurm_config",
)


class BillingOut(BaseModel):
    type: str
    duration_days: int | None
    on_expiry: str | None


class ImageOut(BaseModel):
    name: str
    reference: str
    state: Literal["pending", "importing", "ready", "failed"]
    digest: str | None
    size_bytes: int | None
    reason: str | None
    updated_at: datetime | None


class ClusterOut(BaseModel):
    """A cluster: the declared spec exactly as written (defaults filled in), then computed state."""

    model_config = ConfigDict(extra="allow")

    id: str
    name: str
    region: str
    instance_type: str
    node_count: int
    orchestrator: str
    interconnect: str
    container: str | None
    ssh_key_ids: list[str]
    volume_ids: list[str]
    security_group_ids: list[str] = Field(description="As written; empty: the project's default group")
    billing: BillingOut
    reservation_id: str | None = None
    host_pool_id: str | None = None
    labels: dict[str, str]
    deletion_protection: bool
    max_hourly_cost_usd: float | None
    node_repair: str
    capacity_type: str
    ttl: str | None
    expires_at: datetime | None
    idle_teardown_minutes: int | None
    scale_down_grace_minutes: int = Field(default=DEFAULT_GRACE_MINUTES, description=GRACE_DOC)
    autoscaling: dict[str, int] | None = Field(
        default=None, description="min_nodes, max_nodes and scale_down_idle_minutes (null: fixed node_count)"
    )
    reserved_ip_id: str | None = None
    slurm_config: dict[str, Any] | None = Field(
        default=None, description="The declared Slurm configuration, defaults filled in (null: none)"
    )
    container_images: dict[str, str] = Field(default_factory=dict, description="As written")
    registry_credentials: dict[str, dict[str, str]] = Field(
        default_factory=dict, description="registry -> {username}: passwords are never returned"
    )
    images: list[ImageOut] = Field(
        default_factory=list,
        description="One per declared image, by name: the import's state (pending, importing, ready, failed "
        "with reason) and the digest and unpacked size of what /images/<name> shows now (a failed update "
        "keeps the previous image)",
    )
    image_storage_bytes: int = Field(
        default=0, description="What the images take on the cluster's shared storage (one copy per digest)"
    )
    warnings: list[str] = Field(
        default_factory=list,
        description="Conditions to act on, such as an expiry that deletion_protection blocked",
    )
    status: str = Field(
        description="PENDING, PROVISIONING, CONFIGURING, CONTAINER_CREATING, RUNNING, PAUSED (out of "
        "credits: nodes powered off), DESTROYING, DESTROYED or FAILED"
    )
    phase: str | None
    status_reason: str | None
    num_gpus: int
    gpu_type: str | None
    estimated_hourly_cost_usd: float | None
    deletion_requested_at: datetime | None
    created_at: datetime
    updated_at: datetime
    nodes: list[dict[str, Any]] = Field(
        default_factory=list,
        description="name, instance_id, role, index, status, health, private_ip, public_ip, network, "
        "capacity_type, preemption_at, and host_key: the node's SSH host key as an OpenSSH public-key line "
        "(`ssh-ed25519 AAAA...`) to verify it by, null until the machine has booted",
    )
    login: dict[str, Any] | None = Field(
        default=None,
        description="How to SSH in: host, public_ip (the address), user, ssh_command, and host_key: the "
        "login host's SSH host key (the jumphost's for a multi-node cluster, else the node's) as an "
        "OpenSSH public-key line, null until it is up. Null before the cluster is placed",
    )
    slurm: dict[str, Any] | None = None
    kubernetes: dict[str, Any] | None = None
    nccl_env: dict[str, str] = Field(default_factory=dict)
    fabric: dict[str, Any] | None = None
    reservation: dict[str, Any] | None = Field(
        default=None, description="The reserved term once it started (billing.type = reserved)"
    )
    phase_history: list[dict[str, Any]] = Field(default_factory=list)


class ScaleDownJobOut(BaseModel):
    job_id: int
    name: str
    user: str
    nodes: str = Field(description="Slurm NodeList (a job on several nodes is requeued as a whole)")
    started_at: datetime | None


class ScaleDownNodeOut(BaseModel):
    name: str
    index: int
    running_jobs: list[ScaleDownJobOut] = Field(
        description="Jobs running on the node now: it is drained, they get scale_down_grace_minutes to end, "
        "then they are requeued"
    )
    already_leaving: bool = Field(description="An earlier scale-down already chose it (it is draining)")


class ScaleDownPreviewOut(BaseModel):
    """What a scale-down to `node_count` would do, read now (the engine decides again when it runs)."""

    cluster_id: str
    node_count: int = Field(description="The node_count asked about")
    current_node_count: int
    scale_down_grace_minutes: int
    workload_known: bool = Field(
        description="False: the driver cannot read the cluster's jobs (no Slurm, or no workload source); "
        "the newest nodes go first and running jobs are not known"
    )
    nodes: list[ScaleDownNodeOut] = Field(description="The nodes that would go: idle first, then the newest")
    summary: str = Field(description="One sentence for people (plan warnings, the CLI)")
