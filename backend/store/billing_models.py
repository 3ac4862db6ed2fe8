"""Billing tables: usage records and the credit ledger (append-only), reservations, invoices, and the
small amount of state the metering job keeps (account exhaustion, credit holds); the volume history it
meters storage from.

Money columns are integer micro-dollars (`*_micros`); prices are Numeric. Rows of `billing_usage_records`
and `billing_ledger_entries` are never updated or deleted: a unique `idempotency_key` on each makes a
charge happen at most once however often the job runs.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    Numeric,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from backend.store.base import Base, UtcDateTime

# SQLite only auto-increments INTEGER PRIMARY KEY columns.
SERIAL = BigInteger().with_variant(Integer, "sqlite")
PROJECT_FK = "projects.id"


class UsageRecord(Base):
    """One priced line item: a node's hour slice, a volume's hour slice, or a reserved term."""

    __tablename__ = "billing_usage_records"

    id: Mapped[int] = mapped_column(SERIAL, primary_key=True, autoincrement=True)
    idempotency_key: Mapped[str] = mapped_column(String(200), nullable=False, unique=True)
    project_id: Mapped[str] = mapped_column(ForeignKey(PROJECT_FK, ondelete="CASCADE"), nullable=False)
    # compute_on_demand | compute_reserved | storage | reservation
    kind: Mapped[str] = mapped_column(String(32), nullable=False)
    resource_type: Mapped[str] = mapped_column(String(16), nullable=False)  # node | volume | cluster
    resource_id: Mapped[str] = mapped_column(String(64), nullable=False)
    cluster_id: Mapped[str | None] = mapped_column(String(64))
    region: Mapped[str] = mapped_column(String(64), nullable=False)
    instance_type: Mapped[str | None] = mapped_column(String(64))
    period_start: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)
    period_end: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)
    seconds: Mapped[int] = mapped_column(BigInteger, nullable=False)
    units: Mapped[Decimal] = mapped_column(Numeric(18, 6), nullable=False)  # GPUs or TiB
    unit_price_usd: Mapped[Decimal] = mapped_column(Numeric(18, 6), nullable=False)  # per unit-hour
    amount_micros: Mapped[int] = mapped_column(BigInteger, nullable=False)
    recorded_at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)
    # The labels of the billed object (cluster, volume, reserved IP, reservation) when the line was
    # charged (migration 0022): chargeback and budgets group by these, so a relabel never moves past spend.
    labels: Mapped[dict[str, str]] = mapped_column(JSON, nullable=False, default=dict, server_default="{}")


Index("ix_billing_usage_records_project_period", UsageRecord.project_id, UsageRecord.period_start)
Index("ix_billing_usage_records_cluster", UsageRecord.cluster_id)


class LedgerEntry(Base):
    """A movement of a project's credit balance: a grant (+) or a charge (-) for one usage record."""

    __tablename__ = "billing_ledger_entries"

    id: Mapped[int] = mapped_column(SERIAL, primary_key=True, autoincrement=True)
    idempotency_key: Mapped[str] = mapped_column(String(200), nullable=False, unique=True)
    project_id: Mapped[str] = mapped_column(ForeignKey(PROJECT_FK, ondelete="CASCADE"), nullable=False)
    entry_type: Mapped[str] = mapped_column(String(16), nullable=False)  # grant | charge
    amount_micros: Mapped[int] = mapped_column(BigInteger, nullable=False)  # signed
    usage_record_id: Mapped[int | None] = mapped_column(ForeignKey("billing_usage_records.id"))
    description: Mapped[str] = mapped_column(Text, nullable=False, default="")
    actor: Mapped[str] = mapped_column(String(64), nullable=False)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)


Index("ix_billing_ledger_entries_project", LedgerEntry.project_id, LedgerEntry.id)


class Reservation(Base):
    """A reserved term, created (and charged) when its cluster first reaches RUNNING."""

    __tablename__ = "billing_reservations"

    cluster_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey(PROJECT_FK, ondelete="CASCADE"), nullable=False)
    region: Mapped[str] = mapped_column(String(64), nullable=False)
    instance_type: Mapped[str] = mapped_column(String(64), nullable=False)
    node_count: Mapped[int] = mapped_column(Integer, nullable=False)
    gpus_per_node: Mapped[int] = mapped_column(Integer, nullable=False)
    duration_days: Mapped[int] = mapped_column(Integer, nullable=False)
    on_expiry: Mapped[str] = mapped_column(String(32), nullable=False)
    term_start: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)
    term_end: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)
    # Until when reserved nodes are covered: the term end, plus the teardown grace for `decommission`.
    # Fixed when the term starts, so changing the grace setting never re-prices charged time.
    covered_until: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)
    discount: Mapped[Decimal] = mapped_column(Numeric(8, 6), nullable=False)
    gpu_hour_usd: Mapped[Decimal] = mapped_column(Numeric(18, 6), nullable=False)
    upfront_micros: Mapped[int] = mapped_column(BigInteger, nullable=False)
    usage_key: Mapped[str] = mapped_column(String(200), nullable=False)
    # Set once the expiry action (decommission | convert_to_on_demand) has been carried out.
    expired_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)


class CapacityReservation(Base):
    """Reserved capacity apart from clusters (migration 0016): `node_count` nodes of one instance type on one
    fabric of a region for a term, paid up front once when the term starts. Its undrawn nodes are held in
    the fabric's pool from booking until `ends_at` (admission leaves them to clusters that draw from it,
    `backend.provisioning.reservations`); clusters with `reservation_id` draw from it and give their
    nodes back when they go. Only `name`, `labels`, `charged_at` and `deleted_at` change after booking."""

    __tablename__ = "capacity_reservations"

    id: Mapped[str] = mapped_column(String(30), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey(PROJECT_FK, ondelete="CASCADE"), nullable=False)
    name: Mapped[str] = mapped_column(String(128), nullable=False)
    region: Mapped[str] = mapped_column(String(64), nullable=False)
    instance_type: Mapped[str] = mapped_column(String(64), nullable=False)
    pool: Mapped[str] = mapped_column(String(160), nullable=False)  # region/fabric/instance type
    node_count: Mapped[int] = mapped_column(Integer, nullable=False)
    gpus_per_node: Mapped[int] = mapped_column(Integer, nullable=False)
    duration_days: Mapped[int] = mapped_column(Integer, nullable=False)
    starts_at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)
    ends_at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)
    # Priced at booking, so the charge at starts_at never depends on a catalog read later.
    discount: Mapped[Decimal] = mapped_column(Numeric(8, 6), nullable=False)
    gpu_hour_usd: Mapped[Decimal] = mapped_column(Numeric(18, 6), nullable=False)
    upfront_micros: Mapped[int] = mapped_column(BigInteger, nullable=False)
    # As clusters' labels (migration 0020): a scoped key's reservations carry its scope label.
    labels: Mapped[dict[str, str]] = mapped_column(JSON, nullable=False, default=dict, server_default="{}")
    charged_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    deleted_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)


Index("ix_capacity_reservations_pool_ends", CapacityReservation.pool, CapacityReservation.ends_at)
Index("ix_capacity_reservations_project_id", CapacityReservation.project_id, CapacityReservation.id)


class Invoice(Base):
    """A project's monthly summary, written once the month is over (the current month is computed live)."""

    __tablename__ = "billing_invoices"

    id: Mapped[int] = mapped_column(SERIAL, primary_key=True, autoincrement=True)
    project_id: Mapped[str] = mapped_column(ForeignKey(PROJECT_FK, ondelete="CASCADE"), nullable=False)
    period: Mapped[str] = mapped_column(String(7), nullable=False)  # YYYY-MM
    compute_on_demand_micros: Mapped[int] = mapped_column(BigInteger, nullable=False)
    reserved_micros: Mapped[int] = mapped_column(BigInteger, nullable=False)
    storage_micros: Mapped[int] = mapped_column(BigInteger, nullable=False)
    # Migration 0013_reserved_ips (invoices issued before have none).
    reserved_ip_micros: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0, server_default="0")
    total_micros: Mapped[int] = mapped_column(BigInteger, nullable=False)
    line_count: Mapped[int] = mapped_column(Integer, nullable=False)
    issued_at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)


Index("uq_billing_invoices_project_period", Invoice.project_id, Invoice.period, unique=True)


class BillingAccount(Base):
    """Per-project credit state the job carries between runs."""

    __tablename__ = "billing_accounts"

    project_id: Mapped[str] = mapped_column(ForeignKey(PROJECT_FK, ondelete="CASCADE"), primary_key=True)
    # True once the project was granted credits (history only: since migration 0022 whether exhaustion
    # rules apply is `projects.billing_mode`, never inferred from a grant).
    prepaid: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    exhausted_since: Mapped[datetime | None] = mapped_column(UtcDateTime())
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)


class ReservedIpEvent(Base):
    """A reserved IP's history, append-only: reserved, attached, detached, released (migration
    0013_reserved_ips). Written by the reserved IP service in the transaction of the change; billing
    meters reserved and attached hours from it. Rows outlive their address."""

    __tablename__ = "reserved_ip_events"

    id: Mapped[int] = mapped_column(SERIAL, primary_key=True, autoincrement=True)
    reserved_ip_id: Mapped[str] = mapped_column(String(64), nullable=False, index=True)
    project_id: Mapped[str] = mapped_column(ForeignKey(PROJECT_FK, ondelete="CASCADE"), nullable=False,
                                            index=True)
    region: Mapped[str] = mapped_column(String(64), nullable=False)
    # reserved | attached | detached | released
    event: Mapped[str] = mapped_column(String(16), nullable=False)
    cluster_id: Mapped[str | None] = mapped_column(String(64))
    at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)
    # The object's labels at the event (migration 0022): lines charged after the row is gone keep its team.
    labels: Mapped[dict[str, str]] = mapped_column(JSON, nullable=False, default=dict, server_default="{}")


class VolumeEvent(Base):
    """A volume's history, append-only: created, resized, deleted, each with the size from then on.

    Written by the volume service in the transaction of the change (as the engine writes node
    transitions); storage is metered from it, so a volume that lived between two metering passes is
    charged too. Rows outlive their volume (volume rows are deleted with it)."""

    __tablename__ = "volume_events"

    id: Mapped[int] = mapped_column(SERIAL, primary_key=True, autoincrement=True)
    volume_id: Mapped[str] = mapped_column(String(64), nullable=False, index=True)
    project_id: Mapped[str] = mapped_column(ForeignKey(PROJECT_FK, ondelete="CASCADE"), nullable=False)
    region: Mapped[str] = mapped_column(String(64), nullable=False)
    event: Mapped[str] = mapped_column(String(16), nullable=False)  # created | resized | deleted
    size_tib: Mapped[Decimal] = mapped_column(Numeric(18, 6), nullable=False)
    at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)
    # The object's labels at the event (migration 0022): lines charged after the row is gone keep its team.
    labels: Mapped[dict[str, str]] = mapped_column(JSON, nullable=False, default=dict, server_default="{}")


Index("ix_volume_events_project_at", VolumeEvent.project_id, VolumeEvent.at)


class CreditHold(Base):
    """An on-demand cluster paused (and maybe decommissioned) because its project ran out of credits.

    Kept forever (a cluster paused twice has two rows): the meter leaves every hold's time out, so the
    history must not change once charged."""

    __tablename__ = "billing_credit_holds"

    id: Mapped[int] = mapped_column(SERIAL, primary_key=True, autoincrement=True)
    cluster_id: Mapped[str] = mapped_column(String(64), nullable=False, index=True)
    project_id: Mapped[str] = mapped_column(ForeignKey(PROJECT_FK, ondelete="CASCADE"), nullable=False)
    paused_at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)
    decommissioned_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    released_at: Mapped[datetime | None] = mapped_column(UtcDateTime())


class SettledCluster(Base):
    """A torn-down cluster whose every slice has been charged: later passes skip its history."""

    __tablename__ = "billing_settled_clusters"

    cluster_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey(PROJECT_FK, ondelete="CASCADE"), nullable=False)
    settled_at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)


class Budget(Base):
    """A monthly spending budget of a project, optionally for the clusters with one label (migration
    0011): alerts at the thresholds (percent), and at 100 % `notify` or `block_new` (creates refused)."""

    __tablename__ = "billing_budgets"

    id: Mapped[str] = mapped_column(String(30), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey(PROJECT_FK, ondelete="CASCADE"), nullable=False)
    name: Mapped[str] = mapped_column(String(128), nullable=False)
    amount_micros: Mapped[int] = mapped_column(BigInteger, nullable=False)
    label_key: Mapped[str | None] = mapped_column(String(63))
    label_value: Mapped[str | None] = mapped_column(String(256))
    thresholds: Mapped[list[int]] = mapped_column(JSON, nullable=False)
    action: Mapped[str] = mapped_column(String(16), nullable=False)
    generation: Mapped[int] = mapped_column(Integer, nullable=False, default=1)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)


Index("ix_billing_budgets_project_id_id", Budget.project_id, Budget.id)


class BudgetAlert(Base):
    """A threshold a budget's spend crossed in one month: at most one row per (budget, month, threshold),
    so each crossing is alerted once however often the job runs."""

    __tablename__ = "billing_budget_alerts"
    __table_args__ = (
        UniqueConstraint("budget_id", "period", "threshold", name="uq_billing_budget_alerts_crossing"),
    )

    id: Mapped[int] = mapped_column(SERIAL, primary_key=True, autoincrement=True)
    budget_id: Mapped[str] = mapped_column(
        ForeignKey("billing_budgets.id", ondelete="CASCADE"), nullable=False, index=True
    )
    period: Mapped[str] = mapped_column(String(7), nullable=False)  # YYYY-MM
    threshold: Mapped[int] = mapped_column(Integer, nullable=False)  # percent
    spent_micros: Mapped[int] = mapped_column(BigInteger, nullable=False)
    raised_at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False)
