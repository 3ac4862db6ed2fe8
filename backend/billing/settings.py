"""The billing settings in force in this process (`Settings.billing`, `GPUCLOUD_BILLING_*`) and the
credit policy they configure.

The runtime installs them when the process starts (`use`); the credit guards the services call deep in
a request (`backend.billing.account`) ask `configured()`. Nothing here reads the environment: a process
that built no runtime sees the defaults until it calls `use`.
"""

from __future__ import annotations

from datetime import timedelta

from backend.billing.credits import CreditPolicy
from backend.settings import BillingSettings

__all__ = ["BillingSettings", "configured", "credit_policy", "use"]

# model_construct: the declared defaults without reading the environment.
_in_force: BillingSettings = BillingSettings.model_construct()


def use(settings: BillingSettings) -> BillingSettings:
    """Install the billing settings of this process (the runtime does, once at start); returns the
    previous ones, so a test can put them back."""
    global _in_force
    previous, _in_force = _in_force, settings
    return previous


def configured() -> BillingSettings:
    """The billing settings in force (see `use`)."""
    return _in_force


def credit_policy(settings: BillingSettings) -> CreditPolicy:
    """The credit exhaustion timeline `settings` configure (backend.billing.credits)."""
    return CreditPolicy(
        decommission_after=timedelta(hours=settings.decommission_after_hours),
        attach_refused_after=timedelta(hours=settings.attach_refused_after_hours),
        volume_data_kept_for=timedelta(days=settings.volume_data_kept_days),
    )
