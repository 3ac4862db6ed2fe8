"""Prepaid terms at plan time: what destroying or replacing a reserved `gpucloud_gpu_cluster` or a
`gpucloud_reservation` forfeits. A term is charged in full up front and never refunded, so a plan that
ends one early says how many days and how much of the prepaid amount are lost."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from provider.cty import AttributePath, is_unknown
from provider.framework import Context, parse_instant, root

SECONDS_PER_DAY = 86400


def _usd(value: Decimal, quantum: str = "0.01") -> str:
    return f"{value.quantize(Decimal(quantum), rounding=ROUND_HALF_UP):,}"


def warn_term_forfeited(
    ctx: Context,
    term: Mapping[str, Any],
    *,
    ending: str,
    after: str,
    path: AttributePath,
    now: dt.datetime | None = None,
) -> None:
    """A warning when `ending` ("Destroying cluster cls_1") ends a paid term (`starts_at`, `ends_at`,
    `upfront_cost_usd`) that has time left: the days left and the share of the charge forfeited, then
    `after` (what the user can do instead)."""
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
        f"{ending} ends its reserved term early: {days} days are left (until {term.get('ends_at')}) and "
        f"about {_usd(forfeited, '1')} USD of the {_usd(Decimal(paid))} USD paid up front is forfeited "
        f"(terms are not refunded). {after}",
        path,
    )


def warn_if_term_forfeited(
    ctx: Context, state: Mapping[str, Any], action: str, now: dt.datetime | None = None
) -> None:
    """A warning when `action` ("Destroying", "Replacing") ends a reserved cluster's term that has time
    left."""
    term = state.get("reservation")
    if not isinstance(term, Mapping):
        return
    warn_term_forfeited(
        ctx, term, ending=f"{action} cluster {state.get('id')}", path=root("reservation"), now=now,
        after="A replacement cluster starts a new term, charged again in full when it first runs. A "
        "`gpucloud_reservation` drawn with `reservation_id` keeps its term across replacements.",
    )


def warn_if_reservation_forfeited(
    ctx: Context, state: Mapping[str, Any], action: str, now: dt.datetime | None = None
) -> None:
    """A warning when `action` ("Destroying", "Replacing") ends a `gpucloud_reservation` whose term has
    started and has time left (one deleted before its start is never charged: nothing is lost)."""
    start = parse_instant(state.get("starts_at"))
    now = now or dt.datetime.now(dt.UTC)
    if start is None or now < start:
        return
    after = (
        "A replacement reservation is a new booking, charged again in full at its start; name and labels "
        "change in place without one."
        if action == "Replacing"
        else "Keep it to the end of its term to use what is paid for."
    )
    warn_term_forfeited(ctx, state, ending=f"{action} reservation {state.get('id')}", after=after,
                        path=root("upfront_cost_usd"), now=now)
