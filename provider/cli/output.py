"""How results are shown: Rich tables with the lifecycle's status colours on a terminal, plain aligned
text otherwise (for grep and awk), and the API's JSON with `--json`. Progress and errors go to stderr so
stdout carries only the result."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any, TypeVar

from rich.console import Console
from rich.table import Table
from rich.text import Text

# The cluster lifecycle (PENDING ... FAILED), volume and node statuses, node health, Slurm node states and
# job states share these colours (a column named in STYLED_COLUMNS is coloured by its first word).
STATUS_STYLES = {
    "PENDING": "yellow",
    "PROVISIONING": "cyan",
    "CONFIGURING": "cyan",
    "CONTAINER_CREATING": "cyan",
    "CREATING": "cyan",
    "RUNNING": "bold green",
    "AVAILABLE": "bold green",
    "ATTACHED": "bold green",
    "PAUSED": "magenta",
    "DESTROYING": "dim",
    "DELETING": "dim",
    "DESTROYED": "dim",
    "DELETED": "dim",
    "FAILED": "bold red",
    "HEALTHY": "green",
    "DEGRADED": "bold yellow",
    "UNREACHABLE": "magenta",
    "REPAIRING": "cyan",
    "IDLE": "green",
    "ALLOCATED": "green",
    "MIXED": "green",
    "DRAIN": "yellow",
    "DOWN": "bold red",
    "COMPLETED": "dim",
    "UNKNOWN": "magenta",
}
STYLED_COLUMNS = frozenset({"STATUS", "HEALTH", "SLURM", "STATE"})

# A column: its header, and the row's member of that name or a function of the row.
Column = tuple[str, str | Callable[[Mapping[str, Any]], Any]]
T = TypeVar("T")


def stdout_console(min_width: int = 0) -> Console:
    """`min_width`: a table never has its ids cut to fit a narrow terminal (the terminal wraps instead)."""
    console = Console(highlight=False, soft_wrap=False)
    if console.width < min_width:
        console = Console(highlight=False, soft_wrap=False, width=min_width)
    return console


def stderr_console() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def is_terminal() -> bool:
    return sys.stdout.isatty()


def dumps_json(value: Any, indent: int = 2, level: int = 0) -> str:
    """JSON with the API's numbers exact (the client parses non-integral numbers as Decimal)."""
    pad, inner = " " * (indent * level), " " * (indent * (level + 1))
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        members = [
            f"{inner}{json.dumps(str(k))}: {dumps_json(v, indent, level + 1)}" for k, v in value.items()
        ]
        return "{\n" + ",\n".join(members) + f"\n{pad}}}"
    if isinstance(value, list | tuple):
        if not value:
            return "[]"
        items = [f"{inner}{dumps_json(v, indent, level + 1)}" for v in value]
        return "[\n" + ",\n".join(items) + f"\n{pad}]"
    return json.dumps(value)


def print_json(value: Any) -> None:
    sys.stdout.write(dumps_json(value) + "\n")
    sys.stdout.flush()


def cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value) or "-"
    return str(value)


def print_table(columns: Sequence[Column], rows: Iterable[Mapping[str, Any]], *, empty: str) -> None:
    """One row per item; status-like columns (STYLED_COLUMNS) are coloured on a terminal."""
    values = [[cell(_value(row, get)) for _, get in columns] for row in rows]
    if not values:
        stderr_console().print(empty)
        return
    headers = [name for name, _ in columns]
    widths = [max(len(h), *(len(r[i]) for r in values)) for i, h in enumerate(headers)]
    if not is_terminal():
        for line in [headers, *values]:
            sys.stdout.write("  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip() + "\n")
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    for header in headers:
        table.add_column(header, no_wrap=True)
    for line in values:
        cells = zip(headers, line, strict=True)
        table.add_row(*(styled_status(v) if h in STYLED_COLUMNS else Text(v) for h, v in cells))
    stdout_console(min_width=sum(widths) + 2 * len(widths)).print(table)


def _value(row: Mapping[str, Any], get: str | Callable[[Mapping[str, Any]], Any]) -> Any:
    return row.get(get) if isinstance(get, str) else get(row)


def styled_status(status: str) -> Text:
    return Text(status, style=STATUS_STYLES.get(status.split(" ")[0].upper(), ""))


def print_fields(fields: Sequence[tuple[str, Any]]) -> None:
    """A key/value summary of one object."""
    width = max(len(k) for k, _ in fields)
    if not is_terminal():
        for key, value in fields:
            sys.stdout.write(f"{(key + ':').ljust(width + 1)}  {cell(value)}\n")
        return
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    for key, value in fields:
        grid.add_row(key + ":", styled_status(cell(value)) if key == "Status" else Text(cell(value)))
    stdout_console().print(grid)


def emit(value: T, as_json: bool, show: Callable[[T], object]) -> None:
    """A command's answer: the API's JSON with `--json`, else `show(value)` for people."""
    if as_json:
        print_json(value)
    else:
        show(value)


def table_view(columns: Sequence[Column], *, empty: str = "") -> Callable[[Any], None]:
    """Show a list of objects, or one object as one row, as a table (`empty`: what says there are none)."""

    def show(value: Any) -> None:
        print_table(columns, value if isinstance(value, list) else [value], empty=empty)

    return show


def fields_view(members: Sequence[tuple[str, str]]) -> Callable[[Mapping[str, Any]], None]:
    """Show chosen members of an object as key/value lines: `[("Balance USD", "balance_usd"), ...]`."""
    return lambda value: print_fields([(label, value.get(name)) for label, name in members])


def counts_line(title: str, counts: Mapping[str, int]) -> str:
    """`Jobs: 1 running, 2 pending, ...`: the API's counters, in its order."""
    return f"{title}: " + ", ".join(f"{count} {state}" for state, count in counts.items())


def note(message: str) -> None:
    """A line for the person at the terminal (stderr: stdout stays parseable)."""
    stderr_console().print(Text(message))
