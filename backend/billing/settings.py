"""Billing settings (`GPUCLOUD_BILLING_*`), kept apart from the core settings they sit beside."""

from __future__ import annotations

from datetime import timedelta

from pydantic_settings import BaseSettings, SettingsConfigDict

from backend.billing.credits import CreditPolicy


class BillingSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPUCLOUD_BILLING_", extra="ignore", frozen=True)

    # How often the embedded metering job runs.
    interval_seconds: float = 60.0
    # Hour slices are charged once they ended at least this long ago, so status changes the engine
    # records a little late are seen before a slice is priced.
    settle_seconds: int = 60
    # Credit exhaustion timeline (see backend.billing.credits).
    decommission_after_hours: float = 72.0
    attach_refused_after_hours: float = 24.0
    volume_data_kept_days: float = 30.0
    # A reserved cluster set to be decommissioned at term end stays covered by its reservation this
    # long after the end, while the engine tears it down.
    expiry_grace_minutes: float = 15.0

    @property
    def credit_policy(self) -> CreditPolicy:
        return CreditPolicy(
            decommission_after=timedelta(hours=self.decommission_after_hours),
            attach_refused_after=timedelta(hours=self.attach_refused_after_hours),
            volume_data_kept_for=timedelta(days=self.volume_data_kept_days),
        )

    @property
    def settle(self) -> timedelta:
        return timedelta(seconds=self.settle_seconds)

    @property
    def expiry_grace(self) -> timedelta:
        return timedelta(minutes=self.expiry_grace_minutes)
