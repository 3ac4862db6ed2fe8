"""A project's billing mode and credit standing as the API and the core see them, and the guards the core
calls: admission (creates and growth of a prepaid project: nothing past the balance) and attach."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.billing.credits import CreditStanding, standing
from backend.billing.estimate import CostEstimate, estimate_cluster_cost
from backend.billing.ledger import balance_micros
from backend.billing.money import SECONDS_PER_HOUR, micros_to_usd, prorate_micros, usd_to_micros
from backend.billing.pricing import PriceBook
from backend.billing.settings import BillingSettings, configured, credit_policy
from backend.domain.clock import ensure_utc
from backend.domain.errors import ApiError
from backend.store.billing_models import BillingAccount, CapacityReservation, LedgerEntry, Reservation
from backend.store.models import Cluster, Project

PREPAID, POSTPAID = "prepaid", "postpaid"
BILLING_MODES = (PREPAID, POSTPAID)

ADD_CREDITS = (
    "an admin adds credits with POST /v1/billing/credits (or `gpucloud-backend add-credits --project NAME "
    "--amount-usd N`)"
)


class CreditsExhausted(ApiError):
    status, code, title = 402, "credits_exhausted", "Payment Required"


def credit_standing(
    session: Session, *, project_id: str, now: datetime, settings: BillingSettings | None = None
) -> CreditStanding:
    """Balance and exhaustion measures in force for the project at `now`, as the metering job last
    judged them (it records when the project ran out). `settings`: the process's billing settings
    unless given."""
    settings = settings or configured()
    account = session.get(BillingAccount, project_id)
    prepaid = billing_mode(session, project_id) == PREPAID
    stored = None if account is None else account.exhausted_since
    since = None if stored is None else ensure_utc(stored)
    return standing(
        prepaid=prepaid,
        balance_micros=balance_micros(session, project_id),
        exhausted_since=since,
        now=now,
        policy=credit_policy(settings),
    )


def check_attach_allowed(
    session: Session, *, project_id: str, now: datetime, settings: BillingSettings | None = None
) -> None:
    """Raise 402 `credits_exhausted` once a project out of credits is past the attach grace period.

    The core calls this before attaching a volume to a cluster.
    """
    current = credit_standing(session, project_id=project_id, now=now, settings=settings)
    if current.refuse_attach:
        raise CreditsExhausted(
            "the project has run out of credits; attaching storage is refused until credits are added "
            f"(volume data is kept until {current.volume_data_deadline:%Y-%m-%dT%H:%M:%SZ})",
            field="volume_id",
        )


class InsufficientCredits(ApiError):
    status, code, title = 402, "insufficient_credits", "Payment Required"


def billing_mode(session: Session, project_id: str) -> str:
    """prepaid | postpaid, as an operator set it (`set-billing-mode`); never inferred from grants."""
    mode = session.scalar(select(Project.billing_mode).where(Project.id == project_id))
    return mode or POSTPAID


def set_billing_mode(session: Session, *, project_id: str, mode: str, now: datetime) -> str:
    """Set the project's billing mode; returns the previous one. Leaving prepaid ends any exhaustion
    (the next metering pass resumes what it paused: postpaid projects are never paused)."""
    if mode not in BILLING_MODES:
        raise ValueError(f"billing mode must be one of {', '.join(BILLING_MODES)}, got {mode!r}")
    project = session.get(Project, project_id)
    if project is None:
        raise ValueError(f"no project {project_id!r}")
    previous, project.billing_mode = project.billing_mode, mode
    account = session.get(BillingAccount, project_id)
    if mode == POSTPAID and account is not None and account.exhausted_since is not None:
        account.exhausted_since, account.updated_at = None, ensure_utc(now)
    session.flush()
    return previous


def committed_micros(session: Session, project_id: str) -> int:
    """Up-front charges admitted but not charged yet: capacity reservations whose term has not started
    and reserved clusters whose term starts when they first run. Admission counts them against the
    balance, so two bookings never share the same credits."""
    total = int(session.scalar(
        select(func.coalesce(func.sum(CapacityReservation.upfront_micros), 0)).where(
            CapacityReservation.project_id == project_id,
            CapacityReservation.charged_at.is_(None),
            CapacityReservation.deleted_at.is_(None),
        )
    ) or 0)
    started = select(Reservation.cluster_id).where(Reservation.project_id == project_id)
    waiting = session.scalars(select(Cluster).where(
        Cluster.project_id == project_id,
        Cluster.billing_type == "reserved",
        Cluster.deletion_requested_at.is_(None),
        Cluster.status.not_in(("DESTROYED", "FAILED")),
        Cluster.id.not_in(started),
    ))
    for cluster in waiting:
        spec = {"instance_type": cluster.instance_type, "region": cluster.region,
                "node_count": cluster.node_count,
                "billing": {"type": "reserved", "duration_days": cluster.billing_duration_days}}
        upfront = estimate_cluster_cost(spec, None).upfront_usd
        total += 0 if upfront is None else usd_to_micros(upfront)
    return total


def first_charge_micros(new: CostEstimate, old: CostEstimate | None = None) -> int:
    """What admitting `new` (in place of `old`) commits up front: a larger reserved term's up-front
    charge, else the first billing slice (an hour) of the added hourly cost at its most."""
    upfront = _micros(new.upfront_usd) - (0 if old is None else _micros(old.upfront_usd))
    if upfront > 0:
        return upfront
    before = Decimal(0) if old is None else old.max_hourly_usd
    return usd_to_micros(new.max_hourly_usd - before) if new.max_hourly_usd > before else 0


def storage_first_charge_micros(prices: PriceBook, *, region: str, added_tib: int) -> int:
    """The first billing slice (an hour) of `added_tib` more TiB of storage in `region` (a new volume's
    size, or what a resize adds), as the storage meter prices a full hour; 0 when nothing is added."""
    return prorate_micros(prices.storage_tib_hour(region), max(added_tib, 0), SECONDS_PER_HOUR)


def reserved_ip_first_charge_micros(prices: PriceBook, *, region: str, attached: bool) -> int:
    """The first billing slice (an hour) of a new reserved IP in `region`, at the attached rate when it
    is reserved onto a cluster (`attached`), as the reserved IP meter prices a full hour."""
    return prorate_micros(prices.reserved_ip_hour(region, attached=attached), 1, SECONDS_PER_HOUR)


def _micros(usd: Decimal | None) -> int:
    return 0 if usd is None else usd_to_micros(usd)


def check_admission_allowed(
    session: Session,
    *,
    project_id: str,
    what: str,
    field: str | None = None,
    charge_micros: int = 0,
) -> None:
    """Before a prepaid project takes more capacity (`what`: "creating a cluster", "scaling up", ...):
    402 `credits_exhausted` when it has nothing left, 402 `insufficient_credits` when the balance (less
    up-front charges admitted but not charged yet) does not cover `charge_micros`, the up-front part
    of what is asked (a term's up-front charge, the first billing slice). Postpaid projects pass.

    Exhausted here: the balance is zero or below, or the metering job judged the project exhausted
    (counting usage not charged yet) and no credits were added since.
    """
    if billing_mode(session, project_id) != PREPAID:
        return
    account = session.get(BillingAccount, project_id)
    balance = balance_micros(session, project_id)
    stored = None if account is None else account.exhausted_since
    since = None if stored is None else ensure_utc(stored)
    if balance > 0 and (since is None or _granted_since(session, project_id, since)):
        if charge_micros > 0:
            _check_covered(session, project_id=project_id, balance=balance, charge=charge_micros,
                           what=what, field=field)
        return
    balance_usd = str(micros_to_usd(balance))
    raise CreditsExhausted(
        f"the project has run out of prepaid credits (balance {balance_usd} USD); {what} is refused until "
        f"credits are added: {ADD_CREDITS}",
        field=field,
        extra={
            "balance_usd": balance_usd,
            "exhausted_since": None if since is None else since.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "add_credits": "POST /v1/billing/credits",
        },
    )


def _check_covered(
    session: Session, *, project_id: str, balance: int, charge: int, what: str, field: str | None
) -> None:
    committed = committed_micros(session, project_id)
    available = balance - committed
    if charge <= available:
        return
    balance_usd, charge_usd = str(micros_to_usd(balance)), str(micros_to_usd(charge))
    pending = (f", of which {micros_to_usd(committed)} USD is committed to up-front charges not taken yet"
               if committed else "")
    raise InsufficientCredits(
        f"{what} charges {charge_usd} USD up front, more than the prepaid balance covers (balance "
        f"{balance_usd} USD{pending}); {ADD_CREDITS}",
        field=field,
        extra={
            "balance_usd": balance_usd,
            "charge_usd": charge_usd,
            "committed_usd": str(micros_to_usd(committed)),
            "add_credits": "POST /v1/billing/credits",
        },
    )


def _granted_since(session: Session, project_id: str, since: datetime) -> bool:
    latest = session.scalar(
        select(func.max(LedgerEntry.created_at)).where(
            LedgerEntry.project_id == project_id, LedgerEntry.entry_type == "grant"
        )
    )
    return latest is not None and ensure_utc(latest) >= since
