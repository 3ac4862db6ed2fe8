"""Chargeback: a project's usage lines summed per team label, per cluster or per day, with the total.

Every line falls in exactly one group (a line without the label falls in the group with key null), so
the groups always add up to the total of the same lines. Labels are the line's own: those of its object
(cluster, volume, reserved IP, reservation) when it was charged, so a relabel never moves past spend.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.billing.money import micros_to_usd
from backend.billing.reports import UsageFilter, usage_query
from backend.domain.clock import ensure_utc
from backend.store.billing_models import UsageRecord
from backend.store.models import Cluster

LABEL_KEY = r"[a-z0-9]([a-z0-9._/-]{0,61}[a-z0-9])?"
GROUP_BY_PATTERN = rf"^(cluster|day|label:{LABEL_KEY})$"
_GROUP_BY = re.compile(GROUP_BY_PATTERN)
GROUP_BY_DOC = "`label:<key>` (e.g. `label:team`), `cluster` or `day` (UTC date of the line's start)"


@dataclass(frozen=True)
class UsageGroup:
    key: str | None  # the label value, cluster id or YYYY-MM-DD; None: lines without one
    name: str | None  # the cluster's name (group_by=cluster), else None
    amount_micros: int
    line_count: int


@dataclass(frozen=True)
class UsageGroups:
    group_by: str
    groups: list[UsageGroup]
    total_micros: int
    line_count: int


def valid_group_by(value: str) -> bool:
    return _GROUP_BY.match(value) is not None


def group_usage(session: Session, *, project_id: str, filters: UsageFilter, group_by: str) -> UsageGroups:
    """The project's usage lines matching `filters`, summed per group (largest amount first)."""
    if not valid_group_by(group_by):
        raise ValueError(f"bad group_by {group_by!r}")
    rows = session.execute(
        usage_query(project_id, filters).with_only_columns(
            UsageRecord.cluster_id, UsageRecord.period_start, UsageRecord.amount_micros, UsageRecord.labels
        )
    ).all()
    names = _cluster_names(session, project_id, {r.cluster_id for r in rows if r.cluster_id}
                           if group_by == "cluster" else set())
    label = group_by.removeprefix("label:") if group_by.startswith("label:") else None
    sums: dict[str | None, list[int]] = {}
    for cluster_id, period_start, amount, labels in rows:
        if group_by == "day":
            key: str | None = ensure_utc(period_start).date().isoformat()
        elif group_by == "cluster":
            key = cluster_id
        else:
            key = (labels or {}).get(label) if label is not None else None
        totals = sums.setdefault(key, [0, 0])
        totals[0] += int(amount)
        totals[1] += 1
    groups = [
        UsageGroup(
            key=key,
            name=names.get(key) if group_by == "cluster" and key else None,
            amount_micros=amount,
            line_count=count,
        )
        for key, (amount, count) in sums.items()
    ]
    groups.sort(key=lambda g: (-g.amount_micros, g.key is None, g.key or ""))
    return UsageGroups(
        group_by=group_by,
        groups=groups,
        total_micros=sum(g.amount_micros for g in groups),
        line_count=len(rows),
    )


def _cluster_names(session: Session, project_id: str, ids: set[str]) -> dict[str, str]:
    """Names of the clusters the lines name (deleted clusters keep their rows)."""
    if not ids:
        return {}
    query = select(Cluster.id, Cluster.name).where(
        Cluster.project_id == project_id, Cluster.id.in_(sorted(ids))
    )
    return {row.id: row.name for row in session.execute(query)}


def groups_view(result: UsageGroups) -> dict[str, object]:
    """The grouped usage as the API returns it (exact decimal strings)."""
    return {
        "group_by": result.group_by,
        "groups": [
            {
                "key": g.key,
                "name": g.name,
                "amount_usd": str(micros_to_usd(g.amount_micros)),
                "line_count": g.line_count,
            }
            for g in result.groups
        ],
        "total_usd": str(micros_to_usd(result.total_micros)),
        "line_count": result.line_count,
    }


def groups_csv(result: UsageGroups) -> str:
    """One CSV row per group (`key` empty for lines without one); RFC 4180 quoting."""
    return _csv(
        ["group_by", "key", "name", "amount_usd", "line_count"],
        (
            [result.group_by, g.key or "", g.name or "", str(micros_to_usd(g.amount_micros)), g.line_count]
            for g in result.groups
        ),
    )


USAGE_CSV_COLUMNS = (
    "id",
    "kind",
    "resource_type",
    "resource_id",
    "cluster_id",
    "region",
    "instance_type",
    "period_start",
    "period_end",
    "seconds",
    "units",
    "unit_price_usd",
    "amount_usd",
)


def lines_csv(items: Sequence[dict[str, object]]) -> str:
    """Usage line items (as `reports.usage_item` builds them) as CSV."""
    return _csv(
        list(USAGE_CSV_COLUMNS),
        ([_cell(item.get(column)) for column in USAGE_CSV_COLUMNS] for item in items),
    )


def _cell(value: object) -> object:
    if value is None:
        return ""
    isoformat = getattr(value, "isoformat", None)
    return isoformat() if callable(isoformat) else value


def _csv(header: list[str], rows: Iterable[Sequence[object]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue()
