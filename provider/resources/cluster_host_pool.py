"""Plan-time checks of a `gpucloud_gpu_cluster` on a host pool (`host_pool_id`): the project's own servers.

The API refuses at apply what makes no sense for servers of one's own (`unsupported_on_host_pool`,
backend/services/pool_clusters.py): what sells or places datacenter capacity (a reservation, spot, a reserved
term, autoscaling, a reserved IP), containers, and any orchestrator but Slurm. Those are configuration
errors on the attribute to remove. What depends on the pool itself (its region, its shared storage, its
free hosts) is read from `GET /v1/host-pools/{id}` when the plan creates the cluster or takes
more hosts. `region` and `instance_type` may be left out on a pool (the API fills in the pool's region and
the type its servers are): the create's plan shows the pool's region, the type is known after apply.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from provider.client import ApiError, GpuCloudClient, NotFound
from provider.cty import is_unknown
from provider.framework import Context, root
from provider.resources.cluster_checks import known
from provider.resources.host_pool import host_pools

FIX = "remove it (or remove host_pool_id, to run on the cloud's own nodes)"
# Attribute -> (the value it may have on a pool, why nothing else makes sense there): the API's rules.
NOT_ON_HOST_POOL: dict[str, tuple[Any, str]] = {
    "reservation_id": (None, "a capacity reservation holds the cloud's nodes, not your servers"),
    "capacity_type": ("on_demand", "spot capacity is the cloud's, your servers are always yours"),
    "autoscaling": (None, "the engine cannot make servers of your own; set node_count instead"),
    "reserved_ip_id": (None, "the login node answers on its own server's address"),
    "container": (None, "containers are not offered on host pools yet"),
}


# What the API makes of `region` and `instance_type` left out on a pool (backend services.pool_clusters).
POOL_DEFAULTS = {
    "region": "the pool's region",
    "instance_type": "the catalog's type whose GPUs the pool's first ready server has",
}


def on_host_pool(values: Mapping[str, Any]) -> bool:
    """Whether a known `host_pool_id` puts the cluster on the project's own servers."""
    return known(values.get("host_pool_id"))


def _refuse(ctx: Context, attr: str, why: str, fix: str = FIX) -> None:
    ctx.error("Not Offered On A Host Pool", f"{attr} cannot be set on a cluster on a host pool "
              f"(host_pool_id): {why}. {fix[0].upper()}{fix[1:]}.", root(attr))


def _check_orchestrator(ctx: Context, orchestrator: Any) -> None:
    if known(orchestrator) and orchestrator != "slurm":
        ctx.error("Not Offered On A Host Pool", f"Clusters on a host pool (host_pool_id) run Slurm, not "
                  f"{orchestrator}: set orchestrator = \"slurm\", or leave it out (the default on a host "
                  "pool).", root("orchestrator"))


def check_required_without_pool(ctx: Context, config: Mapping[str, Any]) -> None:
    """`region` and `instance_type` are required unless `host_pool_id` is set (the API's 422 `required`);
    nothing is judged while `host_pool_id` is unknown (also run by `terraform validate`)."""
    if config.get("host_pool_id") is not None:
        return
    for attr, default in POOL_DEFAULTS.items():
        if config.get(attr) is None:
            ctx.error("Missing Required Argument", f"{attr} is required unless host_pool_id is set (on a "
                      f"host pool it defaults to {default}).", root(attr))


def check_host_pool_config(ctx: Context, config: Mapping[str, Any]) -> None:
    """What a cluster on a host pool may not have, each on its attribute (also run by `terraform
    validate`); nothing is judged while `host_pool_id` is unknown."""
    if not on_host_pool(config):
        return
    for attr, (allowed, why) in NOT_ON_HOST_POOL.items():
        value = config.get(attr)
        if known(value) and value != allowed:
            _refuse(ctx, attr, why)
    billing = config.get("billing")
    kind = billing.get("type") if known(billing) else None
    if known(kind) and kind != "on_demand":
        _refuse(ctx, "billing", "your own servers carry no compute charge to reserve", "remove billing")
    images = config.get("container_images")
    if known(images) and images:
        _refuse(ctx, "container_images", "containers are not offered on host pools yet")
    _check_orchestrator(ctx, config.get("orchestrator"))


def check_host_pool(
    ctx: Context, client: GpuCloudClient, plan: dict[str, Any], state: Mapping[str, Any] | None,
    config: Mapping[str, Any] | None = None,
) -> None:
    """The pool against the plan, when it creates the cluster, takes more hosts or adds volumes: the
    pool's region, shared storage for volumes, enough free ready hosts. A `region` the
    configuration leaves out is planned as the pool's, as the API makes it."""
    ref = plan.get("host_pool_id")
    if not known(ref):
        return
    prior = state if state is not None and state.get("host_pool_id") == ref else None
    nodes = plan.get("node_count")
    needed = int(nodes) - int((prior or {}).get("node_count") or 0) if known(nodes) else 0
    volumes = plan.get("shared_volume_ids")
    new_volumes = known(volumes) and bool(set(volumes) - set((prior or {}).get("shared_volume_ids") or []))
    if prior is not None and needed <= 0 and not new_volumes:
        return  # takes nothing more from the pool
    try:
        pool: dict[str, Any] = host_pools(client).get(str(ref)).body
    except NotFound:
        ctx.reference_problem("Unknown Host Pool", f"No host pool with id \"{ref}\" in this project.",
                              root("host_pool_id"))
        return
    except ApiError:
        return  # checked again by the API at apply
    if is_unknown(plan.get("region")) and config is not None and config.get("region") is None:
        plan["region"] = pool.get("region")
    _check_pool_region(ctx, pool, plan.get("region"))
    _check_pool_reach(ctx, pool, new_volumes)
    if needed > 0:
        _check_free_hosts(ctx, pool, needed, grown=prior is not None)


def _pool_name(pool: Mapping[str, Any]) -> str:
    return f"{pool.get('id')} ({pool.get('name')})"


def _check_pool_region(ctx: Context, pool: Mapping[str, Any], region: Any) -> None:
    if known(region) and region != pool.get("region"):
        ctx.error("Cluster Not In Its Host Pool's Region",
                  f"Host pool {_pool_name(pool)} is in region {pool.get('region')}; set region = "
                  f"\"{pool.get('region')}\".", root("region"))


def _check_pool_reach(ctx: Context, pool: Mapping[str, Any], new_volumes: bool) -> None:
    """What the pool's own settings refuse: volumes without shared storage (a warning: it is the pool's,
    and must not block `terraform destroy`)."""
    if new_volumes and not pool.get("shared_storage_path"):
        ctx.reference_problem(
            "Host Pool Without Shared Storage",
            f"Host pool {_pool_name(pool)} declares no shared_storage_path, so its servers share no file "
            "system to keep volumes on: set shared_storage_path on the pool (a path mounted on every host), "
            "or remove shared_volume_ids.",
            root("shared_volume_ids"),
        )


def _check_free_hosts(ctx: Context, pool: Mapping[str, Any], needed: int, *, grown: bool) -> None:
    """An error when even the hosts still being checked would not make enough free ones; a warning when
    they might (a pool created in this apply: its checks take seconds after it is registered)."""
    free = int(pool.get("free_hosts") or 0)
    if needed <= free:
        return
    hosts = pool.get("hosts") or []
    pending = sum(1 for h in hosts if h.get("status") == "pending")
    what = f"{needed} more hosts" if grown else f"{needed} hosts"
    detail = (f"The cluster needs {what} of host pool {_pool_name(pool)}, which has {free} free (ready and "
              f"held by no cluster; {pool.get('ready_hosts', 0)} of its {len(hosts)} hosts are ready")
    if needed <= free + pending:
        ctx.warning("Host Pool Hosts Still Being Checked",
                    f"{detail}, {pending} still being checked). The apply fails unless they are ready by "
                    "then: `gpucloud host-pool probe <pool> --wait` waits for them.", root("node_count"))
        return
    ctx.error("Not Enough Free Hosts",
              f"{detail}). Add hosts to the pool, free some (host_status shows which cluster holds each), "
              "or lower node_count.", root("node_count"))
