"""`gpucloud nodes CLUSTER` (health, scheduler state, machine, GPU readings, recent XID errors),
`gpucloud nodes CLUSTER --history NODE` (what happened to a node: faults, repairs, restarts, actions) and
`gpucloud node restart|replace|drain|resume CLUSTER NODE`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click

from provider.cli.app import (
    App,
    complete_cluster,
    complete_node,
    confirm,
    find_cluster,
    json_option,
    pass_app,
    with_example,
    yes_option,
)
from provider.cli.output import Column, counts_line, emit, note, print_table, table_view
from provider.client import new_idempotency_key

HEALTH_FILTERS = ["failed", "xid", "healthy"]


def gpu_utilisation(node: Mapping[str, Any]) -> str | None:
    """The mean utilisation over the node's GPUs that report one."""
    values = [g["utilization_pct"] for g in node.get("gpus") or [] if g.get("utilization_pct") is not None]
    return f"{round(sum(values) / len(values))}%" if values else None


def gpu_memory(node: Mapping[str, Any]) -> str | None:
    """GPU memory used / total over the node's GPUs, in GiB."""
    gpus = [g for g in node.get("gpus") or []
            if g.get("memory_used_mib") is not None and g.get("memory_total_mib")]
    if not gpus:
        return None
    used = sum(int(g["memory_used_mib"]) for g in gpus) / 1024
    total = sum(int(g["memory_total_mib"]) for g in gpus) / 1024
    return f"{used:.0f}/{total:.0f} GiB"


def recent_xids(node: Mapping[str, Any]) -> list[str]:
    """The codes of the node's recent XID events, each once, as `code` or `code@gpuN`."""
    codes: list[str] = []
    for event in node.get("xid_events") or []:
        gpu = event.get("gpu_index")
        code = f"{event['code']}@gpu{gpu}" if gpu is not None else str(event["code"])
        if code not in codes:
            codes.append(code)
    return codes


def reason(node: Mapping[str, Any]) -> str | None:
    """Why the node is not healthy, the action it waits for, or why it has no GPU readings."""
    pending = f"{node['pending_action']} pending" if node.get("pending_action") else None
    return node.get("health_reason") or pending or node.get("gpus_unavailable_reason")


NODE_COLUMNS: list[Column] = [
    ("NODE", "name"), ("ROLE", "role"), ("STATUS", "status"), ("HEALTH", "health"),
    ("SCHEDULER", "orchestrator_state"), ("INSTANCE", "instance_id"),
    ("GPUS", lambda n: len(n["gpus"]) if n.get("gpus") is not None else None),
    ("GPU UTIL", gpu_utilisation), ("GPU MEM", gpu_memory), ("XIDS", recent_xids), ("REASON", reason),
]


def event_kind(event: Mapping[str, Any]) -> str:
    """The event's kind, with its XID code where it has one (`xid 79`)."""
    code = event.get("code")
    return f"{event['kind']} {code}" if code is not None else str(event["kind"])


EVENT_COLUMNS: list[Column] = [
    ("TIME", "at"), ("EVENT", event_kind), ("INSTANCE", "instance_id"), ("BY", "actor"), ("DETAIL", "detail"),
]


def show_nodes(listing: Mapping[str, Any], health: str | None) -> None:
    click.echo(counts_line("Health", listing.get("counts") or {}))
    click.echo()
    which = f"{health} " if health else ""
    print_table(NODE_COLUMNS, listing["items"], empty=f"No {which}nodes.")


@click.command()
@click.argument("cluster_ref", metavar="CLUSTER", shell_complete=complete_cluster)
@click.option("--health", type=click.Choice(HEALTH_FILTERS),
              help="Only failed nodes, nodes with recent XID errors (xid), or healthy ones.")
@click.option("--history", "history", metavar="NODE",
              help="Instead: NODE's history, newest first (faults with their XID code, repairs, restarts, "
              "node actions and who asked).")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True,
              help="With --history: the newest this many events.")
@json_option
@pass_app
def nodes(app: App, cluster_ref: str, health: str | None, history: str | None, limit: int,
          as_json: bool) -> None:
    """List CLUSTER's nodes with health and GPUs, or one node's history.

    Per node: status, health, scheduler state (Slurm or Kubernetes), machine, GPU utilisation and
    memory, recent XID errors; first the count of nodes per health state. With --history NODE: what
    happened to NODE (under its name, across repairs), newest first: time, event, machine, who asked
    (an API key's prefix, or engine), detail.

    \b
    Example:
      gpucloud nodes train
      gpucloud nodes train --health xid
      gpucloud nodes train --history train-1
    """
    if history is not None and health is not None:
        raise click.UsageError("--history shows one node's events: it takes no --health filter")
    c = find_cluster(app.client, cluster_ref)
    if history is not None:
        events = app.client.list_node_events(c["id"], history, limit=limit)
        emit(events, as_json, table_view(EVENT_COLUMNS, empty=f"No events for {history}."))
        return
    listing = app.client.list_cluster_nodes(c["id"], health=health)
    emit(listing, as_json, lambda body: show_nodes(body, health))


@click.group()
def node() -> None:
    """Restart, replace, drain or resume a node.

    The actions need an admin key; restart and replace ask first (--yes in scripts).

    \b
    Example:
      gpucloud node drain train train-1
    """


# action, what it does, and what a confirmation must warn of (None: nothing is lost, no question asked)
NODE_ACTIONS = [
    ("restart", "Reboot NODE of CLUSTER in place (same machine).", "Jobs running on it are killed."),
    ("replace", "Replace NODE's machine by a new one under the same hostname and address.",
     "Jobs running on it are killed and its local disks are lost."),
    ("drain", "Let no new job land on NODE; the jobs running on it finish.", None),
    ("resume", "Let jobs land on a drained NODE again.", None),
]


def _node_action_command(action: str, summary: str, warning: str | None) -> None:
    @click.argument("cluster_ref", metavar="CLUSTER", shell_complete=complete_cluster)
    @click.argument("node_name", metavar="NODE", shell_complete=complete_node)
    @json_option
    @pass_app
    def command(app: App, cluster_ref: str, node_name: str, as_json: bool, yes: bool = False) -> None:
        c = find_cluster(app.client, cluster_ref)
        if warning:
            confirm(yes, f"{action.capitalize()} {node_name} of {c['name']} ({c['id']})? {warning}",
                    refused=f"{node_name} left as it was")
        done = app.client.node_action(c["id"], node_name, action, idempotency_key=new_idempotency_key())

        def show(body: Mapping[str, Any]) -> None:
            note(f"{action.capitalize()} of {node_name} ({c['name']}, {c['id']}) accepted.")
            table_view(NODE_COLUMNS)(body["node"])

        emit(done, as_json, show)

    if warning:
        command = yes_option(command)
    help_text = with_example(f"{summary} {warning or ''}".strip(), f"gpucloud node {action} train train-1")
    node.command(action, help=help_text)(command)


for _action, _summary, _warning in NODE_ACTIONS:
    _node_action_command(_action, _summary, _warning)
