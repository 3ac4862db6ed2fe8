"""Project quotas, pure: the limits, what a project holds, and the first limit a change would pass.

A project holds every cluster whose deletion has not been requested: its GPUs (node_count x GPUs per
node) and its hourly cost (the cluster's `estimated_hourly_cost_usd`). A null limit is no limit. A
change is refused only when it adds to a figure and the sum passes the limit: a quota lowered below
what a project holds never blocks changes that do not add (labels, scale-downs, deletes).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from backend.domain.errors import Forbidden

MICROS = Decimal(1_000_000)
# The quotas in the order they are checked and shown; the names are the API's and the CLI's.
QUOTA_NAMES = ("max_clusters", "max_gpus", "max_hourly_usd")


@dataclass(frozen=True)
class Figures:
    """Clusters, GPUs and micro-dollars per hour: what a project holds, or what a change adds."""

    clusters: int = 0
    gpus: int = 0
    hourly_micros: int = 0

    def __add__(self, other: Figures) -> Figures:
        return Figures(self.clusters + other.clusters, self.gpus + other.gpus,
                       self.hourly_micros + other.hourly_micros)

    def __sub__(self, other: Figures) -> Figures:
        return Figures(self.clusters - other.clusters, self.gpus - other.gpus,
                       self.hourly_micros - other.hourly_micros)


@dataclass(frozen=True)
class Limits:
    """A project's quotas (None: no limit)."""

    max_clusters: int | None = None
    max_gpus: int | None = None
    max_hourly_micros: int | None = None

    @property
    def unlimited(self) -> bool:
        return self.max_clusters is None and self.max_gpus is None and self.max_hourly_micros is None


def usd(micros: int) -> Decimal:
    """Micro-dollars as USD, trailing zeros dropped (`12.5`, `98`)."""
    value = (Decimal(micros) / MICROS).normalize()
    return value.quantize(Decimal(1)) if value == value.to_integral_value() else value


class QuotaExceeded(Forbidden):
    code = "quota_exceeded"


def first_exceeded(limits: Limits, held: Figures, added: Figures) -> QuotaExceeded | None:
    """The refusal for the first quota that `added` (on top of `held`) would pass, or None."""
    checks = (
        ("max_clusters", limits.max_clusters, held.clusters, added.clusters, "clusters", None),
        ("max_gpus", limits.max_gpus, held.gpus, added.gpus, "GPUs", "node_count"),
        ("max_hourly_usd", limits.max_hourly_micros, held.hourly_micros, added.hourly_micros, "USD per hour",
         "node_count"),
    )
    for name, limit, used, more, unit, field in checks:
        if limit is None or more <= 0 or used + more <= limit:
            continue
        money = name == "max_hourly_usd"

        def shown(value: int, money: bool = money) -> object:
            return str(usd(value)) if money else value

        detail = (
            f"the project's quota {name} is {shown(limit)} {unit}: {shown(used)} in use, and this change "
            f"adds {shown(more)} ({shown(used + more)} in all). Lower node_count, delete another cluster, or "
            "ask the cloud's operator to raise the quota (GET /v1/quotas shows quotas and use)"
        )
        return QuotaExceeded(detail, field=field, extra={
            "quota": name, "limit": shown(limit), "in_use": shown(used), "requested": shown(more),
        })
    return None
