"""Volumes, billing and the catalog: `volume ...`, `usage`, `balance`, `regions`, `instance-types`,
`estimate`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click

from provider.cli.app import App, complete_volume, confirm, find_volume, json_option, pass_app, yes_option
from provider.cli.output import emit, fields_view, note, print_fields, table_view
from provider.client import new_idempotency_key

VOLUME_COLUMNS = [
    ("ID", lambda v: v["id"]),
    ("NAME", lambda v: v["name"]),
    ("STATUS", lambda v: v["status"]),
    ("SIZE TIB", lambda v: v["size_tib"]),
    ("REGION", lambda v: v["region"]),
    ("ATTACHED TO", lambda v: v.get("attached_cluster_ids")),
    ("USD/HOUR", lambda v: v.get("estimated_hourly_cost_usd")),
]


@click.group()
def volume() -> None:
    """Manage shared volumes (mounted on every node of the clusters they are attached to).

    \b
    Example:
      gpucloud volume create datasets --region us-east-1 --size 4
    """


@volume.command("create")
@click.argument("name")
@click.option("--region", required=True, help="Region (see `gpucloud regions`).")
@click.option("--size", "size_tib", type=click.IntRange(min=1), required=True, help="Size in TiB.")
@json_option
@pass_app
def create_volume(app: App, name: str, region: str, size_tib: int, as_json: bool) -> None:
    """Create the shared volume NAME.

    \b
    Example:
      gpucloud volume create datasets --region us-east-1 --size 4
    """
    created = app.client.create_volume(
        name=name, region=region, size_tib=size_tib, idempotency_key=new_idempotency_key()
    )
    emit(created, as_json, table_view(VOLUME_COLUMNS))


@volume.command("list")
@click.option("--region", help="Only this region.")
@json_option
@pass_app
def list_volumes(app: App, region: str | None, as_json: bool) -> None:
    """List the project's shared volumes.

    \b
    Example:
      gpucloud volume list --region us-east-1
    """
    volumes = app.client.list_volumes(region=region)
    emit(volumes, as_json, table_view(VOLUME_COLUMNS, empty="No volumes: gpucloud volume create --help"))


@volume.command("info")
@click.argument("volume_ref", metavar="VOLUME", shell_complete=complete_volume)
@json_option
@pass_app
def volume_info(app: App, volume_ref: str, as_json: bool) -> None:
    """Show VOLUME (id or name).

    \b
    Example:
      gpucloud volume info datasets
    """
    emit(find_volume(app.client, volume_ref), as_json, lambda v: print_fields([
        ("ID", v["id"]), ("Name", v["name"]), ("Status", v["status"]), ("Size", f"{v['size_tib']} TiB"),
        ("Region", v["region"]), ("Mount path", v.get("mount_path")),
        ("Attached to", v.get("attached_cluster_ids")), ("USD/hour", v.get("estimated_hourly_cost_usd")),
    ]))


@volume.command("resize")
@click.argument("volume_ref", metavar="VOLUME", shell_complete=complete_volume)
@click.argument("size_tib", metavar="SIZE_TIB", type=click.IntRange(min=1))
@json_option
@pass_app
def resize_volume(app: App, volume_ref: str, size_tib: int, as_json: bool) -> None:
    """Grow VOLUME to SIZE_TIB (volumes never shrink).

    \b
    Example:
      gpucloud volume resize datasets 8
    """
    v = find_volume(app.client, volume_ref)
    emit(app.client.update_volume(v["id"], size_tib=size_tib), as_json, table_view(VOLUME_COLUMNS))


@volume.command("delete")
@click.argument("volume_ref", metavar="VOLUME", shell_complete=complete_volume)
@yes_option
@json_option
@pass_app
def delete_volume(app: App, volume_ref: str, yes: bool, as_json: bool) -> None:
    """Delete VOLUME and its data (detach it from every cluster first).

    \b
    Example:
      gpucloud volume delete datasets --yes
    """
    v = find_volume(app.client, volume_ref)
    confirm(yes, f"Delete {v['name']} ({v['id']}, {v['size_tib']} TiB) and its data?", refused="not deleted")
    app.client.delete_volume(v["id"])
    emit(v, as_json, lambda _: note(f"Deleted volume {v['id']} ({v['name']})."))


# Every kind of line the backend's meters write (a test keeps this equal to the API's list).
USAGE_KINDS = [
    "compute_on_demand", "compute_spot", "compute_reserved", "reservation", "storage", "reserved_ip"
]
USAGE_COLUMNS = [
    ("PERIOD START", lambda u: u["period_start"]),
    ("KIND", lambda u: u["kind"]),
    ("RESOURCE", lambda u: u["resource_id"]),
    ("TYPE", lambda u: u.get("instance_type")),
    ("UNITS", lambda u: u["units"]),
    ("HOURS", lambda u: f"{int(u['seconds']) / 3600:.2f}"),
    ("USD", lambda u: u["amount_usd"]),
]


@click.option("--cluster", "cluster_id", help="Only this cluster's lines (id).")
@click.command()
@click.option("--kind", type=click.Choice(USAGE_KINDS), help="Only this kind of line.")
@json_option
@pass_app
def usage(app: App, cluster_id: str | None, kind: str | None, as_json: bool) -> None:
    """List usage lines (node hours, reserved terms, storage, reserved IPs), oldest first.

    \b
    Example:
      gpucloud usage --kind compute_on_demand
    """
    lines = app.client.list_usage(cluster_id=cluster_id, kind=kind)
    emit(lines, as_json, table_view(USAGE_COLUMNS, empty="No usage recorded yet."))


@click.command()
@json_option
@pass_app
def balance(app: App, as_json: bool) -> None:
    """Show the project's credit balance.

    \b
    Example:
      gpucloud balance
    """
    emit(app.client.get_balance(), as_json, fields_view([
        ("Prepaid", "prepaid"), ("Granted USD", "granted_usd"), ("Charged USD", "charged_usd"),
        ("Balance USD", "balance_usd"), ("Exhausted", "exhausted"), ("On-demand paused", "on_demand_paused"),
    ]))


@click.command()
@json_option
@pass_app
def regions(app: App, as_json: bool) -> None:
    """List regions, their interconnects and fabrics.

    \b
    Example:
      gpucloud regions
    """
    emit(app.client.list_regions(), as_json, table_view([
        ("REGION", lambda r: r["name"]), ("NAME", lambda r: r.get("display_name")),
        ("INTERCONNECTS", lambda r: r.get("interconnects")),
        ("FABRICS", lambda r: [f["name"] for f in r.get("fabrics") or []]),
        ("STORAGE USD/TIB/HOUR", lambda r: r.get("storage_usd_per_tib_hour")),
    ], empty="No regions."))


@click.command("instance-types")
@click.option("--region", help="Only types offered in this region.")
@click.option("--gpu", help="Only this GPU model (e.g. H100).")
@click.option("--min-gpus", type=click.IntRange(min=1), help="At least this many GPUs per node.")
@json_option
@pass_app
def instance_types(
    app: App, region: str | None, gpu: str | None, min_gpus: int | None, as_json: bool
) -> None:
    """List instance types with prices and free capacity.

    \b
    Example:
      gpucloud instance-types --region us-east-1 --min-gpus 8
    """
    items = app.client.list_instance_types(region=region, gpu=gpu, min_gpus=min_gpus)

    def available(t: Mapping[str, Any]) -> str:
        return " ".join(f"{a['region']}:{a['available_nodes']}" for a in t.get("availability") or [])

    emit(items, as_json, table_view([
        ("TYPE", lambda t: t["name"]), ("GPU", lambda t: f"{t['gpu_count']} x {t['gpu_model']}"),
        ("INTERCONNECTS", lambda t: t.get("interconnects")),
        ("USD/GPU/HOUR", lambda t: t.get("on_demand_usd_per_gpu_hour")),
        ("USD/NODE/HOUR", lambda t: t.get("on_demand_usd_per_node_hour")),
        ("FREE NODES", available),
    ], empty="No instance types match."))


@click.command()
@click.argument("instance_type")
@click.option("-n", "--nodes", "node_count", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--region", required=True, help="Region (see `gpucloud regions`).")
@click.option("--reserved", "reserved_days", type=click.IntRange(min=1), metavar="DAYS",
              help="Price a reserved term of DAYS instead of on-demand.")
@json_option
@pass_app
def estimate(
    app: App, instance_type: str, node_count: int, region: str, reserved_days: int | None, as_json: bool
) -> None:
    """What a cluster would cost, per hour and (reserved) up front. Nothing is created.

    \b
    Example:
      gpucloud estimate 8xH100 -n 2 --region us-east-1 --reserved 30
    """
    spec: dict[str, Any] = {"region": region, "instance_type": instance_type, "node_count": node_count}
    if reserved_days:
        spec["billing"] = {"type": "reserved", "duration_days": reserved_days}
    emit(app.client.estimate_price(spec), as_json, fields_view([
        ("GPUs", "gpu_count"), ("USD/hour", "hourly_usd"), ("Up front USD", "upfront_usd"),
        ("On-demand USD/GPU/hour", "on_demand_gpu_hour_usd"),
        ("Reserved USD/GPU/hour", "reserved_gpu_hour_usd"), ("Reserved discount", "reserved_discount"),
    ]))
