"""`gpucloud cluster ...`: create, list, info, scale, edit, attach, detach, destroy."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import click

from provider.cli.app import (
    App,
    confirm,
    find_cluster,
    find_volume,
    json_option,
    parse_labels,
    pass_app,
    with_example,
    yes_option,
)
from provider.cli.keys import register_key_file
from provider.cli.output import emit, note, print_fields, print_table, table_view
from provider.cli.ssh import ssh_argv_for_cluster
from provider.cli.wait import is_gone, is_running, watch_cluster
from provider.client import ApiError, GpuCloudClient, new_idempotency_key


@click.group()
def cluster() -> None:
    """Create, inspect, scale and destroy GPU clusters.

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
    """How an unreserved cluster is billed: what it runs on, or prepaid when it draws a reservation."""
    if c.get("reservation_id"):
        return f"reservation {c['reservation_id']} (prepaid)"
    kind = c.get("capacity_type") or "on_demand"
    return CAPACITY_LABELS.get(kind, kind)


def show_cluster(c: dict[str, Any]) -> None:
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
        ("Billing", term),
        ("USD/hour", c.get("estimated_hourly_cost_usd")),
        ("SSH keys", c.get("ssh_key_ids")),
        ("Volumes", c.get("volume_ids")),
        ("Labels", [f"{k}={v}" for k, v in sorted((c.get("labels") or {}).items())]),
        ("Protected", c.get("deletion_protection")),
        ("Node repair", c.get("node_repair")),
    ]
    if c.get("login"):
        fields.append(("SSH", " ".join(ssh_argv_for_cluster(c))))
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


@cluster.command("create")
@click.argument("instance_type")
@click.option("-n", "--nodes", "node_count", type=click.IntRange(min=1), default=1, show_default=True,
              help="Number of nodes.")
@click.option("-i", "--identity", "key_files", multiple=True, type=click.Path(dir_okay=False),
              help="OpenSSH public key file to install (registered if new; repeatable).")
@click.option("--ssh-key", "key_refs", multiple=True, help="An already registered SSH key id (repeatable).")
@click.option("--region", help="Region (default: the first with room for the nodes).")
@click.option("--container", type=click.Choice(["base", "pytorch"]), help="Container image (single node).")
@click.option("--orchestrator", type=click.Choice(["slurm", "kubernetes", "none"]),
              help="Default: none for 1 node, else slurm.")
@click.option("--volume", "volumes", multiple=True, help="Shared volume id or name to attach (repeatable).")
@click.option("--reserved", "reserved_days", type=click.IntRange(min=1), metavar="DAYS",
              help="Reserve for DAYS (prepaid at a discount) instead of on-demand billing.")
@click.option("--name", help="Cluster name (default: cluster-<random>).")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE", help="A label (repeatable).")
@click.option("--no-wait", is_flag=True, help="Return once the API accepted the cluster.")
@json_option
@pass_app
def create(
    app: App,
    instance_type: str,
    node_count: int,
    key_files: tuple[str, ...],
    key_refs: tuple[str, ...],
    region: str | None,
    container: str | None,
    orchestrator: str | None,
    volumes: tuple[str, ...],
    reserved_days: int | None,
    name: str | None,
    labels: tuple[str, ...],
    no_wait: bool,
    as_json: bool,
) -> None:
    """Create a cluster of INSTANCE_TYPE nodes and wait until it is RUNNING.

    \b
    Example:
      gpucloud cluster create 8xH100 -n 2 -i ~/.ssh/id_ed25519.pub --name train
    """
    client = app.client
    spec: dict[str, Any] = {
        "name": name or f"cluster-{secrets.token_hex(3)}",
        "region": region or _default_region(client, instance_type, node_count),
        "instance_type": instance_type,
        "node_count": node_count,
        "ssh_key_ids": [*key_refs, *(register_key_file(client, f) for f in key_files)],
        "volume_ids": [find_volume(client, v)["id"] for v in volumes],
        "labels": parse_labels(labels, "--label"),
    }
    if orchestrator:
        spec["orchestrator"] = orchestrator
    if container:
        spec["container"] = container
    if reserved_days:
        spec["billing"] = {"type": "reserved", "duration_days": reserved_days}
    created = client.create_cluster(spec, idempotency_key=new_idempotency_key())
    note(
        f"Creating {created['name']} ({created['id']}): {node_count} x {instance_type} in "
        f"{created['region']}, {created.get('estimated_hourly_cost_usd') or '?'} USD/hour"
    )
    _finish(app, created, as_json, not no_wait, f"cluster {created['id']} to be RUNNING")


@cluster.command("list")
@json_option
@pass_app
def list_clusters(app: App, as_json: bool) -> None:
    """List the project's clusters.

    \b
    Example:
      gpucloud cluster list
    """
    empty = "No clusters: gpucloud cluster create --help"
    emit(app.client.list_clusters(), as_json, table_view(CLUSTER_COLUMNS, empty=empty))


@cluster.command("info")
@click.argument("cluster_ref", metavar="CLUSTER")
@click.option("--wait", is_flag=True, help="Watch until the cluster is RUNNING (or DESTROYED).")
@json_option
@pass_app
def info(app: App, cluster_ref: str, wait: bool, as_json: bool) -> None:
    """Show CLUSTER (id or name): status, nodes, login.

    \b
    Example:
      gpucloud cluster info train --wait
    """
    c = find_cluster(app.client, cluster_ref)
    if wait and c["status"] in ("DESTROYING", "DESTROYED"):
        c = watch_cluster(app.client, c["id"], is_gone, what=f"cluster {c['id']} to be destroyed") or c
        wait = False
    _finish(app, c, as_json, wait, f"cluster {c['id']} to be RUNNING")


@cluster.command("scale")
@click.argument("cluster_ref", metavar="CLUSTER")
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
@click.argument("cluster_ref", metavar="CLUSTER")
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

    @click.argument("cluster_ref", metavar="CLUSTER")
    @click.argument("volume_ref", metavar="VOLUME")
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
@click.argument("cluster_ref", metavar="CLUSTER")
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
    """What destroying a reserved cluster gives up (the prepaid term is not refunded)."""
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
        f"This cluster is reserved until {end:%Y-%m-%d %H:%M} UTC: destroying it forfeits the remaining "
        f"{days}d {rest // 3600}h of the prepaid term (about {unused} of {upfront} USD paid up front; "
        "no refund)."
    )


@cluster.command("destroy")
@click.argument("cluster_ref", metavar="CLUSTER")
@yes_option
@click.option("--no-wait", is_flag=True, help="Return once the API accepted the deletion.")
@json_option
@pass_app
def destroy(app: App, cluster_ref: str, yes: bool, no_wait: bool, as_json: bool) -> None:
    """Destroy CLUSTER and release its nodes (volumes are kept).

    \b
    Example:
      gpucloud cluster destroy train --yes
    """
    c = find_cluster(app.client, cluster_ref)
    notice = forfeit_notice(c)
    if notice:
        note(notice)
    confirm(yes, f"Destroy {c['name']} ({c['id']}, {c['node_count']} x {c['instance_type']})?",
            refused="not destroyed")
    deleted = app.client.delete_cluster(c["id"]) or c
    note(f"Destroying {c['name']} ({c['id']})")
    status = deleted["status"]
    if not no_wait:
        last = watch_cluster(app.client, c["id"], is_gone, what=f"cluster {c['id']} to be destroyed")
        deleted, status = (last, last["status"]) if last is not None else (deleted, "DESTROYED (gone)")
    # --json: the API's last answer about it (none comes once it is gone)
    emit(deleted, as_json, lambda _: note(f"{c['name']} ({c['id']}) is {status}."))
