"""The reserved term of a `gpucloud_gpu_cluster` at plan time: what destroying or replacing the cluster
forfeits. A reserved term is charged in full when the cluster first runs and never refunded, so a plan
that ends the cluster early says how many days and how much of the prepaid amount are lost."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from provider.cty import is_unknown
from provider.framework import Context, parse_instant, root

SECONDS_PER_DAY = 86400


def _usd(value: Decimal, quantum: str = "0.01") -> str:
    return f"{value.quantize(Decimal(quantum), rounding=ROUND_HALF_UP):,}"


def warn_if_term_forfeited(
    ctx: Context, state: Mapping[str, Any], action: str, now: dt.datetime | None = None
) -> None:
    """A warning when `action` ("Destroying", "Replacing") ends a reserved term that has time left."""
    term = state.get("reservation")
    if not isinstance(term, Mapping):
        return
    start, end = parse_instant(term.get("starts_at")), parse_instant(term.get("ends_at"))
    paid = term.get("upfront_cost_usd")
    if start is None or end is None or paid is None or is_unknown(paid) or end <= start:
        return
    now = now or dt.datetime.now(dt.UTC)
    left = (end - max(now, start)).total_seconds()
    if left <= 0:
        return
    forfeited = Decimal(paid) * Decimal(left) / Decimal((end - start).total_seconds())
    days = Decimal(left / SECONDS_PER_DAY).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP)
    ctx.warning(
        "Reserved Term Forfeited",
        f"{action} cluster {state.get('id')} ends its reserved term early: {days} days are left (until "
        f"{term.get('ends_at')}) and about {_usd(forfeited, '1')} USD of the {_usd(Decimal(paid))} USD "
        "paid up front is forfeited (terms are not refunded). A replacement cluster starts a new term, "
        "charged again in full when it first runs. A `gpucloud_reservation` drawn with `reservation_id` "
        "keeps its term across replacements.",
        root("reservation"),
    )
