"""`gpucloud reservation list|show|create|update|delete`: capacity reserved for a term, prepaid, that
clusters draw their nodes from (a cluster's `reservation_id`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click

from provider.cli.app import (
    App,
    confirm,
    json_option,
    name_and_label_changes,
    one_named,
    parse_labels,
    pass_app,
    yes_option,
)
from provider.cli.budgets import usd
from provider.cli.output import emit, note, print_fields, table_view
from provider.cli.reserved_ips import labels_text
from provider.client import GpuCloudClient, new_idempotency_key


def find_reservation(client: GpuCloudClient, ref: str) -> dict[str, Any]:
    """A reservation by id (rsv_...) or by name."""
    if ref.startswith("rsv_"):
        return client.get_reservation(ref)
    named = [r for r in client.list_reservations() if r["name"] == ref]
    return one_named(named, "reservation", ref, "reservation list")


def drawn(r: Mapping[str, Any]) -> int:
    """Nodes clusters draw now (none once ended: free_nodes is 0 then, and so is what is drawn)."""
    if r.get("status") == "ended":
        return 0
    return int(r["node_count"]) - int(r.get("free_nodes") or 0)


RESERVATION_COLUMNS = [
    ("ID", lambda r: r["id"]),
    ("NAME", lambda r: r["name"]),
    ("STATUS", lambda r: r["status"]),
    ("TYPE", lambda r: r["instance_type"]),
    ("DRAWN/NODES", lambda r: f"{drawn(r)}/{r['node_count']}"),
    ("REGION", lambda r: r["region"]),
    ("STARTS", lambda r: r["starts_at"]),
    ("ENDS", lambda r: r["ends_at"]),
]


def show_reservation(r: Mapping[str, Any]) -> None:
    print_fields([
        ("ID", r["id"]), ("Name", r["name"]), ("Status", r["status"]), ("Region", r["region"]),
        ("Fabric", r.get("fabric")), ("Instance type", r["instance_type"]),
        ("Nodes", f"{drawn(r)} drawn / {r['node_count']} reserved ({r.get('free_nodes')} free)"),
        ("Clusters", r.get("cluster_ids")), ("Term", f"{r['duration_days']} days"),
        ("Starts", r["starts_at"]), ("Ends", r["ends_at"]), ("USD/GPU/hour", usd(r.get("gpu_hour_usd"))),
        ("Discount", r.get("discount")), ("Up front USD", usd(r.get("upfront_usd"))),
        ("Charged", r.get("charged_at")), ("Labels", labels_text(r.get("labels"))),
    ])


label_option = click.option("--label", "labels", multiple=True, metavar="KEY=VALUE",
                            help="A label (repeatable).")


@click.group()
def reservation() -> None:
    """Manage capacity reservations: nodes held for a term at the reserved rate, paid up front.

    \b
    Example:
      gpucloud reservation create train-q1 8xH100 -n 4 --region us-east-1 --days 30
    """


@reservation.command("list")
@json_option
@pass_app
def list_reservations(app: App, as_json: bool) -> None:
    """List the project's reservations: how many of their nodes clusters draw.

    \b
    Example:
      gpucloud reservation list
    """
    empty = "No reservations: gpucloud reservation create --help"
    emit(app.client.list_reservations(), as_json, table_view(RESERVATION_COLUMNS, empty=empty))


@reservation.command("show")
@click.argument("reservation_ref", metavar="RESERVATION")
@json_option
@pass_app
def show(app: App, reservation_ref: str, as_json: bool) -> None:
    """Show RESERVATION (id or name): nodes drawn vs reserved, term and price.

    \b
    Example:
      gpucloud reservation show train-q1
    """
    emit(find_reservation(app.client, reservation_ref), as_json, show_reservation)


@reservation.command("create")
@click.argument("name")
@click.argument("instance_type")
@click.option("-n", "--nodes", "node_count", type=click.IntRange(min=1), required=True,
              help="Nodes held for the term.")
@click.option("--region", required=True, help="Region (see `gpucloud regions`).")
@click.option("--days", "duration_days", type=click.IntRange(min=1), required=True, help="Term in days.")
@click.option("--start", "starts_at", metavar="RFC3339",
              help="When the term starts, with a time zone (default: now).")
@label_option
@json_option
@pass_app
def create(
    app: App, name: str, instance_type: str, node_count: int, region: str, duration_days: int,
    starts_at: str | None, labels: tuple[str, ...], as_json: bool,
) -> None:
    """Reserve NODES of INSTANCE_TYPE for a term: charged once, up front, when it starts (price it
    first with `gpucloud estimate TYPE -n N --region R --reserved DAYS`).

    \b
    Example:
      gpucloud reservation create train-q1 8xH100 -n 4 --region us-east-1 --days 30 \\
        --start 2027-01-01T00:00:00Z --label team=nlp
    """
    body: dict[str, Any] = {
        "name": name, "region": region, "instance_type": instance_type, "node_count": node_count,
        "duration_days": duration_days, "labels": parse_labels(labels, "--label"),
    }
    if starts_at is not None:
        body["starts_at"] = starts_at
    created = app.client.create_reservation(body, idempotency_key=new_idempotency_key())
    emit(created, as_json, show_reservation)


@reservation.command("update")
@click.argument("reservation_ref", metavar="RESERVATION")
@click.option("--name", help="New name.")
@label_option
@json_option
@pass_app
def update(app: App, reservation_ref: str, name: str | None, labels: tuple[str, ...], as_json: bool) -> None:
    """Rename RESERVATION or replace its labels (a new term or size is a new reservation).

    \b
    Example:
      gpucloud reservation update train-q1 --name train-q1-nlp --label team=nlp
    """
    changes = name_and_label_changes(name, labels)
    found = find_reservation(app.client, reservation_ref)
    emit(app.client.update_reservation(found["id"], changes), as_json, show_reservation)


@reservation.command("delete")
@click.argument("reservation_ref", metavar="RESERVATION")
@yes_option
@json_option
@pass_app
def delete(app: App, reservation_ref: str, yes: bool, as_json: bool) -> None:
    """Give RESERVATION's capacity back early: no refund once it started; refused while clusters draw
    from it. `--json` prints it as it was.

    \b
    Example:
      gpucloud reservation delete train-q1 --yes
    """
    found = find_reservation(app.client, reservation_ref)
    question = f"Delete reservation {found['name']} ({found['id']}, {found['status']})? No refund once begun."
    confirm(yes, question, refused="not deleted")
    app.client.delete_reservation(found["id"])
    emit(found, as_json, lambda _: note(f"Deleted reservation {found['id']} ({found['name']})."))
