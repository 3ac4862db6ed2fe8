"""The credit ledger and usage records: idempotent, append-only writes and the balance they add up to."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from backend.billing.clock import ensure_utc
from backend.store.billing_models import BillingAccount, LedgerEntry, UsageRecord

_IN_CHUNK = 500


def existing_keys(
    session: Session, model: type[UsageRecord] | type[LedgerEntry], keys: Iterable[str]
) -> set[str]:
    """Which of `keys` are already stored in `model`'s table."""
    wanted = list(dict.fromkeys(keys))
    found: set[str] = set()
    for i in range(0, len(wanted), _IN_CHUNK):
        chunk = wanted[i : i + _IN_CHUNK]
        found.update(session.scalars(select(model.idempotency_key).where(model.idempotency_key.in_(chunk))))
    return found


def charge_usage(session: Session, records: Sequence[UsageRecord], *, now: datetime) -> list[UsageRecord]:
    """Store the usage records not stored yet and debit each one's amount; returns the new ones.

    Each record goes in under a savepoint so a concurrent job that stored the same key first makes this
    one skip it (unique key) instead of failing the whole run. Nothing is committed here: the caller's
    transaction makes the record and its debit land together or not at all.
    """
    done = existing_keys(session, UsageRecord, (r.idempotency_key for r in records))
    charged: list[UsageRecord] = []
    for record in records:
        if record.idempotency_key in done:
            continue
        done.add(record.idempotency_key)
        try:
            with session.begin_nested():
                session.add(record)
                session.flush()
                if record.amount_micros:
                    session.add(
                        LedgerEntry(
                            idempotency_key=f"charge:{record.idempotency_key}",
                            project_id=record.project_id,
                            entry_type="charge",
                            amount_micros=-record.amount_micros,
                            usage_record_id=record.id,
                            description=f"{record.kind} {record.resource_id}",
                            actor="billing",
                            created_at=ensure_utc(now),
                        )
                    )
                    session.flush()
        except IntegrityError:
            continue  # another job run charged this key first
        charged.append(record)
    return charged


def grant_credits(
    session: Session,
    *,
    project_id: str,
    amount_micros: int,
    idempotency_key: str,
    actor: str,
    description: str,
    now: datetime,
) -> tuple[LedgerEntry, bool]:
    """Add credits to a project (idempotent by key); returns the entry and whether it is new."""
    if amount_micros <= 0:
        raise ValueError("a credit grant must be positive")
    key = f"grant:{project_id}:{idempotency_key}"
    existing = session.scalars(select(LedgerEntry).where(LedgerEntry.idempotency_key == key)).first()
    if existing is not None:
        return existing, False
    entry = LedgerEntry(
        idempotency_key=key, project_id=project_id, entry_type="grant", amount_micros=amount_micros,
        description=description, actor=actor, created_at=ensure_utc(now),
    )
    session.add(entry)
    account = session.get(BillingAccount, project_id)
    if account is None:
        session.add(BillingAccount(project_id=project_id, prepaid=True, updated_at=ensure_utc(now)))
    else:
        account.prepaid = True
        account.updated_at = ensure_utc(now)
    session.flush()
    return entry, True


def balance_micros(session: Session, project_id: str) -> int:
    """Credits granted minus everything charged, in micro-dollars (negative when overdrawn)."""
    query = select(func.coalesce(func.sum(LedgerEntry.amount_micros), 0))
    total = session.scalar(query.where(LedgerEntry.project_id == project_id))
    return int(total or 0)


def granted_micros(session: Session, project_id: str) -> int:
    total = session.scalar(
        select(func.coalesce(func.sum(LedgerEntry.amount_micros), 0)).where(
            LedgerEntry.project_id == project_id, LedgerEntry.entry_type == "grant"
        )
    )
    return int(total or 0)
