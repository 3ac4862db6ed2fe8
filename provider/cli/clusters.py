"""`gpucloud cluster ...`: create, list, info, scale, edit, attach, detach, delete (`destroy`: a hidden
alias kept for scripts)."""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

import click

from provider.cli.app import (
    App,
    complete_cluster,
    complete_ssh_key,
    complete_volume,
    confirm,
    find_cluster,
    find_ssh_key,
    find_volume,
    json_option,
    parse_labels,
    pass_app,
    with_example,
    yes_option,
)
from provider.cli.budgets import scope, spent_percent, usd
from provider.cli.config import ConfigError, default_ssh_key_ids
from provider.cli.host_pools import complete_host_pool, find_host_pool
from provider.cli.images import PASSWORD_ENV, image, image_lines, list_images, parse_images, parse_logins
from provider.cli.keys import register_key_file
from provider.cli.output import emit, note, print_fields, print_table, table_view
from provider.cli.reservations import find_reservation
from provider.cli.reserved_ips import find_reserved_ip
from provider.cli.security_groups import find_security_group
from provider.cli.wait import is_gone, is_running, watch_cluster
from provider.client import ApiError, GpuCloudClient, new_idempotency_key


@click.group()
def cluster() -> None:
    """Create, inspect, scale and delete GPU clusters.

    \b
    Example:
      gpucloud cluster create 8xH100 -n 2 -i ~/.ssh/id_ed25519.pub
    """


def _running_nodes(c: dict[str, Any]) -> str:
    running = sum(1 for n in c.get("nodes") or [] if n.get("status") == "RUNNING")
    return f"{running}/{c['node_count']}"


CLUSTER_COLUMNS = [
    ("ID", lambda c: c["id"]),
    ("NAME", lambda c: c["name"]),
    ("STATUS", lambda c: c["status"]),
    ("TYPE", lambda c: c["instance_type"]),
    ("NODES", _running_nodes),
    ("GPUS", lambda c: c.get("num_gpus")),
    ("USD/HOUR", lambda c: c.get("estimated_hourly_cost_usd")),
    ("REGION", lambda c: c["region"]),
]
NODE_COLUMNS = [
    ("NODE", lambda n: n["name"]),
    ("STATUS", lambda n: n["status"]),
    ("ROLE", lambda n: n.get("role")),
    ("PRIVATE IP", lambda n: n.get("private_ip")),
    ("INSTANCE", lambda n: n.get("instance_id")),
]


CAPACITY_LABELS = {"spot": "spot", "spot_with_fallback": "spot with fallback", "on_demand": "on demand"}


def capacity_label(c: dict[str, Any]) -> str:
    """How an unreserved cluster is billed: what it runs on, prepaid when it draws a reservation, nothing on
    the project's own servers."""
    if c.get("reservation_id"):
        return f"reservation {c['reservation_id']} (prepaid)"
    if c.get("host_pool_id"):
        return "your own servers (no compute charge)"
    kind = c.get("capacity_type") or "on_demand"
    return CAPACITY_LABELS.get(kind, kind)


def lifetime(c: Mapping[str, Any]) -> str | None:
    """When the engine deletes the cluster: `expires_at`, with the ttl it came from."""
    if not c.get("expires_at"):
        return None
    return f"{c['expires_at']} (ttl {c['ttl']})" if c.get("ttl") else str(c["expires_at"])


def scaling(c: Mapping[str, Any]) -> str:
    found = c.get("autoscaling")
    if not found:
        return "fixed"
    idle = found.get("scale_down_idle_minutes")
    return f"autoscaling {found['min_nodes']}-{found['max_nodes']} nodes (idle nodes go after {idle} min)"


def budget_line(b: Mapping[str, Any]) -> str:
    spent = f"{usd(b.get('spent_usd'))} of {usd(b['amount_usd'])} USD ({spent_percent(b)})"
    return f"{b['name']} ({scope(b)}): {spent} in {b.get('period')}, at 100 %: {b.get('action')}"


def budgets_of(c: Mapping[str, Any], budgets: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The budgets the cluster's spend counts against: the project's, and those whose label it has."""
    labels = c.get("labels") or {}
    return [b for b in budgets if not b.get("label_filter")
            or labels.get(b["label_filter"]["key"]) == b["label_filter"]["value"]]


def show_cluster(c: dict[str, Any], budgets: Sequence[Mapping[str, Any]] | None = None) -> None:
    """The cluster; with `budgets` (the project's), also those that apply to it and their spend."""
    billing = c.get("billing") or {}
    reserved = billing.get("type") == "reserved"
    term = f"reserved {billing.get('duration_days')} days" if reserved else capacity_label(c)
    fields: list[tuple[str, Any]] = [
        ("ID", c["id"]),
        ("Name", c["name"]),
        ("Status", c["status"] + (f" ({c['status_reason']})" if c.get("status_reason") else "")),
        ("Phase", c.get("phase")),
        ("Type", f"{c['node_count']} x {c['instance_type']} ({c.get('num_gpus')} x {c.get('gpu_type')})"),
        ("Region", c["region"]),
        ("Orchestrator", c.get("orchestrator")),
        ("Interconnect", c.get("interconnect")),
        ("Container", c.get("container")),
        *(("Image", line) for line in image_lines(c)),
        ("Billing", term),
        ("USD/hour", c.get("estimated_hourly_cost_usd")),
        ("Max USD/hour", usd(c.get("max_hourly_cost_usd"))),
        ("Expires", lifetime(c)),
        ("Scaling", scaling(c)),
        ("SSH keys", c.get("ssh_key_ids")),
        ("Volumes", c.get("volume_ids")),
        ("Security groups", c.get("security_group_ids") or "the project's default group"),
        ("Reserved IP", c.get("reserved_ip_id")),
        ("Reservation", c.get("reservation_id")),
        ("Host pool", c.get("host_pool_id")),
        ("Labels", [f"{k}={v}" for k, v in sorted((c.get("labels") or {}).items())]),
        ("Protected", c.get("deletion_protection")),
        ("Node repair", c.get("node_repair")),
    ]
    if budgets is not None:
        applying = budgets_of(c, budgets)
        fields.extend(("Budget", budget_line(b)) for b in applying)
        if not applying:
            fields.append(("Budget", "none applies"))
    if c.get("images"):
        fields.append(("Image storage", f"{int(c.get('image_storage_bytes') or 0)} bytes"))
    if c.get("registry_credentials"):
        fields.append(("Registry logins", [f"{u.get('username')}@{h}"
                                           for h, u in sorted(c["registry_credentials"].items())]))
    if c.get("login"):
        # `gpucloud ssh` verifies the host key the API publishes; a bare ssh line would not.
        fields.append(("SSH", f"gpucloud ssh {c['name']}"))
    print_fields(fields)
    if c.get("nodes"):
        print()
        print_table(NODE_COLUMNS, c["nodes"], empty="")


def _default_region(client: GpuCloudClient, instance_type: str, nodes: int) -> str:
    """The first region with room for `nodes` of this type; the API judges the request itself."""
    for item in client.list_instance_types():
        if item.get("name") == instance_type:
            places = item.get("availability") or []
            for place in places:
                if int(place.get("available_nodes") or 0) >= nodes:
                    return str(place["region"])
            if places:
                return str(places[0]["region"])
    regions = client.list_regions()
    if not regions:
        raise click.UsageError("the API lists no regions; pass --region")
    return str(regions[0]["name"])


def _finish(app: App, c: dict[str, Any], as_json: bool, wait: bool, what: str) -> None:
    if wait:
        c = watch_cluster(app.client, c["id"], is_running, what=what) or c
    emit(c, as_json, show_cluster)


# The API's ttl grammar (TTL_PATTERN in `backend/domain/lifetime.py`, DAY_DURATION in the provider): checked
# here so that a typo fails before a key is registered; a test keeps the two patterns equal.
TTL_PATTERN = r"^([0-9]{1,6}[dhms])+$"
TTL_UNITS = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}
TTL_MIN_SECONDS, TTL_MAX_SECONDS = 60, 365 * 86_400


class TtlType(click.ParamType[str]):
    """A cluster lifetime such as 8h, 90m or 1d12h (1 minute to 365 days)."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        if not re.fullmatch(TTL_PATTERN, text):
            self.fail(f'{text!r} is not a duration such as "8h", "90m" or "1d12h"', param, ctx)
        seconds = sum(int(number) * TTL_UNITS[unit] for number, unit in re.findall(r"(\d+)([dhms])", text))
        if not TTL_MIN_SECONDS <= seconds <= TTL_MAX_SECONDS:
            self.fail(f"{text!r} must be between 1 minute and 365 days", param, ctx)
        return text


def money(text: str | None, option: str) -> str | None:
    """A positive USD amount as the API takes it (an exact decimal string)."""
    if text is None:
        return None
    try:
        amount = Decimal(text)
    except InvalidOperation:
        amount = Decimal(0)
    if not amount.is_finite() or amount <= 0:
        raise click.BadParameter(f"{text!r} is not a positive amount in USD such as 25.50", param_hint=option)
    return text


# What a cluster on a host pool cannot have (the API's `unsupported_on_host_pool`), by the option asking it.
NOT_ON_HOST_POOL = ("--reservation", "--reserved", "--spot", "--min-nodes/--max-nodes", "--reserved-ip",
                    "--container", "--image")


def refuse_on_host_pool(asked: Sequence[Any], orchestrator: str | None) -> None:
    """Options that make no sense on one's own servers (`asked`: the values of NOT_ON_HOST_POOL's options),
    refused before anything is sent."""
    refused = [option for option, given in zip(NOT_ON_HOST_POOL, asked, strict=True) if given]
    if refused:
        raise click.UsageError(f"--host-pool: {', '.join(refused)} cannot be used on a host pool (your own "
                               "servers: no reservation, reserved term, spot, autoscaling, reserved IP or "
                               "containers); drop them")
    if orchestrator not in (None, "slurm"):
        raise click.UsageError(f"--host-pool: clusters on a host pool run Slurm, not {orchestrator}; drop "
                               "--orchestrator")


def host_pool_spec(pool: Mapping[str, Any], region: str | None) -> dict[str, Any]:
    """The fields of a create on the servers of `pool`: its id, its region, Slurm (the API's default for one
    node is none, which a pool refuses)."""
    if region is not None and region != pool["region"]:
        raise click.UsageError(f"--host-pool: host pool {pool['name']} ({pool['id']}) is in region "
                               f"{pool['region']}, not {region}; drop --region")
    return {"host_pool_id": pool["id"], "region": pool["region"], "orchestrator": "slurm"}


def node_counts(node_count: int | None, min_nodes: int | None, max_nodes: int | None) -> dict[str, Any]:
    """`node_count`, or the `autoscaling` range the engine picks it from (the API takes one of them)."""
    if min_nodes is None and max_nodes is None:
        return {"node_count": node_count or 1}
    if min_nodes is None or max_nodes is None:
        raise click.UsageError("autoscaling needs both --min-nodes and --max-nodes")
    if node_count is not None:
        raise click.UsageError("-n and --min-nodes/--max-nodes: the autoscaler sets the node count; drop -n")
    if min_nodes > max_nodes:
        raise click.BadParameter(f"{min_nodes} is above --max-nodes {max_nodes}", param_hint="--min-nodes")
    return {"autoscaling": {"min_nodes": min_nodes, "max_nodes": max_nodes}}


def ssh_keys_to_install(
    client: GpuCloudClient, key_files: Sequence[str], key_refs: Sequence[str]
) -> list[str]:
    """The keys named (`-i`, `--ssh-key`); else those saved by `gpucloud login --ssh-key`; else all the
    project's keys. Which ones came by default is said on stderr; none at all is refused with the fix."""
    if key_files or key_refs:
        named = [ref if ref.startswith("ssh_") else find_ssh_key(client, ref)["id"] for ref in key_refs]
        return [*named, *(register_key_file(client, f) for f in key_files)]
    project = {str(k["id"]): k for k in client.list_ssh_keys()}
    try:
        saved = default_ssh_key_ids()
    except ConfigError as error:
        raise click.UsageError(str(error)) from None
    for key_id in saved:
        if key_id not in project:
            raise click.UsageError(f"the SSH key {key_id} saved by `gpucloud login` is gone: pass -i "
                                   "key.pub, or save another with `gpucloud login --ssh-key key.pub`")
    if saved:
        chosen, source = [project[k] for k in saved], "saved by `gpucloud login`"
    else:
        chosen, source = list(project.values()), "of the project"
    if not chosen:
        raise click.UsageError("no SSH key to install on the nodes: pass -i ~/.ssh/id_ed25519.pub, or "
                               "register one first with `gpucloud ssh-key add ~/.ssh/id_ed25519.pub`")
    names = ", ".join(f"{k['name']} ({k['id']})" for k in chosen)
    note(f"Installing the SSH keys {source}: {names} (choose with -i or --ssh-key)")
    return [str(k["id"]) for k in chosen]


@cluster.command("create")
@click.argument("instance_type", required=False)
@click.option("-n", "--nodes", "node_count", type=click.IntRange(min=1),
              help="Number of nodes (default 1).")
@click.option("--min-nodes", type=click.IntRange(min=1), metavar="N",
              help="Autoscaling (Slurm): fewest nodes, the cluster starts with this many. With --max-nodes.")
@click.option("--max-nodes", type=click.IntRange(min=1), metavar="N",
              help="Autoscaling: most nodes; the engine grows while jobs wait and releases idle nodes.")
@click.option("-i", "--identity", "key_files", multiple=True, type=click.Path(dir_okay=False),
              help="OpenSSH public key file to install (registered if new; repeatable). Without -i and "
              "--ssh-key: the keys saved by `gpucloud login --ssh-key`, else all the project's keys.")
@click.option("--ssh-key", "key_refs", multiple=True, metavar="ID_OR_NAME", shell_complete=complete_ssh_key,
              help="An already registered SSH key (repeatable).")
@click.option("--region", help="Region (default: the first with room for the nodes).")
@click.option("--container", metavar="ALIAS|REF",
              help="A single-node cluster's container, logins run inside it: base, pytorch (the catalog's "
              "aliases) or an OCI image reference.")
@click.option("--image", "images", multiple=True, metavar="NAME=REF",
              help="A container image to import (repeatable): jobs run in it with `srun "
              "--container=/images/NAME`. REF is an OCI reference such as nvcr.io/nvidia/pytorch:24.05-py3.")
@click.option("--registry-login", "logins", multiple=True, metavar="HOST=USER",
              help=f"Log in to a private registry (repeatable); the password comes from "
              f"{PASSWORD_ENV}_<HOST> or {PASSWORD_ENV}, else a hidden prompt (never from the command line).")
@click.option("--orchestrator", type=click.Choice(["slurm", "kubernetes", "none"]),
              help="Default: none for 1 node, else slurm.")
@click.option("--volume", "volumes", multiple=True, shell_complete=complete_volume,
              help="Shared volume id or name to attach (repeatable).")
@click.option("--security-group", "security_groups", multiple=True, metavar="ID_OR_NAME",
              help="A security group whose rules the nodes enforce (repeatable; default: the project's "
              "default group).")
@click.option("--reserved-ip", metavar="ID_OR_ADDRESS",
              help="A reserved IP (id, name or address) of the region for the login node.")
@click.option("--reservation", "reservation_ref", metavar="ID_OR_NAME",
              help="Draw the nodes from this capacity reservation (prepaid; same region and type).")
@click.option("--host-pool", "host_pool_ref", metavar="NAME|ID", shell_complete=complete_host_pool,
              help="Make the nodes of your own servers in this host pool: one free ready host per node with "
              "the GPUs of INSTANCE_TYPE (default: the type the pool's servers are); Slurm, the pool's "
              "region, no compute charge.")
@click.option("--reserved", "reserved_days", type=click.IntRange(min=1), metavar="DAYS",
              help="Reserve for DAYS (prepaid at a discount) instead of on-demand billing.")
@click.option("--spot", is_flag=True, help="Run on spot capacity (cheaper; nodes can be preempted).")
@click.option("--ttl", type=TtlType(), metavar="DURATION",
              help="Delete the cluster this long after its creation: 8h, 90m, 1d12h (1 minute to 365 days).")
@click.option("--max-hourly-cost", "max_hourly_cost", metavar="USD",
              help="Refuse the cluster (and later changes) costing more per hour than this.")
@click.option("--name", help="Cluster name (default: cluster-<random>).")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE", help="A label (repeatable).")
@click.option("--no-wait", is_flag=True, help="Return once the API accepted the cluster.")
@json_option
@pass_app
def create(
    app: App,
    instance_type: str | None,
    node_count: int | None,
    min_nodes: int | None,
    max_nodes: int | None,
    key_files: tuple[str, ...],
    key_refs: tuple[str, ...],
    region: str | None,
    container: str | None,
    images: tuple[str, ...],
    logins: tuple[str, ...],
    orchestrator: str | None,
    volumes: tuple[str, ...],
    security_groups: tuple[str, ...],
    reserved_ip: str | None,
    reservation_ref: str | None,
    host_pool_ref: str | None,
    reserved_days: int | None,
    spot: bool,
    ttl: str | None,
    max_hourly_cost: str | None,
    name: str | None,
    labels: tuple[str, ...],
    no_wait: bool,
    as_json: bool,
) -> None:
    """Create a cluster of INSTANCE_TYPE nodes and wait until it is RUNNING. With --host-pool,
    INSTANCE_TYPE may be left out: the API picks the type the pool's servers are (their GPUs).

    \b
    Example:
      gpucloud cluster create 8xH100 -n 2 -i ~/.ssh/id_ed25519.pub --name train
      gpucloud cluster create 8xH100 --min-nodes 1 --max-nodes 8 --spot --ttl 1d --label team=nlp
      gpucloud cluster create 8xH100 -n 2 --image torch=nvcr.io/nvidia/pytorch:24.05-py3
      gpucloud cluster create -n 2 --host-pool lab --name own
    """
    if instance_type is None and not host_pool_ref:
        raise click.MissingParameter(
            "Give the node shape, such as 8xH100 (see `gpucloud instance-types`); only with --host-pool "
            "may it be left out (the type of the pool's servers).", param_type="argument",
            param_hint="'INSTANCE_TYPE'")
    client = app.client
    sizing = node_counts(node_count, min_nodes, max_nodes)
    on_pool: dict[str, Any] = {}
    if host_pool_ref:
        refuse_on_host_pool(
            (reservation_ref, reserved_days, spot, min_nodes or max_nodes, reserved_ip, container, images),
            orchestrator,
        )
        on_pool = host_pool_spec(find_host_pool(client, host_pool_ref), region)
    nodes = int(sizing.get("node_count") or sizing["autoscaling"]["min_nodes"])
    container_images = parse_images(images)
    if container_images and orchestrator in (None, "none") and sizing.get("node_count") == 1:
        raise click.UsageError("--image: jobs run in images through Slurm (srun --container=/images/NAME), "
                               "and a single node has no orchestrator by default: add --orchestrator slurm")
    registry_credentials = parse_logins(logins)
    spec: dict[str, Any] = {
        "name": name or f"cluster-{secrets.token_hex(3)}",
        "region": region or on_pool.get("region") or _default_region(client, str(instance_type), nodes),
        **sizing,
        "labels": parse_labels(labels, "--label"),
        "volume_ids": [find_volume(client, v)["id"] for v in volumes],
        "security_group_ids": [find_security_group(client, g)["id"] for g in security_groups],
    }
    optional = {
        "orchestrator": orchestrator,
        "container": container,
        "container_images": container_images or None,
        "registry_credentials": registry_credentials or None,
        "billing": {"type": "reserved", "duration_days": reserved_days} if reserved_days else None,
        "capacity_type": "spot" if spot else None,
        "ttl": ttl,
        "max_hourly_cost_usd": money(max_hourly_cost, "--max-hourly-cost"),
        "reserved_ip_id": find_reserved_ip(client, reserved_ip)["id"] if reserved_ip else None,
        "reservation_id": find_reservation(client, reservation_ref)["id"] if reservation_ref else None,
    }
    if instance_type is not None:  # else the type of the host pool's servers, the API's choice
        optional["instance_type"] = instance_type
    spec.update({field: value for field, value in optional.items() if value is not None})
    spec.update(on_pool)
    spec["ssh_key_ids"] = ssh_keys_to_install(client, key_files, key_refs)
    created = client.create_cluster(spec, idempotency_key=new_idempotency_key())
    size = f"{nodes}" if "node_count" in sizing else f"{min_nodes}-{max_nodes}"
    cost = created.get("estimated_hourly_cost_usd")  # 0 on one's own servers: a price, not a blank
    note(
        f"Creating {created['name']} ({created['id']}): {size} x {created.get('instance_type')} in "
        f"{created['region']}, {'?' if cost is None else cost} USD/hour"
    )
    _finish(app, created, as_json, not no_wait, f"cluster {created['id']} to be RUNNING")


STATUSES = ["PENDING", "PROVISIONING", "CONFIGURING", "CONTAINER_CREATING", "RUNNING", "PAUSED", "DESTROYING",
            "DESTROYED", "FAILED"]


def matches(c: Mapping[str, Any], labels: Mapping[str, str], status: str | None) -> bool:
    """Every label given, and the status when given (the API's listing filters by name only)."""
    have = c.get("labels") or {}
    return all(have.get(k) == v for k, v in labels.items()) and status in (None, c["status"])


@cluster.command("list")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE",
              help="Only clusters with this label (repeatable: all must match).")
@click.option("--status", type=click.Choice(STATUSES, case_sensitive=False),
              help="Only clusters in this status (either case).")
@json_option
@pass_app
def list_clusters(app: App, labels: tuple[str, ...], status: str | None, as_json: bool) -> None:
    """List the project's clusters, optionally only those with given labels or status.

    \b
    Example:
      gpucloud cluster list
      gpucloud cluster list --label team=nlp --status running
    """
    wanted, state = parse_labels(labels, "--label"), status.upper() if status else None
    found = [c for c in app.client.list_clusters() if matches(c, wanted, state)]
    empty = "No clusters match." if labels or status else "No clusters: gpucloud cluster create --help"
    emit(found, as_json, table_view(CLUSTER_COLUMNS, empty=empty))


@cluster.command("info")
@click.argument("cluster_ref", metavar="CLUSTER", shell_complete=complete_cluster)
@click.option("--wait", is_flag=True, help="Watch until the cluster is RUNNING (or DESTROYED).")
@json_option
@pass_app
def info(app: App, cluster_ref: str, wait: bool, as_json: bool) -> None:
    """Show CLUSTER (id or name): status, nodes, login, lifetime, scaling, network, limits and the
    budgets its spend counts against. `--json` prints the API's cluster.

    \b
    Example:
      gpucloud cluster info train --wait
    """
    c = find_cluster(app.client, cluster_ref)
    if wait and c["status"] in ("DESTROYING", "DESTROYED"):
        c = watch_cluster(app.client, c["id"], is_gone, what=f"cluster {c['id']} to be destroyed") or c
    elif wait:
        c = watch_cluster(app.client, c["id"], is_running, what=f"cluster {c['id']} to be RUNNING") or c
    emit(c, as_json, lambda found: show_cluster(found, project_budgets(app.client)))


def project_budgets(client: GpuCloudClient) -> list[dict[str, Any]]:
    """The budgets to match against a cluster; none when this key may not read them (said on stderr)."""
    try:
        return client.list_budgets()
    except ApiError as error:
        note(f"Budgets not shown: {error}")
        return []


@cluster.command("scale")
@click.argument("cluster_ref", metavar="CLUSTER", shell_complete=complete_cluster)
@click.argument("node_count", metavar="N", type=click.IntRange(min=1))
@click.option("--no-wait", is_flag=True, help="Return once the API accepted the change.")
@yes_option
@json_option
@pass_app
def scale(app: App, cluster_ref: str, node_count: int, no_wait: bool, yes: bool, as_json: bool) -> None:
    """Grow or shrink CLUSTER to N nodes.

    Shrinking removes idle nodes first, then the newest. It first says which nodes go and which jobs
    run on them; a node with running jobs is drained and its jobs get the cluster's
    scale_down_grace_minutes to end before they are requeued, so it asks first (--yes in scripts).

    \b
    Example:
      gpucloud cluster scale train 4
    """
    c = find_cluster(app.client, cluster_ref)
    if node_count < int(c["node_count"]):
        _confirm_scale_down(app.client, c, node_count, yes)
    updated = app.client.update_cluster(c["id"], {"node_count": node_count})
    note(f"Scaling {updated['name']} ({updated['id']}) from {c['node_count']} to {node_count} nodes")
    _finish(app, updated, as_json, not no_wait, f"cluster {updated['id']} to run {node_count} nodes")


def _confirm_scale_down(client: GpuCloudClient, c: dict[str, Any], node_count: int, yes: bool) -> None:
    """Say which nodes a scale-down removes and the jobs on them; ask before evicting running jobs."""
    try:
        preview = client.scale_down_preview(c["id"], node_count)
    except ApiError as error:
        note(f"Could not preview which nodes go ({error}); nodes running jobs are drained and their jobs "
             "requeued after scale_down_grace_minutes.")
        confirm(yes, f"Scale {c['name']} ({c['id']}) down to {node_count} nodes?", refused="not scaled")
        return
    note(str(preview.get("summary") or f"Scaling {c['name']} to {node_count} nodes."))
    nodes = [n for n in preview.get("nodes") or [] if isinstance(n, dict)]
    jobs = sorted({int(j["job_id"]) for n in nodes for j in n.get("running_jobs") or []})
    if jobs:
        confirm(yes, f"Drain {', '.join(str(n['name']) for n in nodes if n.get('running_jobs'))} and requeue "
                f"job(s) {', '.join(map(str, jobs))} if still running after scale_down_grace_minutes "
                f"({preview.get('scale_down_grace_minutes')})?", refused="not scaled")


@cluster.command("edit")
@click.argument("cluster_ref", metavar="CLUSTER", shell_complete=complete_cluster)
@click.option("--name", help="New name.")
@click.option("--label", "set_labels", multiple=True, metavar="KEY=VALUE", help="Set a label (repeatable).")
@click.option("--remove-label", "remove_labels", multiple=True, metavar="KEY", help="Remove a label.")
@click.option("--add-key", "add_keys", multiple=True, metavar="FILE_OR_ID",
              help="Add an SSH key: a public key file or a registered key id (repeatable).")
@click.option("--remove-key", "remove_keys", multiple=True, metavar="ID", help="Remove an SSH key id.")
@click.option("--protect/--unprotect", default=None, help="Turn deletion protection on or off.")
@click.option("--repair", type=click.Choice(["auto", "manual"]),
              help="Node repair: auto replaces a failed node in place; manual leaves it failed until "
              "`gpucloud node replace`.")
@json_option
@pass_app
def edit(
    app: App,
    cluster_ref: str,
    name: str | None,
    set_labels: tuple[str, ...],
    remove_labels: tuple[str, ...],
    add_keys: tuple[str, ...],
    remove_keys: tuple[str, ...],
    protect: bool | None,
    repair: str | None,
    as_json: bool,
) -> None:
    """Change CLUSTER's name, labels, SSH keys, deletion protection or node repair mode.

    \b
    Example:
      gpucloud cluster edit train --label team=vision --protect
      gpucloud cluster edit train --repair manual
    """
    client = app.client
    c = find_cluster(client, cluster_ref)
    changes: dict[str, Any] = {}
    if name:
        changes["name"] = name
    if set_labels or remove_labels:
        labels = {k: v for k, v in (c.get("labels") or {}).items() if k not in remove_labels}
        changes["labels"] = {**labels, **parse_labels(set_labels, "--label")}
    if add_keys or remove_keys:
        ids = [k for k in c.get("ssh_key_ids") or [] if k not in remove_keys]
        for ref in add_keys:
            key_id = ref if ref.startswith("ssh_") else register_key_file(client, ref)
            if key_id not in ids:
                ids.append(key_id)
        changes["ssh_key_ids"] = ids
    if protect is not None:
        changes["deletion_protection"] = protect
    if repair:
        changes["node_repair"] = repair
    if not changes:
        raise click.UsageError("nothing to change: see `gpucloud cluster edit --help`")
    emit(client.update_cluster(c["id"], changes), as_json, show_cluster)


def _volume_command(name: str, summary: str) -> click.Command:
    """`cluster attach` and `cluster detach`: one command but for the API call and its words."""
    attach = name == "attach"

    @click.argument("cluster_ref", metavar="CLUSTER", shell_complete=complete_cluster)
    @click.argument("volume_ref", metavar="VOLUME", shell_complete=complete_volume)
    @json_option
    @pass_app
    def command(app: App, cluster_ref: str, volume_ref: str, as_json: bool) -> None:
        c = find_cluster(app.client, cluster_ref)
        volume = find_volume(app.client, volume_ref)
        change = app.client.attach_volume if attach else app.client.detach_volume
        words = ("Attached", "to") if attach else ("Detached", "from")
        done = f"{words[0]} {volume['id']} ({volume['name']}) {words[1]} {c['name']} ({c['id']})."
        emit(change(c["id"], volume["id"]), as_json, lambda _: note(done))

    example = f"gpucloud cluster {name} train datasets"
    return cluster.command(name, help=with_example(summary, example))(command)


_volume_command("attach", "Attach the shared VOLUME (id or name) to CLUSTER.")
_volume_command("detach", "Detach the shared VOLUME (id or name) from CLUSTER; its data stays on the volume.")


@cluster.command("restart-workers")
@click.argument("cluster_ref", metavar="CLUSTER", shell_complete=complete_cluster)
@yes_option
@json_option
@pass_app
def restart_workers(app: App, cluster_ref: str, yes: bool, as_json: bool) -> None:
    """Restart every worker of CLUSTER that reports XID errors (failed by one, or a hardware XID in the
    last hour); jobs running on them are killed. Admin keys.

    \b
    Example:
      gpucloud nodes train --health xid
      gpucloud cluster restart-workers train --yes
    """
    c = find_cluster(app.client, cluster_ref)
    confirm(yes, f"Restart the workers of {c['name']} ({c['id']}) that report XID errors? Jobs running on "
            "them are killed.", refused="nothing restarted")
    done = app.client.cluster_action(c["id"], "restart_workers", idempotency_key=new_idempotency_key())
    names = ", ".join(done["nodes"])
    emit(done, as_json, lambda _: note(f"Restarting {names}." if names else
                                       f"No worker of {c['name']} reports XID errors: nothing to restart."))


def forfeit_notice(c: dict[str, Any], now: datetime | None = None) -> str | None:
    """What deleting a reserved cluster gives up (the prepaid term is not refunded)."""
    reservation = c.get("reservation")
    if not reservation or reservation.get("expired"):
        billing = c.get("billing") or {}
        if billing.get("type") == "reserved" and not reservation:
            return (
                f"This cluster is reserved for {billing.get('duration_days')} days; its term has not started "
                "(nothing prepaid has been charged yet)."
            )
        return None
    start = datetime.fromisoformat(str(reservation["term_start"]).replace("Z", "+00:00"))
    end = datetime.fromisoformat(str(reservation["term_end"]).replace("Z", "+00:00"))
    now = now or datetime.now(UTC)
    remaining = max(0.0, (end - now).total_seconds())
    term = max(1.0, (end - start).total_seconds())
    upfront = Decimal(str(reservation["upfront_usd"]))
    unused = (upfront * Decimal(remaining / term)).quantize(Decimal("0.01"))
    days, rest = divmod(int(remaining), 86400)
    return (
        f"This cluster is reserved until {end:%Y-%m-%d %H:%M} UTC: deleting it forfeits the remaining "
        f"{days}d {rest // 3600}h of the prepaid term (about {unused} of {upfront} USD paid up front; "
        "no refund)."
    )


@cluster.command("delete")
@click.argument("cluster_ref", metavar="CLUSTER", shell_complete=complete_cluster)
@yes_option
@click.option("--no-wait", is_flag=True, help="Return once the API accepted the deletion.")
@json_option
@pass_app
def delete(app: App, cluster_ref: str, yes: bool, no_wait: bool, as_json: bool) -> None:
    """Delete CLUSTER and release its nodes (volumes are kept).

    \b
    Example:
      gpucloud cluster delete train --yes
    """
    c = find_cluster(app.client, cluster_ref)
    notice = forfeit_notice(c)
    if notice:
        note(notice)
    confirm(yes, f"Delete {c['name']} ({c['id']}, {c['node_count']} x {c['instance_type']})?",
            refused="not deleted")
    deleted = app.client.delete_cluster(c["id"]) or c
    note(f"Deleting {c['name']} ({c['id']})")
    status = deleted["status"]
    if not no_wait:
        last = watch_cluster(app.client, c["id"], is_gone, what=f"cluster {c['id']} to be destroyed")
        deleted, status = (last, last["status"]) if last is not None else (deleted, "DESTROYED (gone)")
    # --json: the API's last answer about it (none comes once it is gone)
    emit(deleted, as_json, lambda _: note(f"{c['name']} ({c['id']}) is {status}."))


# `cluster destroy`, its name before every group said `delete`: works as before, left out of help and docs.
cluster.add_command(click.Command(
    "destroy", callback=delete.callback, params=delete.params, help=delete.help, hidden=True
))

cluster.add_command(list_images)
cluster.add_command(image)
