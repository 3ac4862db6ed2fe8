"""Schema of `gpucloud_gpu_cluster` and the mapping from the API's cluster object to Terraform state.

Shared by the resource and the `gpucloud_gpu_cluster` data source (which reuses the computed parts).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from provider.cty import STRING, is_unknown
from provider.framework import (
    NUMBER_VALUE,
    RFC3339,
    BoolAttribute,
    Int64Attribute,
    ListAttribute,
    ListNestedAttribute,
    MapAttribute,
    NumberAttribute,
    Schema,
    SetAttribute,
    SingleNestedAttribute,
    StringAttribute,
    requires_replace,
    requires_replace_if,
    rfc3339_utc,
    timeouts_block,
    use_state_for_unknown,
    use_state_for_unknown_unless_changed,
)
from provider.framework.planmodifiers import PlanModification
from provider.framework.schema import Attribute
from provider.framework.validators import Validator
from provider.resources._common import number
from provider.resources.api_rules import field_validators
from provider.resources.cluster_images import (
    computed_image_attributes,
    credentials_spec,
    image_attributes,
    images_state,
)
from provider.resources.cluster_lifetime import TTL
from provider.resources.gpu_cluster_slurm import (
    SLURM_CONFIG_ATTRIBUTES,
    SLURM_CONFIG_DESCRIPTION,
    slurm_config_spec,
    slurm_config_state,
)

REF_ID_PATTERN = r"[a-z]{3}_[0-9a-z]+"
DEFAULT_BILLING = {"type": "on_demand", "duration_days": None, "on_expiry": "decommission"}
DEFAULT_IDLE_MINUTES = 10
DEFAULT_SCALE_DOWN_GRACE_MINUTES = 30  # the API's default (backend.provisioning.scale_down)
DEFAULT_TIMEOUTS = {"create": "2h", "update": "2h", "delete": "1h"}


def api(field: str, **text: str) -> list[Validator]:
    """The plan-time checks of an API field of ClusterCreate, from the OpenAPI contract."""
    return field_validators("ClusterCreate", field, text=text)


def _computed_str(description: str) -> StringAttribute:
    return StringAttribute(computed=True, description=description)


NODE_ATTRIBUTES: dict[str, Attribute] = {
    "name": _computed_str("Hostname of the node, `<cluster name>-<index>`."),
    "instance_id": _computed_str(
        "Id of the machine backing the node. It changes when the node is repaired or replaced in place "
        "(same `name`): a refresh records the new id, it is never a planned change."
    ),
    "role": _computed_str("`worker` in multi-node clusters, `standalone` for a single-node cluster."),
    "status": _computed_str(
        "Node status: PENDING, PROVISIONING, CONFIGURING, CONTAINER_CREATING, RUNNING, PAUSED (powered off "
        "while the project is out of credits), DESTROYING, FAILED."
    ),
    "health": _computed_str(
        "Node health as the API reports it: `healthy`, `degraded` (running with a recent hardware XID, "
        "uncorrectable ECC errors, a hot GPU or an NVLink / InfiniBand link down), `unreachable` (powered "
        "off), `failed` or `repairing` (being restarted or replaced in place, see `node_repair`). Null "
        "against an API that does not report it."
    ),
    "capacity_type": _computed_str(
        "The capacity the node runs on: `spot` or `on_demand` (an on-demand node standing in while spot "
        "is short, with `capacity_type = \"spot_with_fallback\"`). Billed at that capacity's rate."
    ),
    "private_ip": _computed_str("Address on the cluster's private subnet."),
    "public_ip": _computed_str("Public address, when the node has one (single-node clusters)."),
    "host_key": _computed_str(
        "The node's SSH host key as an OpenSSH public-key line (`ssh-ed25519 AAAA...`), for a known_hosts "
        "entry under `private_ip` (workers are reached through the login host). Null until the machine "
        "has booted; a node replaced in place presents a new one (a refresh records it)."
    ),
    "fabric": _computed_str("Name of the fabric (InfiniBand or EFA network) the node is cabled to."),
    "partition_key": _computed_str("InfiniBand partition key (P_Key) isolating the cluster, e.g. `0x8001`."),
    "hcas": ListAttribute(
        element_type=STRING,
        computed=True,
        description="InfiniBand HCAs used for GPU traffic, one per GPU rail (e.g. `mlx5_0`..`mlx5_7`).",
    ),
    "topology_path": _computed_str(
        "Where the node sits in the fat tree: `<fabric>/su<NN>/pos<NN>` (scalable unit and position)."
    ),
    "leaves": ListAttribute(
        element_type=STRING, computed=True, description="Leaf switches the node's rails connect to."
    ),
    "efa_interfaces": ListAttribute(
        element_type=STRING, computed=True, description="EFA interface devices (EFA fabrics only)."
    ),
}

LOGIN_ATTRIBUTES: dict[str, Attribute] = {
    "host": _computed_str("Address to SSH to: the jumphost of a multi-node cluster, else the node."),
    "port": Int64Attribute(computed=True, description="SSH port."),
    "user": _computed_str("Login user."),
    "ssh_command": _computed_str("A ready-to-run SSH command line."),
    "host_key": _computed_str(
        "The login host's SSH host key as an OpenSSH public-key line (`ssh-ed25519 AAAA...`): the "
        "jumphost's of a multi-node cluster, else the node's. Null until it is up. `gpucloud ssh` verifies "
        "it (strict host key checking); for other clients write `<host> <host_key>` (`[<host>]:<port> "
        "<host_key>` when `port` is not 22) to a known_hosts file."
    ),
}

SLURM_ATTRIBUTES: dict[str, Attribute] = {
    "controller": _computed_str("Host running slurmctld."),
    "partitions": ListAttribute(element_type=STRING, computed=True, description="Slurm partitions."),
}

KUBERNETES_ATTRIBUTES: dict[str, Attribute] = {
    "api_endpoint": _computed_str("URL of the Kubernetes API server."),
    "ca_certificate": _computed_str("PEM CA certificate of the API server."),
}

RESERVATION_ATTRIBUTES: dict[str, Attribute] = {
    "starts_at": _computed_str(
        "Start of the reserved term (RFC 3339): when the cluster first ran; null until then."
    ),
    "ends_at": _computed_str("End of the reserved term (RFC 3339); null until the cluster first runs."),
    "upfront_cost_usd": NumberAttribute(
        computed=True,
        description="The whole term's charge in USD, billed when the cluster first runs (known at plan).",
    ),
}

AUTOSCALING_ATTRIBUTES: dict[str, Attribute] = {
    "min_nodes": Int64Attribute(
        required=True, description="Fewest nodes (the cluster starts with this many).",
        validators=api("autoscaling.min_nodes"),
    ),
    "max_nodes": Int64Attribute(
        required=True, description="Most nodes: at least `min_nodes`, at most what one fabric of the region "
        "holds.", validators=api("autoscaling.max_nodes"),
    ),
    "scale_down_idle_minutes": Int64Attribute(
        optional=True, computed=True, default=DEFAULT_IDLE_MINUTES,
        description=f"A node with no job for this many minutes is released (default {DEFAULT_IDLE_MINUTES}).",
        validators=api("autoscaling.scale_down_idle_minutes"),
    ),
}


class NodeCountFollowsAutoscaling:
    """`node_count` left out: 1, or under `autoscaling` the engine's value, kept from the prior state (a
    move by the autoscaler is not drift), moved into a new range as the API moves it (the nearest bound),
    and known only after apply on create."""

    description = (
        "Default 1. With `autoscaling` the prior value is kept in plans, moved into a new `min_nodes`.."
        "`max_nodes` range as the API moves it; it is known after apply on create."
    )

    def modify(self, m: PlanModification) -> None:
        if m.config_value is not None or not is_unknown(m.plan_value):
            return
        config = m.resource_config or {}
        scaling = config.get("autoscaling")
        if scaling is None:
            m.plan_value = 1
            return
        if is_unknown(scaling) or m.creating or not isinstance(m.state_value, int):
            return
        low, high = scaling.get("min_nodes"), scaling.get("max_nodes")
        if is_unknown(low) or is_unknown(high) or low is None or high is None or int(low) > int(high):
            return
        m.plan_value = min(max(m.state_value, int(low)), int(high))  # the API's move into the range


# `region` and `instance_type` left out on a host pool: the API's choice (the pool's region, the type its
# servers are) is kept from the prior state, unless the cluster moves to another pool (then it is the new
# pool's, planned again). Without a pool they are required, so a null configuration never reaches here.
KEEP_ON_SAME_POOL = use_state_for_unknown_unless_changed("host_pool_id")


BILLING_ATTRIBUTES: dict[str, Attribute] = {
    "type": StringAttribute(
        optional=True,
        computed=True,
        default="on_demand",
        description="`on_demand` (per-second metering) or `reserved` (a prepaid term at a discount). "
        "Changing it replaces the cluster.",
        validators=api("billing.type"),
        plan_modifiers=[requires_replace()],
    ),
    "duration_days": Int64Attribute(
        optional=True,
        description="Length of a reserved term, 1-90 days (reserved only). Changing it replaces the cluster.",
        validators=api("billing.duration_days"),
        plan_modifiers=[requires_replace()],
    ),
    "on_expiry": StringAttribute(
        optional=True,
        computed=True,
        default="decommission",
        description="What happens at the end of a reserved term: `decommission` or "
        "`convert_to_on_demand`. Changes in place.",
        validators=api("billing.on_expiry"),
    ),
}


# What each runtime value follows on an in-place change: it keeps its prior value in the plan unless one
# of these changes (node names and the login/controller host derive from the cluster name).
# (Volumes and SSH keys change no attribute of a node: attaching or detaching keeps them known.)
NODES_FOLLOW = ("name", "node_count", "container", "reserved_ip_id")
HOSTS_FOLLOW = ("name", "node_count")
SLURM_FOLLOWS = (*HOSTS_FOLLOW, "slurm_config")  # its partitions list the declared ones
# The login address (and the Kubernetes API endpoint on it) is the reserved IP, or a floating one.
ADDRESS_FOLLOWS = (*HOSTS_FOLLOW, "reserved_ip_id")
KUBERNETES_FOLLOWS = ("node_count", "reserved_ip_id")
# What `cluster_plan.keep_through_scale` restores after a scale when nothing else they follow changed.
FOLLOWS = {
    "nodes": NODES_FOLLOW, "login": ADDRESS_FOLLOWS, "slurm": SLURM_FOLLOWS, "kubernetes": KUBERNETES_FOLLOWS
}
# Planned unknown again while the cluster is not RUNNING: they are still changing.
RUNTIME_ATTRIBUTES = ("nodes", "login", "slurm", "kubernetes", "nccl_env", "reservation")


def _keep(*follows: str) -> list[Any]:
    """Plan modifiers of a computed value that stays as it is unless one of `follows` changes."""
    return [use_state_for_unknown_unless_changed(*follows)]


def computed_attributes() -> dict[str, Attribute]:
    """The attributes the backend computes (the data source copies them without plan modifiers)."""

    return {
        "id": StringAttribute(
            computed=True, description="Cluster id.", plan_modifiers=[use_state_for_unknown()]
        ),
        "status": _computed_str(
            "PENDING, PROVISIONING, CONFIGURING, CONTAINER_CREATING, RUNNING, PAUSED (the project is out of "
            "credits: nodes powered off until credits are added), DESTROYING or FAILED."
        ),
        "phase": _computed_str("Finer-grained progress, e.g. `ProgrammingFabric`, `Ready`, `Degraded`."),
        "num_gpus": Int64Attribute(
            computed=True, description="GPUs in the cluster (all nodes).", plan_modifiers=_keep("node_count")
        ),
        "gpu_type": StringAttribute(
            computed=True,
            description="GPU model of the instance type, e.g. `H100 SXM 80GB`.",
            plan_modifiers=_keep(),
        ),
        "created_at": StringAttribute(
            computed=True,
            description="When the cluster was created (RFC 3339).",
            plan_modifiers=[use_state_for_unknown()],
        ),
        "nodes": ListNestedAttribute(
            computed=True,
            attributes=NODE_ATTRIBUTES,
            description="The cluster's nodes with their fabric placement.",
            plan_modifiers=_keep(*NODES_FOLLOW),
        ),
        "login": SingleNestedAttribute(
            computed=True,
            attributes=LOGIN_ATTRIBUTES,
            description="How to log in (SSH): the reserved IP when `reserved_ip_id` is set.",
            plan_modifiers=_keep(*ADDRESS_FOLLOWS),
        ),
        "slurm": SingleNestedAttribute(
            computed=True,
            attributes=SLURM_ATTRIBUTES,
            description="Slurm details (Slurm clusters only); `partitions` lists `gpu` and those of "
            "`slurm_config`.",
            plan_modifiers=_keep(*SLURM_FOLLOWS),
        ),
        "kubernetes": SingleNestedAttribute(
            computed=True,
            attributes=KUBERNETES_ATTRIBUTES,
            description="Kubernetes API details (Kubernetes clusters only). Credentials come from the "
            "`gpucloud_cluster_credentials` ephemeral resource, never from state.",
            plan_modifiers=_keep(*KUBERNETES_FOLLOWS),
        ),
        "nccl_env": MapAttribute(
            element_type=STRING,
            computed=True,
            description="NCCL / libfabric environment variables tuned for the cluster's interconnect.",
            plan_modifiers=_keep(),
        ),
        "estimated_hourly_cost_usd": NumberAttribute(
            computed=True,
            description="Hourly cost in USD while all nodes run, at the rate the meter charges (the API's "
            "price: spot and `spot_with_fallback` at the spot rate, 0 while drawing a reservation, a "
            "reserved term at its discounted rate). Known at plan time, so `terraform plan` shows what a "
            "change costs. `max_hourly_cost_usd` is checked against the most it can cost (on-demand for "
            "`spot_with_fallback` nodes standing in).",
            semantic=NUMBER_VALUE,
        ),
        "reservation": SingleNestedAttribute(
            computed=True,
            attributes=RESERVATION_ATTRIBUTES,
            description="The reserved term (reserved billing only).",
            plan_modifiers=_keep("billing"),
        ),
        **computed_image_attributes(),
    }


CLUSTER_SCHEMA = Schema(
    description="A GPU cluster: one or more nodes of one instance type on a GPU fabric (InfiniBand or "
    "EFA), optionally with Slurm or Kubernetes on top.\n\n"
    "- **Plan**: defaults (orchestrator, interconnect), the GPU count and `estimated_hourly_cost_usd` are "
    "known at plan time from the catalog. Every rule the API enforces is checked at plan time against "
    "the values already known, naming the attribute to blame, and so are the capacity of the region for "
    "a create or a scale-up (the error says how many nodes are free) and the project's quotas (the error "
    "names the quota, its value and use; see the `gpucloud_quota` data source). Problems of referenced "
    "objects (an SSH key that does not exist, a volume in another region) are warnings at plan and errors at "
    "apply, so that `terraform destroy` is never blocked by a cluster that was never created. (Before "
    "destroying, Terraform plans the whole configuration once more: a cluster never created whose own "
    "configuration is refused, over its cost cap or without capacity, fails that plan as with any "
    "provider; `terraform destroy -refresh=false` skips it.) An "
    "in-place change keeps the values it cannot alter known in the plan (`login`, `kubernetes`, "
    "`nodes`...), so resources and providers configured from them are not disturbed: a scale of a "
    "multi-node cluster keeps its login, Slurm and Kubernetes endpoints and its surviving nodes known (only "
    "added nodes are known after apply), an `autoscaling` range that leaves `node_count` where it is "
    "plans nothing else, and a settled cluster keeps its `status` when the engine has nothing to do. "
    "`estimated_hourly_cost_usd` is the price charged: spot capacity at the spot rate, a drawn "
    "reservation 0, a cluster on your own servers (`host_pool_id`) 0. A create planned for a cluster the "
    "backend deleted at its `ttl` or `expires_at` says so in a warning.\n"
    "- **In place**: `name`, `node_count` (scaling), `autoscaling` (the range; the engine then moves "
    "`node_count`, see [engine.md](../engine.md#autoscaling)), `container`, `ssh_key_ids`, "
    "`shared_volume_ids` (attach/detach), `security_group_ids`, `reserved_ip_id`, `labels`, "
    "`deletion_protection`, `node_repair`, `max_hourly_cost_usd`, `slurm_config` (Slurm reconfigured, "
    "jobs keep running), `container_images` (imported, then switched atomically; running jobs keep the "
    "old bundle), `registry_credentials`, "
    "`billing.on_expiry`. "
    "**Replace**: `region`, `instance_type`, `orchestrator`, `interconnect`, `host_pool_id`, "
    "`capacity_type` (moving "
    "running nodes between capacity types would interrupt them: a new cluster is the honest change), "
    "`billing.type`, `billing.duration_days`.\n"
    "- **Apply** waits until the cluster is RUNNING (`wait_for_running`, `timeouts`), logging each "
    "change of status, phase and running node count (`TF_LOG_PROVIDER=info`). A cluster that fails "
    "while it is waited for (a node failed, e.g. a GPU fault: phase `Degraded`; a rolled-back create or "
    "scale-up) ends the wait at once with an error naming the failed nodes and the API's reason; a "
    "create that fails so is saved tainted and the next apply replaces it. A cluster found FAILED on "
    "refresh (every node lost) is planned for replacement with a warning.\n"
    "- **Day 2**: once RUNNING, a failed or degraded node does not fail the cluster: it stays RUNNING "
    "while the node is repaired in place (`node_repair = \"auto\"`, phase `Repairing`) or left as it "
    "is (`\"manual\"`, phase `Degraded`, until a node action through the API). Neither plans a "
    "change (a failed node is named in a plan warning), and a create whose cluster came up and then "
    "lost a node it keeps failed succeeds with that warning; refresh records the nodes' `health` and a "
    "repaired node's new `instance_id` without drift.\n"
    "- **Interrupted or timed out**: when Terraform is interrupted (Ctrl-C) or a timeout passes while "
    "the cluster is healthy and still converging, it is saved as it is with a warning, never tainted. "
    "The next plan shows an in-place update (`status` known after apply) and its apply resumes the "
    "wait; if the cluster converged meanwhile the plan is empty. Same for updates.\n"
    "- **Drift**: refresh reads the cluster; changes made outside Terraform (scale, labels, volumes, "
    "keys) show in the plan, and a deleted cluster is planned for creation.\n"
    "- **Reserved terms** are charged in full when the cluster first runs and never refunded: the plan "
    "shows `reservation.upfront_cost_usd`, and a plan that destroys or replaces a reserved cluster "
    "before its term ends warns with the days left and the prepaid amount forfeited. `billing = { type = "
    "\"reserved\" }` is an implicit reservation of this one cluster; to keep a term across replacements "
    "and hand nodes from one cluster to the next, book a `gpucloud_reservation` and set `reservation_id`.\n"
    "- **`-replace` and `deletion_protection`**: Terraform does not tell providers about `terraform "
    "apply -replace=...`, so the plan cannot refuse replacing a protected cluster; the apply fails at "
    "the delete, after resources depending on the cluster were already destroyed. Set "
    "`deletion_protection = false` and apply before using `-replace` on a cluster.",
    attributes={
        # Required
        "name": StringAttribute(
            required=True,
            description="Cluster name, the prefix of its hostnames: 1-40 lowercase letters, digits or "
            "hyphens, starting with a letter. Changes in place.",
            validators=api("name"),
        ),
        # Required unless host_pool_id is set (cluster_host_pool.check_required_without_pool)
        "region": StringAttribute(
            optional=True,
            computed=True,
            description="Region, e.g. `us-east-1`. Required unless `host_pool_id` is set: on a host pool it "
            "defaults to the pool's region (known at plan once the pool is). Changing it replaces the "
            "cluster; leaving it out on a pool keeps the value the cluster has.",
            validators=api("region", pattern="must be a region name such as us-east-1"),
            plan_modifiers=[KEEP_ON_SAME_POOL, requires_replace()],
        ),
        "instance_type": StringAttribute(
            optional=True,
            computed=True,
            description="Node shape, e.g. `8xH100` (see the `gpucloud_instance_types` data source). "
            "Required unless `host_pool_id` is set: on a host pool it defaults to the catalog's type whose "
            "GPUs (count and model) the pool's first ready server has, known after apply (the API refuses "
            "a pool with no such server: `no_fitting_instance_type`). Changing it replaces the cluster; "
            "leaving it out on a pool keeps the value the cluster has.",
            validators=api("instance_type", pattern="must be an instance type name such as 8xH100"),
            plan_modifiers=[KEEP_ON_SAME_POOL, requires_replace()],
        ),
        # Optional
        "node_count": Int64Attribute(
            optional=True,
            computed=True,
            description="Number of nodes (default 1). Scales in place (the plan checks the region has the "
            "capacity and the project's quotas the room; a lower count is warned about, naming the nodes "
            "that go and the jobs running on them: see `scale_down_grace_minutes`). More than one node "
            "needs a fabric-capable 8-GPU "
            "instance type. Conflicts with `autoscaling`, under which the engine sets it: then it is "
            "computed and its moves are not drift.",
            validators=api("node_count"),
            plan_modifiers=[NodeCountFollowsAutoscaling()],
        ),
        "autoscaling": SingleNestedAttribute(
            optional=True,
            attributes=AUTOSCALING_ATTRIBUTES,
            description="Slurm clusters: the engine sets `node_count` between `min_nodes` and `max_nodes` "
            "from the job queue. It adds nodes while jobs wait for lack of nodes (up to `max_nodes` and the "
            "fabric's free capacity) and releases the nodes that have had no job for "
            "`scale_down_idle_minutes` (those very nodes, never one running a job, never below "
            "`min_nodes`); each decision is an audit event (`cluster.autoscaled`) with its reason. The "
            "cluster starts with `min_nodes`. Changes in place; conflicts with `node_count`.",
        ),
        "slurm_config": SingleNestedAttribute(
            optional=True,
            attributes=SLURM_CONFIG_ATTRIBUTES,
            description=SLURM_CONFIG_DESCRIPTION,
        ),
        "orchestrator": StringAttribute(
            optional=True,
            computed=True,
            description="`slurm`, `kubernetes` or `none`. Default: `none` for one node, `slurm` for more "
            "and on a host pool (`host_pool_id`). Changing it replaces the cluster.",
            validators=api("orchestrator"),
            plan_modifiers=[use_state_for_unknown(), requires_replace()],
        ),
        "interconnect": StringAttribute(
            optional=True,
            computed=True,
            description="`infiniband`, `efa` or `ethernet`. Default: the instance type's fabric (`ethernet` "
            "on a host pool). Changing it replaces the cluster.",
            validators=api("interconnect"),
            plan_modifiers=[use_state_for_unknown(), requires_replace()],
        ),
        "container": StringAttribute(
            optional=True,
            description="A single-node cluster's container, which logins run inside: `base` or `pytorch` "
            "(the catalog's aliases for images the operator chose) or an OCI image reference. Imported like "
            "`container_images` (it shows in `images` as `container`). Changes in place.",
            validators=api("container"),
        ),
        **image_attributes(),
        "ssh_key_ids": SetAttribute(
            element_type=STRING,
            optional=True,
            description="Ids of `gpucloud_ssh_key`s allowed to log in. Changes in place.",
            validators=api("ssh_key_ids", items="must be an id such as ssh_0abc"),
        ),
        "shared_volume_ids": SetAttribute(
            element_type=STRING,
            optional=True,
            description="Ids of `gpucloud_shared_volume`s (same region) mounted on every node. Volumes are "
            "attached and detached in place.",
            validators=api("volume_ids", items="must be an id such as vol_0abc"),
        ),
        "security_group_ids": SetAttribute(
            element_type=STRING,
            optional=True,
            description="Ids of `gpucloud_security_group`s whose rules the nodes enforce (traffic between "
            "the cluster's own nodes is always allowed); unset or empty: the project's default group (SSH "
            "in from anywhere, all out). Changes in place: the nodes' firewalls are reconfigured.",
            validators=api("security_group_ids", items="must be an id such as sgr_0abc"),
        ),
        "billing": SingleNestedAttribute(
            optional=True,
            computed=True,
            default=dict(DEFAULT_BILLING),
            attributes=BILLING_ATTRIBUTES,
            description="How the cluster is billed. `type` and `duration_days` replace the cluster when "
            "changed; `on_expiry` changes in place. Default: on-demand. A reserved term here belongs to "
            "this cluster alone and is forfeited when it is replaced: for capacity that outlives "
            "clusters use a `gpucloud_reservation` and `reservation_id` instead.",
        ),
        "reservation_id": StringAttribute(
            optional=True,
            description="Id of a `gpucloud_reservation` to draw the nodes from: same `region` and "
            "`instance_type`, `node_count` within its free nodes, inside its term. Its nodes are prepaid "
            "(not metered on-demand); destroying or replacing the cluster gives them back to the "
            "reservation for the next cluster. Leave `billing` out. Changing it replaces the cluster.",
            validators=api("reservation_id", pattern="must be an id such as rsv_0abc"),
            plan_modifiers=[requires_replace()],
        ),
        "host_pool_id": StringAttribute(
            optional=True,
            description="Id of a `gpucloud_host_pool` whose servers become the nodes ([own hosts]"
            "(../guides/own-hosts.md)): one ready host no other cluster holds per node, with the GPUs of "
            "`instance_type` (count and model), the first one the login node running slurmctld. `region` "
            "and `instance_type` may be left out: they default to the pool's region and to the catalog's "
            "type of its servers' GPUs (a `region` set must be the pool's); `orchestrator` is `slurm` "
            "(its default here, also for one node). Not with `reservation_id`, `capacity_type` spot, "
            "reserved `billing`, `autoscaling`, `reserved_ip_id`, `container` or `container_images` (the "
            "plan says which to remove); `shared_volume_ids` need the pool's `shared_storage_path`. Your "
            "own servers carry no compute charge: `estimated_hourly_cost_usd` is 0. A scale takes or gives "
            "back hosts of the pool; a dead server is restarted in place, never replaced. Changing it "
            "replaces the cluster.",
            validators=api("host_pool_id", pattern="must be an id such as hpl_0abc"),
            plan_modifiers=[requires_replace()],
        ),
        "labels": MapAttribute(
            element_type=STRING,
            optional=True,
            description="Free-form key/value tags (up to 64). Changes in place.",
            validators=api(
                "labels",
                keys="key must be 1-63 lowercase letters, digits, '.', '_', '/' or '-', starting and "
                "ending with a letter or digit",
                values="must have no control characters",
            ),
        ),
        "deletion_protection": BoolAttribute(
            optional=True,
            computed=True,
            default=False,
            description="When true the API refuses to delete the cluster (destroy fails until it is "
            "set to false and applied).",
        ),
        "node_repair": StringAttribute(
            optional=True,
            computed=True,
            default="auto",
            description="`auto`: a node that fails or degrades (GPU faults, ECC errors, heat, NVLink / "
            "InfiniBand link down) while the cluster runs is drained and replaced in place (same hostname "
            "and fabric position where capacity allows, new `instance_id`) while the other nodes keep "
            "running; the cluster stays RUNNING (phase `Repairing`, then `Ready`). `manual`: the node "
            "stays failed or degraded (phase `Degraded`) until a node action. A repair is not drift. "
            "Changes in place.",
            validators=api("node_repair"),
        ),
        "capacity_type": StringAttribute(
            optional=True,
            computed=True,
            default="on_demand",
            description="`on_demand`; `spot`: nodes from the region's spot pool at the spot price "
            "(`GET /v1/instance-types`), reclaimed by the market with a two-minute notice and re-acquired "
            "when spot returns (a create that finds spot short fails); `spot_with_fallback`: spot, with "
            "on-demand nodes standing in while spot is short (at create and after a preemption). Each node "
            "is billed at the rate of the capacity it ran on (`nodes[*].capacity_type`); preemptions, "
            "stand-ins and re-acquired nodes change `nodes` only, never planned as drift. Spot cannot be "
            "reserved. Changing it replaces the cluster.",
            validators=api("capacity_type"),
            # State written before capacity_type existed holds null: that cluster is on-demand, and
            # planning the default for it is no reason to replace it.
            plan_modifiers=[requires_replace_if(
                lambda m: m.state_value is not None or m.plan_value != "on_demand",
                "Changing this value forces a new resource to be created.",
            )],
        ),
        "max_hourly_cost_usd": NumberAttribute(
            optional=True,
            description="Refuses a create, or a change that raises the hourly cost, above this many USD "
            "per hour, checked at plan and by the API against the most the cluster can cost (spot at the "
            "spot rate; `spot_with_fallback` at on-demand, its stand-ins' rate). A cost already above a "
            "lowered limit is a warning: changes that do not raise it (labels, a scale-down, destroy) go "
            "through.",
            validators=api("max_hourly_cost_usd"),
            semantic=NUMBER_VALUE,
        ),
        "ttl": StringAttribute(
            optional=True,
            description="How long the cluster lives from its creation: a duration such as `\"8h\"`, "
            "`\"90m\"` or `\"1d12h\"` (1 minute to 365 days). The cluster is deleted at `created_at` + "
            "`ttl` (shown in the plan as `expires_at`); after that the next plan creates it again, like any "
            "deleted cluster. With `deletion_protection = true` an expired cluster keeps running (and "
            "billing) with a warning instead. Changes in place; conflicts with `expires_at`.",
            validators=api("ttl"),
            semantic=TTL,
        ),
        "expires_at": StringAttribute(
            optional=True,
            computed=True,
            description="When the cluster is deleted (RFC 3339, e.g. `\"2026-12-01T18:00:00Z\"`): set it "
            "instead of `ttl`, or read it (computed from `ttl`, null without either). Changes in place.",
            validators=api("expires_at"),
            semantic=RFC3339,
        ),
        "idle_teardown_minutes": Int64Attribute(
            optional=True,
            description="Slurm clusters: deleted once they have had no running or pending job for this "
            "many minutes (1 to 43200). Changes in place.",
            validators=api("idle_teardown_minutes"),
        ),
        "scale_down_grace_minutes": Int64Attribute(
            optional=True,
            computed=True,
            default=DEFAULT_SCALE_DOWN_GRACE_MINUTES,
            description="How long a scale-down (a lower `node_count`, or the autoscaler) waits for the jobs "
            "running on a node it removes: idle nodes go first, then the newest; a busy one is drained (no "
            "new job lands on it) and its jobs get this many minutes to end, then they are requeued (never "
            "killed) and the node is released. `0` requeues at once (0 to 10080). The plan names the "
            "nodes a lower `node_count` removes and the jobs running on them. Changes in place.",
            validators=api("scale_down_grace_minutes"),
        ),
        "reserved_ip_id": StringAttribute(
            optional=True,
            description="A `gpucloud_reserved_ip` of the cluster's region for the login node to answer on "
            "(`login` follows it). Unset, the cluster has a floating address from the region's pool. "
            "Changes in place: setting it moves the address here, from another cluster of the project if "
            "one holds it (that cluster gets a floating address), so moving an IP between two clusters "
            "in one apply works in either order; unsetting it gives this cluster a fresh floating address "
            "and the IP stays reserved.",
            validators=api("reserved_ip_id"),
        ),
        "wait_for_running": BoolAttribute(
            optional=True,
            computed=True,
            default=True,
            description="Wait until the cluster is RUNNING after create, scale and volume changes. With "
            "false, apply returns as soon as the API accepted the change.",
        ),
        # Computed
        **computed_attributes(),
    },
    blocks={"timeouts": timeouts_block(create=True, update=True, delete=True, defaults=DEFAULT_TIMEOUTS)},
)

# Values the user configures, sent to the API (Terraform name -> API name).
SPEC_FIELDS = {
    "name": "name",
    "region": "region",
    "instance_type": "instance_type",
    "node_count": "node_count",
    "orchestrator": "orchestrator",
    "interconnect": "interconnect",
    "container": "container",
    "ssh_key_ids": "ssh_key_ids",
    "shared_volume_ids": "volume_ids",
    "security_group_ids": "security_group_ids",
    "billing": "billing",
    "reservation_id": "reservation_id",
    "host_pool_id": "host_pool_id",
    "labels": "labels",
    "deletion_protection": "deletion_protection",
    "node_repair": "node_repair",
    "capacity_type": "capacity_type",
    "max_hourly_cost_usd": "max_hourly_cost_usd",
    "ttl": "ttl",
    "expires_at": "expires_at",
    "idle_teardown_minutes": "idle_teardown_minutes",
    "scale_down_grace_minutes": "scale_down_grace_minutes",
    "autoscaling": "autoscaling",
    "reserved_ip_id": "reserved_ip_id",
    "slurm_config": "slurm_config",
    "container_images": "container_images",
    "registry_credentials": "registry_credentials",
}


SORTED_SETS = ("ssh_key_ids", "shared_volume_ids", "security_group_ids")


def spec_from_plan(plan: dict[str, Any]) -> dict[str, Any]:
    """The API create body from a planned state (nulls left to the API's defaults)."""
    spec: dict[str, Any] = {}
    for tf_name, api_name in SPEC_FIELDS.items():
        value = plan.get(tf_name)
        if value is None or is_unknown(value):
            continue  # the API's default (region and instance_type of a host pool, its orchestrator)
        if tf_name == "billing":
            value = {k: v for k, v in value.items() if v is not None}
        if tf_name == "node_count" and plan.get("autoscaling") is not None:
            continue  # the engine's: the API starts the cluster at min_nodes
        if tf_name == "expires_at" and plan.get("ttl") is not None:
            continue  # computed from ttl by the API
        if tf_name == "slurm_config":
            spec[api_name] = slurm_config_spec(value)
            continue
        if tf_name == "registry_credentials":
            spec[api_name] = credentials_spec(value)
            continue
        spec[api_name] = sorted(value) if tf_name in SORTED_SETS else value
    return spec


# -- API object -> state -------------------------------------------------------------------------------


def _number(value: Any) -> int | Decimal | None:
    """An API number as a cty number (never float); None stays None."""
    return None if value is None else number(value)


def _empty_as(prior: Any, value: Any) -> Any:
    """An empty collection from the API stays null when the state had null (unset in configuration)."""
    return None if not value and prior is None else value


def node_state(node: dict[str, Any], *, multi_node: bool) -> dict[str, Any]:
    network = node.get("network") or {}
    hcas = [h["device"] for h in network.get("hcas") or [] if h.get("role", "compute") == "compute"]
    efa = [e["device"] for e in network.get("efa_interfaces") or []]
    fabric = network.get("fabric")
    topology = (
        f"{fabric}/su{int(network['scalable_unit']):02d}/pos{int(network['position']):02d}"
        if fabric and network.get("scalable_unit") is not None and network.get("position") is not None
        else None
    )
    return {
        "name": node.get("name"),
        "instance_id": node.get("instance_id") or node.get("id"),
        "role": node.get("role") or ("worker" if multi_node else "standalone"),
        "status": node.get("status"),
        "health": node.get("health"),
        "capacity_type": node.get("capacity_type") or "on_demand",
        "private_ip": node.get("private_ip"),
        "public_ip": node.get("public_ip"),
        "host_key": node.get("host_key"),
        "fabric": fabric,
        "partition_key": network.get("partition_key"),
        "hcas": hcas,
        "topology_path": topology,
        "leaves": list(network.get("leaves") or []),
        "efa_interfaces": efa,
    }


def login_state(login: dict[str, Any] | None) -> dict[str, Any] | None:
    if not login:
        return None
    return {
        "host": login.get("public_ip") or login.get("host"),
        "port": int(login.get("port") or 22),
        "user": login.get("user"),
        "ssh_command": login.get("ssh_command"),
        "host_key": login.get("host_key"),
    }


def slurm_state(slurm: dict[str, Any] | None) -> dict[str, Any] | None:
    if not slurm:
        return None
    partitions = slurm.get("partitions") or ([slurm["partition"]] if slurm.get("partition") else [])
    return {"controller": slurm.get("controller"), "partitions": list(partitions)}


def kubernetes_state(kube: dict[str, Any] | None) -> dict[str, Any] | None:
    if not kube:
        return None
    return {"api_endpoint": kube.get("api_endpoint"), "ca_certificate": kube.get("ca_certificate")}


def reservation_state(body: dict[str, Any], estimated_upfront: Any) -> dict[str, Any] | None:
    """The reserved term of a reserved cluster: as billed once it first ran (the API's `reservation`),
    before that only the estimated up-front charge."""
    if (body.get("billing") or {}).get("type") != "reserved":
        return None
    term = body.get("reservation")
    if isinstance(term, dict) and term.get("term_start"):
        return {
            "starts_at": rfc3339_utc(term["term_start"]),
            "ends_at": rfc3339_utc(term["term_end"]) if term.get("term_end") else None,
            "upfront_cost_usd": _number(term.get("upfront_usd")),
        }
    return {"starts_at": None, "ends_at": None, "upfront_cost_usd": estimated_upfront}


def computed_state(body: dict[str, Any], reservation: dict[str, Any] | None) -> dict[str, Any]:
    """The computed attributes from the API's cluster object."""
    multi_node = int(body.get("node_count") or 1) > 1
    return {
        "id": body["id"],
        "status": body.get("status"),
        "phase": body.get("phase"),
        "num_gpus": _number(body.get("num_gpus")),
        "gpu_type": body.get("gpu_type"),
        "created_at": rfc3339_utc(body["created_at"]) if body.get("created_at") else None,
        "nodes": [node_state(n, multi_node=multi_node) for n in body.get("nodes") or []],
        "login": login_state(body.get("login")),
        "slurm": slurm_state(body.get("slurm")),
        "kubernetes": kubernetes_state(body.get("kubernetes")),
        "nccl_env": dict(body.get("nccl_env") or {}),
        "estimated_hourly_cost_usd": _number(body.get("estimated_hourly_cost_usd")),
        "reservation": reservation,
    }


def _autoscaling_state(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        return None
    return {k: value.get(k) for k in ("min_nodes", "max_nodes", "scale_down_idle_minutes")}


def cluster_state(
    body: dict[str, Any], prior: dict[str, Any] | None, reservation: dict[str, Any] | None
) -> dict[str, Any]:
    """Full resource state from the API object; `prior` (state or plan) keeps provider-only settings and
    the user's spelling of equal values."""
    prior = prior or {}
    billing = body.get("billing") or {}
    return {
        "name": body.get("name"),
        "region": body.get("region"),
        "instance_type": body.get("instance_type"),
        "node_count": body.get("node_count"),
        "orchestrator": body.get("orchestrator"),
        "interconnect": body.get("interconnect"),
        "container": body.get("container"),
        "ssh_key_ids": _empty_as(prior.get("ssh_key_ids"), sorted(body.get("ssh_key_ids") or [])),
        "shared_volume_ids": _empty_as(prior.get("shared_volume_ids"), sorted(body.get("volume_ids") or [])),
        "security_group_ids": _empty_as(
            prior.get("security_group_ids"), sorted(body.get("security_group_ids") or [])
        ),
        "billing": {
            "type": billing.get("type") or "on_demand",
            "duration_days": billing.get("duration_days"),
            "on_expiry": billing.get("on_expiry") or "decommission",
        },
        "reservation_id": body.get("reservation_id"),
        "host_pool_id": body.get("host_pool_id"),
        "labels": _empty_as(prior.get("labels"), dict(body.get("labels") or {})),
        "deletion_protection": bool(body.get("deletion_protection")),
        "node_repair": body.get("node_repair") or "auto",
        "capacity_type": body.get("capacity_type") or "on_demand",
        "max_hourly_cost_usd": _number(body.get("max_hourly_cost_usd")),
        "ttl": body.get("ttl"),
        "expires_at": rfc3339_utc(body["expires_at"]) if body.get("expires_at") else None,
        "idle_teardown_minutes": body.get("idle_teardown_minutes"),
        "scale_down_grace_minutes": body.get("scale_down_grace_minutes", DEFAULT_SCALE_DOWN_GRACE_MINUTES),
        "autoscaling": _autoscaling_state(body.get("autoscaling")),
        "reserved_ip_id": body.get("reserved_ip_id"),
        "slurm_config": slurm_config_state(body.get("slurm_config"), prior.get("slurm_config")),
        "wait_for_running": prior.get("wait_for_running") if prior.get("wait_for_running") is not None
        else True,
        "timeouts": prior.get("timeouts"),
        **computed_state(body, reservation),
        **images_state(body, prior),
    }
