"""`gpucloud budget list|show|create|update|delete`: monthly spending budgets, with alert thresholds and
an action at 100 %."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

import click

from provider.cli.app import App, confirm, json_option, one_named, pass_app, yes_option
from provider.cli.output import emit, note, print_fields, print_table, table_view
from provider.client import GpuCloudClient, new_idempotency_key

ACTIONS = ["notify", "block_new"]


def find_budget(client: GpuCloudClient, ref: str) -> dict[str, Any]:
    """A budget by id (bud_...) or by name."""
    if ref.startswith("bud_"):
        return client.get_budget(ref)
    return one_named([b for b in client.list_budgets() if b["name"] == ref], "budget", ref, "budget list")


def usd(value: Any) -> str | None:
    """An exact amount as people write it: cents, unless the API's micro-dollars carry more."""
    if value is None:
        return None
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        return str(value)
    cents = amount.quantize(Decimal("0.01"))
    return f"{cents:f}" if cents == amount else f"{amount.normalize():f}"


def spent_percent(b: Mapping[str, Any]) -> str:
    try:
        return f"{Decimal(str(b['spent_usd'])) / Decimal(str(b['amount_usd'])) * 100:.0f}%"
    except (InvalidOperation, ArithmeticError, KeyError):
        return "-"


def scope(b: Mapping[str, Any]) -> str:
    found = b.get("label_filter")
    return f"{found['key']}={found['value']}" if found else "project"


BUDGET_COLUMNS = [
    ("ID", lambda b: b["id"]),
    ("NAME", lambda b: b["name"]),
    ("APPLIES TO", scope),
    ("PERIOD", lambda b: b.get("period")),
    ("SPENT USD", lambda b: usd(b.get("spent_usd"))),
    ("AMOUNT USD", lambda b: usd(b["amount_usd"])),
    ("USED", spent_percent),
    ("ACTION", lambda b: b.get("action")),
]
ALERT_COLUMNS = [
    ("PERIOD", lambda a: a["period"]),
    ("THRESHOLD", lambda a: f"{a['threshold_percent']}%"),
    ("SPENT USD", lambda a: usd(a["spent_usd"])),
    ("RAISED AT", lambda a: a["raised_at"]),
]


def show_budget(b: Mapping[str, Any]) -> None:
    """The budget, this month's spend against its amount, then its alerts."""
    print_fields([
        ("ID", b["id"]), ("Name", b["name"]), ("Applies to", scope(b)), ("Period", b.get("period")),
        ("Spent", f"{usd(b.get('spent_usd'))} of {usd(b['amount_usd'])} USD ({spent_percent(b)})"),
        ("Thresholds", [f"{t}%" for t in b.get("thresholds") or []]), ("At 100 %", b.get("action")),
    ])
    click.echo()
    print_table(ALERT_COLUMNS, b.get("alerts") or [], empty="No alerts raised.")


def parse_label_filter(text: str) -> dict[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise click.BadParameter(f"{text!r} is not KEY=VALUE", param_hint="--label-filter")
    return {"key": key, "value": value}


amount_option = click.option(
    "--amount", "amount_usd", metavar="USD", help="Monthly amount in USD (e.g. 5000.00)."
)
label_filter_option = click.option(
    "--label-filter", metavar="KEY=VALUE",
    help="Only clusters with this label (default: the whole project; a team-scoped key's own label).",
)
threshold_option = click.option(
    "--threshold", "thresholds", multiple=True, type=click.IntRange(min=1), metavar="PERCENT",
    help="Alert at this percent of the amount (repeatable; the API's default: 50, 80, 100).",
)
action_option = click.option(
    "--action", type=click.Choice(ACTIONS),
    help="At 100 %: notify (alert only) or block_new (new clusters under the budget are refused).",
)


@click.group()
def budget() -> None:
    """Manage monthly spending budgets: alerts at thresholds, and optionally no new clusters at 100 %.

    \b
    Example:
      gpucloud budget create nlp --amount 5000 --label-filter team=nlp --action block_new
    """


@budget.command("list")
@json_option
@pass_app
def list_budgets(app: App, as_json: bool) -> None:
    """List the budgets with this month's spend.

    \b
    Example:
      gpucloud budget list
    """
    empty = "No budgets: gpucloud budget create --help"
    emit(app.client.list_budgets(), as_json, table_view(BUDGET_COLUMNS, empty=empty))


@budget.command("show")
@click.argument("budget_ref", metavar="BUDGET")
@json_option
@pass_app
def show(app: App, budget_ref: str, as_json: bool) -> None:
    """Show BUDGET (id or name): spend against the amount this month, and the alerts raised.

    \b
    Example:
      gpucloud budget show nlp
    """
    emit(find_budget(app.client, budget_ref), as_json, show_budget)


@budget.command("create")
@click.argument("name")
@click.option("--amount", "amount_usd", metavar="USD", required=True,
              help="Monthly amount in USD (e.g. 5000.00).")
@label_filter_option
@threshold_option
@action_option
@json_option
@pass_app
def create(
    app: App, name: str, amount_usd: str, label_filter: str | None, thresholds: tuple[int, ...],
    action: str | None, as_json: bool,
) -> None:
    """Create the monthly budget NAME.

    \b
    Example:
      gpucloud budget create nlp --amount 5000 --label-filter team=nlp --threshold 80 --threshold 100
    """
    body: dict[str, Any] = {"name": name, "amount_usd": amount_usd}
    if label_filter is not None:
        body["label_filter"] = parse_label_filter(label_filter)
    if thresholds:
        body["thresholds"] = list(thresholds)
    if action is not None:
        body["action"] = action
    emit(app.client.create_budget(body, idempotency_key=new_idempotency_key()), as_json, show_budget)


@budget.command("update")
@click.argument("budget_ref", metavar="BUDGET")
@click.option("--name", help="New name.")
@amount_option
@label_filter_option
@click.option("--project-wide", is_flag=True, help="Drop the label filter: the whole project's spend.")
@threshold_option
@action_option
@json_option
@pass_app
def update(
    app: App, budget_ref: str, name: str | None, amount_usd: str | None, label_filter: str | None,
    project_wide: bool, thresholds: tuple[int, ...], action: str | None, as_json: bool,
) -> None:
    """Change BUDGET; what is not given is kept (--threshold replaces the whole list).

    \b
    Example:
      gpucloud budget update nlp --amount 8000 --action notify
    """
    if label_filter is not None and project_wide:
        raise click.UsageError("--label-filter and --project-wide: give one")
    changes: dict[str, Any] = {
        k: v for k, v in (("name", name), ("amount_usd", amount_usd), ("action", action)) if v is not None
    }
    if label_filter is not None:
        changes["label_filter"] = parse_label_filter(label_filter)
    if project_wide:
        changes["label_filter"] = None
    if thresholds:
        changes["thresholds"] = list(thresholds)
    if not changes:
        raise click.UsageError("nothing to change: see `gpucloud budget update --help`")
    found = find_budget(app.client, budget_ref)
    emit(app.client.update_budget(found["id"], changes), as_json, show_budget)


@budget.command("delete")
@click.argument("budget_ref", metavar="BUDGET")
@yes_option
@json_option
@pass_app
def delete(app: App, budget_ref: str, yes: bool, as_json: bool) -> None:
    """Delete BUDGET (its alerts go with it). `--json` prints it as it was.

    \b
    Example:
      gpucloud budget delete nlp --yes
    """
    found = find_budget(app.client, budget_ref)
    confirm(yes, f"Delete budget {found['name']} ({found['id']})?", refused="not deleted")
    app.client.delete_budget(found["id"])
    emit(found, as_json, lambda _: note(f"Deleted budget {found['id']} ({found['name']})."))
