"""`gpucloud security-group list|show|create|update|delete`: the firewalls clusters name in
`security_group_ids` (rules as `--ingress/--egress PROTO:PORTS:CIDRS` or a `--rules-file`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import IO, Any

import click

from provider.cli.app import App, confirm, json_option, one_named, pass_app, yes_option
from provider.cli.output import emit, note, print_fields, print_table, table_view
from provider.client import GpuCloudClient, new_idempotency_key

RULE_HELP = (
    "PROTO:PORTS:CIDRS, e.g. tcp:22:0.0.0.0/0, tcp:8888-8890:10.8.0.0/16,10.9.0.0/16 or all::0.0.0.0/0 "
    "(PORTS empty for icmp and all). Repeatable."
)
DIRECTIONS = ("ingress", "egress")


def find_security_group(client: GpuCloudClient, ref: str) -> dict[str, Any]:
    """A security group by id (sgr_...) or by name."""
    if ref.startswith("sgr_"):
        return client.get_security_group(ref)
    return one_named(client.list_security_groups(name=ref), "security group", ref, "security-group list")


def parse_rule(text: str, option: str) -> dict[str, Any]:
    """`tcp:22:0.0.0.0/0` -> the API's rule (`{protocol, from_port, to_port, cidr_blocks}`); the API checks
    the rest (which protocols take ports, networks without host bits) and names the rule it refuses."""
    parts = text.split(":", 2)  # the CIDRs may be IPv6 (colons): split only the first two
    if len(parts) != 3 or not parts[0] or not parts[2]:
        raise click.BadParameter(f"{text!r} is not PROTO:PORTS:CIDRS (e.g. tcp:22:0.0.0.0/0)",
                                 param_hint=option)
    protocol, ports, cidrs = parts
    rule: dict[str, Any] = {"protocol": protocol.lower(), "cidr_blocks": cidrs.split(",")}
    if ports:
        first, _, last = ports.partition("-")
        try:
            rule["from_port"] = int(first)
            if last:
                rule["to_port"] = int(last)
        except ValueError:
            message = f"{ports!r} in {text!r} is not PORT or FIRST-LAST"
            raise click.BadParameter(message, param_hint=option) from None
    return rule


def read_rules_file(file: IO[str] | None) -> dict[str, Any]:
    """`{"ingress": [...], "egress": [...]}` with the API's rule objects (either list may be left out)."""
    if file is None:
        return {}
    try:
        document = json.load(file)
    except json.JSONDecodeError as error:
        raise click.BadParameter(f"not JSON: {error}", param_hint="--rules-file") from None
    if not isinstance(document, dict) or not set(document) <= set(DIRECTIONS):
        raise click.BadParameter('expected {"ingress": [...], "egress": [...]}', param_hint="--rules-file")
    for direction, rules in document.items():
        if not isinstance(rules, list):
            raise click.BadParameter(f"{direction} is not a list of rules", param_hint="--rules-file")
    return document


def rule_changes(
    ingress: tuple[str, ...], egress: tuple[str, ...], rules_file: IO[str] | None
) -> dict[str, Any]:
    """The rule lists the options give (each replaces that whole list)."""
    changes = read_rules_file(rules_file)
    for direction, given in zip(DIRECTIONS, (ingress, egress), strict=True):
        if not given:
            continue
        if direction in changes:
            raise click.UsageError(f"--{direction} and the {direction} list of --rules-file: give one")
        changes[direction] = [parse_rule(rule, f"--{direction}") for rule in given]
    return changes


def ports(rule: Mapping[str, Any]) -> str:
    first, last = rule.get("from_port"), rule.get("to_port")
    if first is None:
        return "all"
    return str(first) if last in (None, first) else f"{first}-{last}"


GROUP_COLUMNS = [
    ("ID", lambda g: g["id"]),
    ("NAME", lambda g: g["name"]),
    ("DEFAULT", lambda g: g.get("is_default")),
    ("INGRESS", lambda g: len(g.get("ingress") or [])),
    ("EGRESS", lambda g: len(g.get("egress") or [])),
    ("CLUSTERS", lambda g: g.get("cluster_ids")),
    ("DESCRIPTION", lambda g: g.get("description")),
]
RULE_COLUMNS = [
    ("DIRECTION", lambda r: r["direction"]),
    ("PROTOCOL", lambda r: r["protocol"]),
    ("PORTS", ports),
    ("CIDRS", lambda r: r.get("cidr_blocks")),
    ("DESCRIPTION", lambda r: r.get("description")),
]


def show_group(group: Mapping[str, Any]) -> None:
    """The group's fields, then one row per rule."""
    print_fields([
        ("ID", group["id"]), ("Name", group["name"]), ("Description", group.get("description")),
        ("Default", group.get("is_default")), ("Clusters", group.get("cluster_ids")),
        ("Updated", group.get("updated_at")),
    ])
    rules = [{**rule, "direction": d} for d in DIRECTIONS for rule in group.get(d) or []]
    click.echo()
    print_table(RULE_COLUMNS, rules, empty="No rules: nothing in or out but the cluster's own traffic.")


@click.group("security-group")
def security_group() -> None:
    """Manage security groups: the firewall rules of the clusters that name them.

    Traffic between a cluster's own nodes is always allowed. A cluster naming no group uses the
    project's default group (SSH in from anywhere, all out).

    \b
    Example:
      gpucloud security-group create lab --ingress tcp:22:203.0.113.0/24 --egress all::0.0.0.0/0
    """


@security_group.command("list")
@json_option
@pass_app
def list_groups(app: App, as_json: bool) -> None:
    """List the project's security groups.

    \b
    Example:
      gpucloud security-group list
    """
    empty = "No security groups: gpucloud security-group create --help"
    emit(app.client.list_security_groups(), as_json, table_view(GROUP_COLUMNS, empty=empty))


@security_group.command("show")
@click.argument("group_ref", metavar="GROUP")
@json_option
@pass_app
def show(app: App, group_ref: str, as_json: bool) -> None:
    """Show GROUP (id or name) and its rules.

    \b
    Example:
      gpucloud security-group show lab
    """
    emit(find_security_group(app.client, group_ref), as_json, show_group)


rules_file_option = click.option(
    "--rules-file", type=click.File("r"), metavar="FILE",
    help='JSON {"ingress": [...], "egress": [...]} with the API\'s rule objects (protocol, from_port, '
    "to_port, cidr_blocks, description); - reads stdin.",
)


@security_group.command("create")
@click.argument("name")
@click.option("--description", help="What the group is for.")
@click.option("--ingress", multiple=True, metavar="RULE", help=f"Allowed inbound traffic: {RULE_HELP}")
@click.option("--egress", multiple=True, metavar="RULE",
              help="Allowed outbound traffic, as --ingress (none given: nothing goes out).")
@rules_file_option
@json_option
@pass_app
def create(
    app: App, name: str, description: str | None, ingress: tuple[str, ...], egress: tuple[str, ...],
    rules_file: IO[str] | None, as_json: bool,
) -> None:
    """Create the security group NAME.

    \b
    Example:
      gpucloud security-group create lab --ingress tcp:22:203.0.113.0/24 \\
        --ingress tcp:8888-8890:10.8.0.0/16 --egress all::0.0.0.0/0
      gpucloud security-group create web --rules-file rules.json
    """
    body: dict[str, Any] = {"name": name, **rule_changes(ingress, egress, rules_file)}
    if description is not None:
        body["description"] = description
    created = app.client.create_security_group(body, idempotency_key=new_idempotency_key())
    emit(created, as_json, show_group)


@security_group.command("update")
@click.argument("group_ref", metavar="GROUP")
@click.option("--name", help="New name.")
@click.option("--description", help="New description.")
@click.option("--ingress", multiple=True, metavar="RULE",
              help="The new inbound rules, replacing them all (as for create).")
@click.option("--egress", multiple=True, metavar="RULE",
              help="The new outbound rules, replacing them all (as for create).")
@rules_file_option
@json_option
@pass_app
def update(
    app: App, group_ref: str, name: str | None, description: str | None, ingress: tuple[str, ...],
    egress: tuple[str, ...], rules_file: IO[str] | None, as_json: bool,
) -> None:
    """Change GROUP: every cluster using it follows in place. A rule list given replaces that list;
    one not given is kept (a --rules-file list [] empties it).

    \b
    Example:
      gpucloud security-group update lab --ingress tcp:22:0.0.0.0/0
    """
    changes = rule_changes(ingress, egress, rules_file)
    changes.update((k, v) for k, v in (("name", name), ("description", description)) if v is not None)
    if not changes:
        raise click.UsageError("nothing to change: see `gpucloud security-group update --help`")
    group = find_security_group(app.client, group_ref)
    emit(app.client.update_security_group(group["id"], changes), as_json, show_group)


@security_group.command("delete")
@click.argument("group_ref", metavar="GROUP")
@yes_option
@json_option
@pass_app
def delete(app: App, group_ref: str, yes: bool, as_json: bool) -> None:
    """Delete GROUP (refused while clusters use it). `--json` prints the group as it was.

    \b
    Example:
      gpucloud security-group delete lab --yes
    """
    group = find_security_group(app.client, group_ref)
    confirm(yes, f"Delete security group {group['name']} ({group['id']})?", refused="not deleted")
    app.client.delete_security_group(group["id"])
    emit(group, as_json, lambda _: note(f"Deleted security group {group['id']} ({group['name']})."))
