"""A project's credit standing as the API and the core see it, and the attach guard the core calls."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from backend.billing.clock import ensure_utc
from backend.billing.credits import CreditStanding, standing
from backend.billing.ledger import balance_micros
from backend.billing.settings import BillingSettings
from backend.domain.errors import ApiError
from backend.store.billing_models import BillingAccount


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
