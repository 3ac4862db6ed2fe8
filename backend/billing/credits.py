"""Credit balance rules, pure: what must happen to a project whose prepaid credits ran out.

Only prepaid projects (`projects.billing_mode`, set by an operator, never inferred from a grant) are
subject to these rules; a postpaid project is invoiced monthly, its credits reduce the invoice, and it is
never paused. Clusters on paid capacity (reserved terms, drawn capacity reservations) are never paused.

Timeline once the balance drops to zero or below at `exhausted_at` (every delay configurable):
- at once: on-demand clusters are paused (metering stops); clusters on paid capacity run to its end;
- + `decommission_after`: on-demand clusters still paused are decommissioned;
- + `attach_refused_after`: attaching a volume to a cluster is refused;
- + `volume_data_kept_for`: the volume data deadline; until then volumes and their data are kept.
Adding credits that bring the balance above zero ends the exhaustion (paused clusters may be resumed).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from backend.domain.clock import ensure_utc


@dataclass(frozen=True)
class CreditPolicy:
    decommission_after: timedelta = timedelta(hours=72)
    attach_refused_after: timedelta = timedelta(hours=24)
    volume_data_kept_for: timedelta = timedelta(days=30)

    def __post_init__(self) -> None:
        for name in ("decommission_after", "attach_refused_after", "volume_data_kept_for"):
            if getattr(self, name) < timedelta(0):
                raise ValueError(f"{name} must not be negative")


@dataclass(frozen=True)
class CreditStanding:
    prepaid: bool
    balance_micros: int
    exhausted_since: datetime | None
    pause_on_demand: bool
    decommission_on_demand: bool
    refuse_attach: bool
    decommission_at: datetime | None
    attach_refused_at: datetime | None
    volume_data_deadline: datetime | None

    @property
    def exhausted(self) -> bool:
        return self.exhausted_since is not None


def is_exhausted(*, prepaid: bool, balance_micros: int) -> bool:
    """A prepaid project with nothing left (zero or overdrawn)."""
    return prepaid and balance_micros <= 0


def next_exhausted_since(
    *, prepaid: bool, balance_micros: int, exhausted_since: datetime | None, now: datetime
) -> datetime | None:
    """The exhaustion start to store after looking at the balance `now`: kept, started, or cleared."""
    if not is_exhausted(prepaid=prepaid, balance_micros=balance_micros):
        return None
    return exhausted_since if exhausted_since is not None else ensure_utc(now)


def assess(
    *,
    prepaid: bool,
    balance_micros: int,
    exhausted_since: datetime | None,
    now: datetime,
    policy: CreditPolicy,
) -> CreditStanding:
    """Which exhaustion measures apply at `now`, judging exhaustion from `balance_micros` (the job passes
    the balance minus usage accrued but not charged yet) and `exhausted_since` as stored."""
    since = next_exhausted_since(
        prepaid=prepaid, balance_micros=balance_micros, exhausted_since=exhausted_since, now=now
    )
    return standing(
        prepaid=prepaid, balance_micros=balance_micros, exhausted_since=since, now=now, policy=policy
    )


def standing(
    *,
    prepaid: bool,
    balance_micros: int,
    exhausted_since: datetime | None,
    now: datetime,
    policy: CreditPolicy,
) -> CreditStanding:
    """The measures in force at `now` for a project exhausted since `exhausted_since` (None: not)."""
    if exhausted_since is None:
        return CreditStanding(prepaid, balance_micros, None, False, False, False, None, None, None)
    now = ensure_utc(now)
    since = ensure_utc(exhausted_since)
    decommission_at = since + policy.decommission_after
    attach_refused_at = since + policy.attach_refused_after
    return CreditStanding(
        prepaid=prepaid,
        balance_micros=balance_micros,
        exhausted_since=since,
        pause_on_demand=True,
        decommission_on_demand=now >= decommission_at,
        refuse_attach=now >= attach_refused_at,
        decommission_at=decommission_at,
        attach_refused_at=attach_refused_at,
        volume_data_deadline=since + policy.volume_data_kept_for,
    )
