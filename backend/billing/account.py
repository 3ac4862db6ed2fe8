"""A project's credit standing as the API and the core see it, and the guards the core calls: admission
(creates and growth of an exhausted prepaid project) and attach."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.billing.clock import ensure_utc
from backend.billing.credits import CreditStanding, standing
from backend.billing.ledger import balance_micros
from backend.billing.money import micros_to_usd
from backend.billing.settings import BillingSettings
from backend.domain.errors import ApiError
from backend.store.billing_models import BillingAccount, LedgerEntry

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
    judged them (it records when the project ran out)."""
    settings = settings or BillingSettings()
    account = session.get(BillingAccount, project_id)
    prepaid = account is not None and account.prepaid
    stored = None if account is None else account.exhausted_since
    since = None if stored is None else ensure_utc(stored)
    return standing(
        prepaid=prepaid,
        balance_micros=balance_micros(session, project_id),
        exhausted_since=since,
        now=now,
        policy=settings.credit_policy,
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


def check_admission_allowed(
    session: Session, *, project_id: str, what: str, field: str | None = None
) -> None:
    """Raise 402 `credits_exhausted` before a prepaid project with nothing left takes more capacity
    (`what`: "creating a cluster", "scaling up", "creating a volume", "growing a volume").

    Exhausted here: the balance is zero or below, or the metering job judged the project exhausted
    (counting usage not charged yet) and no credits were added since. Postpaid projects pass.
    """
    account = session.get(BillingAccount, project_id)
    if account is None or not account.prepaid:
        return
    balance = balance_micros(session, project_id)
    since = None if account.exhausted_since is None else ensure_utc(account.exhausted_since)
    if balance > 0 and (since is None or _granted_since(session, project_id, since)):
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


def _granted_since(session: Session, project_id: str, since: datetime) -> bool:
    latest = session.scalar(
        select(func.max(LedgerEntry.created_at)).where(
            LedgerEntry.project_id == project_id, LedgerEntry.entry_type == "grant"
        )
    )
    return latest is not None and ensure_utc(latest) >= since
