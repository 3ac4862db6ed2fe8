from datetime import UTC, datetime, timedelta

import pytest

from backend.billing.credits import CreditPolicy, assess, is_exhausted, next_exhausted_since

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
POLICY = CreditPolicy(
    decommission_after=timedelta(hours=6), attach_refused_after=timedelta(hours=2),
    volume_data_kept_for=timedelta(days=7),
)


def test_postpaid_projects_are_never_exhausted() -> None:
    assert not is_exhausted(prepaid=False, balance_micros=-10)
    standing = assess(prepaid=False, balance_micros=-10, exhausted_since=None, now=T0, policy=POLICY)
    assert not standing.exhausted and not standing.pause_on_demand


def test_exhaustion_pauses_at_once_then_refuses_attach_then_decommissions() -> None:
    since = next_exhausted_since(prepaid=True, balance_micros=0, exhausted_since=None, now=T0)
    assert since == T0
    now_standing = assess(prepaid=True, balance_micros=0, exhausted_since=since, now=T0, policy=POLICY)
    assert now_standing.pause_on_demand
    assert not now_standing.refuse_attach and not now_standing.decommission_on_demand
    later = assess(prepaid=True, balance_micros=-5, exhausted_since=since, now=T0 + timedelta(hours=2),
                   policy=POLICY)
    assert later.refuse_attach and not later.decommission_on_demand
    last = assess(prepaid=True, balance_micros=-5, exhausted_since=since, now=T0 + timedelta(hours=6),
                  policy=POLICY)
    assert last.decommission_on_demand
    assert last.volume_data_deadline == T0 + timedelta(days=7)
    assert last.decommission_at == T0 + timedelta(hours=6)


def test_topping_up_clears_exhaustion() -> None:
    assert next_exhausted_since(prepaid=True, balance_micros=1, exhausted_since=T0, now=T0) is None
    assert next_exhausted_since(prepaid=True, balance_micros=-1, exhausted_since=T0,
                                now=T0 + timedelta(hours=1)) == T0


def test_policy_refuses_negative_delays() -> None:
    with pytest.raises(ValueError):
        CreditPolicy(decommission_after=timedelta(hours=-1))
