"""Credits through the metering job: exhaustion pauses on-demand clusters (metering stops), decommissions
them after the grace period, refuses attaching storage after its grace; reserved clusters run on."""

from __future__ import annotations

import itertools
from decimal import Decimal

import pytest
from sqlalchemy import select

from backend.billing.account import CreditsExhausted, check_attach_allowed, credit_standing
from backend.domain.clock import ensure_utc
from backend.store.billing_models import CreditHold
from backend.store.engine_models import PhaseRecord
from tests.backend.billing.conftest import BillingWorld, at


def _phases(world: BillingWorld, cluster_id: str) -> list[str]:
    with world.sessions() as session:
        return list(
            session.scalars(
                select(PhaseRecord.phase)
                .where(PhaseRecord.cluster_id == cluster_id)
                .order_by(PhaseRecord.at, PhaseRecord.id)
            )
        )


def _running_on_demand(world: BillingWorld, credits: str) -> tuple[str, str]:
    project = world.project(billing_mode="prepaid")
    world.grant(project, credits, moment=at("09:00:00"))
    cluster = world.cluster(project, instance_type="8xH100", region="us-east-1", node_count=1)
    world.transition(cluster, "n0", "RUNNING", at("10:00:00"))
    return project, cluster


def test_exhaustion_pauses_then_decommissions_on_demand_clusters(world: BillingWorld) -> None:
    project, cluster = _running_on_demand(world, "100.00")
    for hour in (11, 12, 13):
        assert world.run(at(f"{hour}:01:00")).clusters_paused == 0
    assert world.balance(project) == Decimal("100.00") - 3 * Decimal("31.92")
    result = world.run(at("14:01:00"))  # the fourth hour overdraws the balance
    assert result.clusters_paused == 1
    assert world.balance(project) == Decimal("-27.68")
    assert "Paused" in _phases(world, cluster)
    assert {"billing.credits_exhausted", "cluster.paused_for_credits"} <= set(world.audit_actions(project))

    # Metering stopped at the pause (14:01:00): one more minute is charged, then nothing.
    for moment in ("15:01:00", "17:01:00", "19:01:00"):
        world.run(at(moment))
    assert world.balance(project) == Decimal("-27.68") - Decimal("0.532")
    assert world.get_cluster(cluster).deletion_requested_at is None

    result = world.run(at("20:01:00"))  # 6 hours after exhaustion: decommissioned
    assert result.clusters_decommissioned == 1
    assert world.get_cluster(cluster).deletion_requested_at is not None
    assert "Decommissioning" in _phases(world, cluster)
    assert "cluster.decommissioned_for_credits" in world.audit_actions(project)
    assert world.run(at("21:01:00")).clusters_decommissioned == 0  # once


def test_attach_is_refused_after_its_grace_and_volume_data_deadline_is_published(world: BillingWorld) -> None:
    project, _cluster = _running_on_demand(world, "40.00")
    world.run(at("12:01:00"))  # 63.84 charged: exhausted at 12:01
    with world.sessions() as session:
        check_attach_allowed(session, project_id=project, now=at("13:00:00"), settings=world.settings)
        with pytest.raises(CreditsExhausted) as refused:
            check_attach_allowed(session, project_id=project, now=at("14:01:00"), settings=world.settings)
        assert refused.value.status == 402 and refused.value.field == "volume_id"
        standing = credit_standing(session, project_id=project, now=at("14:01:00"), settings=world.settings)
    assert standing.volume_data_deadline == at("12:01:00", day=9)


def test_top_up_before_the_deadline_resumes_and_metering_restarts(world: BillingWorld) -> None:
    project, cluster = _running_on_demand(world, "40.00")
    world.run(at("12:01:00"))
    assert world.balance(project) == Decimal("-23.84")
    world.grant(project, "500.00", key="top-up", moment=at("13:00:00"))
    result = world.run(at("13:00:30"))
    assert result.clusters_resumed == 1
    assert {"billing.credits_restored", "cluster.resumed"} <= set(world.audit_actions(project))
    assert "Resumed" in _phases(world, cluster)
    world.run(at("15:01:00"))
    # Unbilled while held (12:01:00 - 13:00:30), billed again from the release: 12:00-12:01 is 0.532,
    # 13:00:30-14:00 is 31.92 x 3570 / 3600 = 31.654, 14:00-15:00 is 31.92.
    expected = Decimal("540.00") - Decimal("63.84") - Decimal("0.532") - Decimal("31.654") - Decimal("31.92")
    assert world.balance(project) == expected
    assert world.run(at("20:01:00")).clusters_decommissioned == 0
    with world.sessions() as session:
        hold = session.scalars(select(CreditHold).where(CreditHold.cluster_id == cluster)).one()
        assert hold.released_at is not None


def test_reserved_clusters_run_to_their_end_when_credits_run_out(world: BillingWorld) -> None:
    project = world.project(billing_mode="prepaid")
    world.grant(project, "100.00", moment=at("09:00:00"))
    reserved = world.cluster(
        project,
        instance_type="8xH100",
        region="us-east-1",
        node_count=1,
        billing_type="reserved",
        duration_days=1,
        on_expiry="decommission",
    )
    world.transition(reserved, "n0", "RUNNING", at("10:00:00"))
    result = world.run(at("10:01:00"))  # the up-front charge (689.472) overdraws the credits
    assert result.reservations_started == 1
    assert world.balance(project) < 0
    assert result.clusters_paused == 0
    assert world.run(at("20:01:00")).clusters_decommissioned == 0
    assert world.get_cluster(reserved).deletion_requested_at is None


def test_postpaid_projects_are_never_paused(world: BillingWorld) -> None:
    project = world.project()
    cluster = world.cluster(project, instance_type="8xH100", region="us-east-1", node_count=1)
    world.transition(cluster, "n0", "RUNNING", at("10:00:00"))
    result = world.run(at("20:01:00"))
    assert result.clusters_paused == 0
    assert world.balance(project) == -10 * Decimal("31.92")


def test_deletion_protection_keeps_an_exhausted_cluster_paused_instead_of_decommissioned(
    world: BillingWorld,
) -> None:
    project = world.project(billing_mode="prepaid")
    world.grant(project, "10.00", moment=at("09:00:00"))
    cluster = world.cluster(
        project, instance_type="8xH100", region="us-east-1", node_count=1, deletion_protection=True
    )
    world.transition(cluster, "n0", "RUNNING", at("10:00:00"))
    assert world.run(at("11:01:00")).clusters_paused == 1
    assert world.run(at("23:01:00")).clusters_decommissioned == 0
    assert world.get_cluster(cluster).deletion_requested_at is None
    assert world.balance(project) == Decimal("10.00") - Decimal("31.92") - Decimal("0.532")


def test_exhaustion_is_noticed_mid_hour_from_usage_accrued_but_not_charged_yet(world: BillingWorld) -> None:
    project, cluster = _running_on_demand(world, "40.00")
    assert world.run(at("11:01:00")).clusters_paused == 0  # 31.92 charged, 0.532 accrued: 7.548 left
    result = world.run(at("11:16:00"))  # 16 minutes accrued (8.512) is more than the 8.08 left
    assert result.clusters_paused == 1
    assert "Paused" in _phases(world, cluster)
    world.run(at("13:01:00"))
    assert world.balance(project) == Decimal("40.00") - Decimal("31.92") - Decimal("8.512")


def test_pausing_twice_keeps_both_holds_out_of_the_meter_and_never_overlaps_charges(
    world: BillingWorld,
) -> None:
    project, cluster = _running_on_demand(world, "40.00")
    world.run(at("12:01:00"))  # exhausted: paused at 12:01
    world.grant(project, "60.00", key="top-up-1", moment=at("13:00:00"))
    assert world.run(at("13:00:30")).clusters_resumed == 1  # metered again from 13:00:30
    for moment in ("14:01:00", "14:20:00", "15:01:00"):
        world.run(at(moment))
    assert world.run(at("16:01:00")).clusters_paused == 0  # the second pause already happened
    with world.sessions() as session:
        holds = session.scalars(
            select(CreditHold).where(CreditHold.cluster_id == cluster).order_by(CreditHold.id)
        ).all()
    assert [ensure_utc(h.paused_at) for h in holds] == [at("12:01:00"), at("14:20:00")]
    periods = sorted((r.period_start, r.period_end) for r in world.records(project) if r.kind != "storage")
    assert all(a_end <= b_start for (_a, a_end), (b_start, _b) in itertools.pairwise(periods))
    billed = sum((end - start).total_seconds() for start, end in periods)
    # 10:00-12:01 and 13:00:30-14:20 are metered; everything else was held.
    assert billed == (2 * 3600 + 60) + (3600 + 19 * 60 + 30)
