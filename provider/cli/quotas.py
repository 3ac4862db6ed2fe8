"""`gpucloud quota list|show`: the project's limits and what it holds (read-only: the cloud's operator
sets them with `gpucloud-backend set-quota`, never through an API key)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click

from provider.cli.app import App, json_option, pass_app
from provider.cli.budgets import usd
from provider.cli.output import emit, print_fields, print_table

QUOTA_ROWS = [("Clusters", "clusters_in_use", "max_clusters"), ("GPUs", "gpus_in_use", "max_gpus"),
              ("USD/hour", "hourly_usd_in_use", "max_hourly_usd")]


def limit_text(row: Mapping[str, Any]) -> Any:
    return "no limit" if row["limit"] is None else row["limit"]


QUOTA_COLUMNS = [("QUOTA", lambda q: q["quota"]), ("IN USE", lambda q: q["in_use"]), ("LIMIT", limit_text)]


def quota_rows(quotas: Mapping[str, Any]) -> list[dict[str, Any]]:
    money = {"hourly_usd_in_use", "max_hourly_usd"}
    return [{"quota": label, "in_use": shown(quotas.get(used), used in money),
             "limit": shown(quotas.get(limit), limit in money)} for label, used, limit in QUOTA_ROWS]


def shown(value: Any, is_money: bool) -> Any:
    return usd(value) if is_money else value


@click.group()
def quota() -> None:
    """The project's quotas and what it holds now (read-only: the cloud's operator sets them).

    \b
    Example:
      gpucloud quota list
    """


@quota.command("list")
@json_option
@pass_app
def list_quotas(app: App, as_json: bool) -> None:
    """One row per quota: in use and the limit. `--json` prints the API's object.

    \b
    Example:
      gpucloud quota list
    """
    emit(app.client.get_quotas(), as_json, lambda q: print_table(QUOTA_COLUMNS, quota_rows(q), empty=""))


@quota.command("show")
@json_option
@pass_app
def show_quotas(app: App, as_json: bool) -> None:
    """The quotas as key/value lines, with when the operator last set one.

    \b
    Example:
      gpucloud quota show --json
    """

    def fields(q: Mapping[str, Any]) -> None:
        print_fields([
            *((row["quota"], f"{row['in_use']} in use / {limit_text(row)}")
              for row in quota_rows(q)),
            ("Updated", q.get("updated_at") or "never"),
        ])

    emit(app.client.get_quotas(), as_json, fields)
