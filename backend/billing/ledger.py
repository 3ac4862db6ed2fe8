"""The credit ledger and usage records: idempotent, append-only writes and the balance they add up to."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from backend.domain.clock import ensure_utc
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


@dataclass(frozen=True)
class PendingCharge:
    """A usage record that may need charging: its key, and how to build the row if it does."""

    key: str
    build: Callable[[], UsageRecord]


def charge_usage(session: Session, pending: Sequence[PendingCharge], *, now: datetime) -> list[UsageRecord]:
    """Store the usage records not stored yet and debit each one's amount; returns the new ones.

    All new records go in under one savepoint; if a concurrent pass stored one of the keys first (unique
    violation), they go in again one savepoint each, skipping the taken keys, so a race costs a retry and
    never fails or doubles a charge. Nothing is committed here: the caller's transaction makes each
    record and its debit land together or not at all.
    """
    done = existing_keys(session, UsageRecord, (p.key for p in pending))
    fresh: list[PendingCharge] = []
    for charge in pending:
        if charge.key not in done:
            done.add(charge.key)
            fresh.append(charge)
    if not fresh:
        return []
    try:
        with session.begin_nested():
            return _insert(session, [charge.build() for charge in fresh], now=now)
    except IntegrityError:
        pass
    charged: list[UsageRecord] = []
    for charge in fresh:
        try:
            with session.begin_nested():
                charged += _insert(session, [charge.build()], now=now)
        except IntegrityError:
            continue  # another pass charged this key first
    return charged


def _insert(session: Session, records: list[UsageRecord], *, now: datetime) -> list[UsageRecord]:
    session.add_all(records)
    session.flush()
    session.add_all(
        [
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
            for record in records
            if record.amount_micros
        ]
    )
    session.flush()
    return records


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
        idempotency_key=key,
        project_id=project_id,
        entry_type="grant",
        amount_micros=amount_micros,
        description=description,
        actor=actor,
        created_at=ensure_utc(now),
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
