"""`gpucloud reserved-ip list|show|create|update|delete|attach|detach`: public addresses the project keeps
across clusters (attaching one is the cluster's `reserved_ip_id`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click

from provider.cli.app import (
    App,
    confirm,
    find_cluster,
    json_option,
    name_and_label_changes,
    one_named,
    parse_labels,
    pass_app,
    yes_option,
)
from provider.cli.output import emit, note, print_fields, table_view
from provider.client import GpuCloudClient, new_idempotency_key

IP_COLUMNS = [
    ("ID", lambda i: i["id"]),
    ("NAME", lambda i: i.get("name")),
    ("ADDRESS", lambda i: i["address"]),
    ("STATUS", lambda i: i["status"]),
    ("REGION", lambda i: i["region"]),
    ("CLUSTER", lambda i: i.get("cluster_id")),
    ("USD/HOUR", lambda i: i.get("hourly_cost_usd")),
]


def find_reserved_ip(client: GpuCloudClient, ref: str) -> dict[str, Any]:
    """A reserved IP by id (rip_...), by name or by its address."""
    if ref.startswith("rip_"):
        return client.get_reserved_ip(ref)
    if ref.replace(".", "").isdigit() or ":" in ref:
        by_address = [i for i in client.list_reserved_ips() if i["address"] == ref]
        return one_named(by_address, "reserved IP", ref, "reserved-ip list")
    return one_named(client.list_reserved_ips(name=ref), "reserved IP", ref, "reserved-ip list")


def labels_text(labels: Mapping[str, str] | None) -> str:
    return ",".join(f"{k}={v}" for k, v in (labels or {}).items())


def show_ip(ip: Mapping[str, Any]) -> None:
    print_fields([
        ("ID", ip["id"]), ("Name", ip.get("name")), ("Address", ip["address"]), ("Status", ip["status"]),
        ("Region", ip["region"]), ("Cluster", ip.get("cluster_id")),
        ("Labels", labels_text(ip.get("labels"))),
        ("USD/hour", ip.get("hourly_cost_usd")), ("Created", ip.get("created_at")),
    ])


label_option = click.option("--label", "labels", multiple=True, metavar="KEY=VALUE",
                            help="A label (repeatable).")


@click.group("reserved-ip")
def reserved_ip() -> None:
    """Manage reserved IPs: public addresses the project keeps across clusters (DNS, allowlists).

    \b
    Example:
      gpucloud reserved-ip create --region us-east-1 --name edge
      gpucloud reserved-ip attach edge train
    """


@reserved_ip.command("list")
@json_option
@pass_app
def list_ips(app: App, as_json: bool) -> None:
    """List the project's reserved IPs.

    \b
    Example:
      gpucloud reserved-ip list
    """
    empty = "No reserved IPs: gpucloud reserved-ip create --help"
    emit(app.client.list_reserved_ips(), as_json, table_view(IP_COLUMNS, empty=empty))


@reserved_ip.command("show")
@click.argument("ip_ref", metavar="IP")
@json_option
@pass_app
def show(app: App, ip_ref: str, as_json: bool) -> None:
    """Show IP (id, name or address).

    \b
    Example:
      gpucloud reserved-ip show edge
    """
    emit(find_reserved_ip(app.client, ip_ref), as_json, show_ip)


@reserved_ip.command("create")
@click.option("--region", required=True, help="Region whose public pool the address comes from.")
@click.option("--name", help="Display name.")
@label_option
@json_option
@pass_app
def create(app: App, region: str, name: str | None, labels: tuple[str, ...], as_json: bool) -> None:
    """Reserve a public address of REGION's pool (billed per hour until deleted).

    \b
    Example:
      gpucloud reserved-ip create --region us-east-1 --name edge --label team=nlp
    """
    body: dict[str, Any] = {"region": region, "labels": parse_labels(labels, "--label")}
    if name is not None:
        body["name"] = name
    emit(app.client.create_reserved_ip(body, idempotency_key=new_idempotency_key()), as_json, show_ip)


@reserved_ip.command("update")
@click.argument("ip_ref", metavar="IP")
@click.option("--name", help="New display name.")
@label_option
@json_option
@pass_app
def update(app: App, ip_ref: str, name: str | None, labels: tuple[str, ...], as_json: bool) -> None:
    """Rename IP or replace its labels.

    \b
    Example:
      gpucloud reserved-ip update edge --name edge-1 --label team=nlp
    """
    changes = name_and_label_changes(name, labels)
    ip = find_reserved_ip(app.client, ip_ref)
    emit(app.client.update_reserved_ip(ip["id"], changes), as_json, show_ip)


@reserved_ip.command("delete")
@click.argument("ip_ref", metavar="IP")
@yes_option
@json_option
@pass_app
def delete(app: App, ip_ref: str, yes: bool, as_json: bool) -> None:
    """Release IP to the pool (detach it first). `--json` prints it as it was.

    \b
    Example:
      gpucloud reserved-ip delete edge --yes
    """
    ip = find_reserved_ip(app.client, ip_ref)
    confirm(yes, f"Release {ip['address']} ({ip['id']})? It cannot be had back.", refused="not released")
    app.client.delete_reserved_ip(ip["id"])
    emit(ip, as_json, lambda _: note(f"Released reserved IP {ip['id']} ({ip['address']})."))


@reserved_ip.command("attach")
@click.argument("ip_ref", metavar="IP")
@click.argument("cluster_ref", metavar="CLUSTER")
@json_option
@pass_app
def attach(app: App, ip_ref: str, cluster_ref: str, as_json: bool) -> None:
    """Make IP the login address of CLUSTER (same region), in place; a cluster holding it now falls back
    to a floating address. `--json` prints the reserved IP.

    \b
    Example:
      gpucloud reserved-ip attach edge train
    """
    ip = find_reserved_ip(app.client, ip_ref)
    cluster = find_cluster(app.client, cluster_ref)
    app.client.update_cluster(cluster["id"], {"reserved_ip_id": ip["id"]})
    attached = app.client.get_reserved_ip(ip["id"])
    said = f"Attached {ip['address']} to {cluster['name']} ({cluster['id']})."
    emit(attached, as_json, lambda _: note(said))


@reserved_ip.command("detach")
@click.argument("ip_ref", metavar="IP")
@json_option
@pass_app
def detach(app: App, ip_ref: str, as_json: bool) -> None:
    """Take IP off its cluster (which gets a fresh floating address); the IP stays reserved.
    `--json` prints the reserved IP.

    \b
    Example:
      gpucloud reserved-ip detach edge
    """
    ip = find_reserved_ip(app.client, ip_ref)
    cluster_id = ip.get("cluster_id")
    if not cluster_id:
        raise click.UsageError(f"reserved IP {ip['id']} ({ip['address']}) is not attached to a cluster")
    app.client.update_cluster(cluster_id, {"reserved_ip_id": None})
    detached = app.client.get_reserved_ip(ip["id"])
    emit(detached, as_json, lambda _: note(f"Detached {ip['address']} from {cluster_id}."))
