"""Reserved terms through the metering job: up-front charge at first RUNNING, expiry under both policies."""

from __future__ import annotations

from decimal import Decimal

from sqlalchemy import select

from backend.billing.settings import BillingSettings
from backend.store.billing_models import Reservation
from backend.store.engine_models import PhaseRecord
from tests.backend.billing.conftest import BillingWorld, at

# 1 x 8xH100 for 1 day at 3.99 x (1 - 0.10) per GPU-hour: 3.591 x 8 x 24.
UPFRONT = Decimal("689.472")


def _reserved(world: BillingWorld, on_expiry: str, *, protected: bool = False) -> tuple[str, str]:
    project = world.project()
    cluster = world.cluster(
        project,
        instance_type="8xH100",
        region="us-east-1",
        node_count=1,
        billing_type="reserved",
        duration_days=1,
        on_expiry=on_expiry,
        deletion_protection=protected,
    )
    world.transition(cluster, "n0", "PROVISIONING", at("09:30:00"))
    world.run(at("09:45:00"))
    assert world.charged(project) == 0  # not RUNNING yet: nothing charged, no term
    world.transition(cluster, "n0", "RUNNING", at("10:00:00"))
    return project, cluster


def _phases(world: BillingWorld, cluster_id: str) -> list[str]:
    with world.sessions() as session:
        return list(
            session.scalars(
                select(PhaseRecord.phase)
                .where(PhaseRecord.cluster_id == cluster_id)
                .order_by(PhaseRecord.at, PhaseRecord.id)
            )
        )


def test_reserved_term_is_charged_once_up_front_when_the_cluster_reaches_running(world: BillingWorld) -> None:
    project, cluster = _reserved(world, "decommission")
    result = world.run(at("10:00:30"))
    assert result.reservations_started == 1
    assert world.charged(project, kind="reservation") == UPFRONT
    for hour in range(11, 20):
        world.run(at(f"{hour}:00:30"))
    assert world.charged(project) == UPFRONT  # the reserved node itself costs nothing more
    with world.sessions() as session:
        reservation = session.get(Reservation, cluster)
        assert reservation is not None
        assert reservation.term_end.replace(tzinfo=None) == at("10:00:00", day=3).replace(tzinfo=None)
    assert "ReservedTermStarted" in _phases(world, cluster)


def test_expiry_decommission_tears_the_cluster_down_without_extra_charge(world: BillingWorld) -> None:
    project, cluster = _reserved(world, "decommission")
    world.run(at("10:00:30"))
    result = world.run(at("10:00:30", day=3))
    assert result.reservations_expired == 1 and result.clusters_decommissioned == 1
    assert world.get_cluster(cluster).deletion_requested_at is not None
    assert "Decommissioning" in _phases(world, cluster)
    world.transition(cluster, "n0", "DESTROYING", at("10:03:00", day=3))  # the engine starts tearing down
    world.run(at("12:00:00", day=3))
    assert world.charged(project) == UPFRONT  # inside the decommission grace: no on-demand charge
    assert "billing.reservation_expired" in world.audit_actions(project)


def test_expiry_decommission_that_drags_on_is_billed_on_demand_after_the_grace(world: BillingWorld) -> None:
    project, cluster = _reserved(world, "decommission")
    world.run(at("10:00:30"))
    world.run(at("10:00:30", day=3))
    world.transition(cluster, "n0", "DESTROYING", at("10:20:00", day=3))  # 5 minutes past the 15-minute grace
    world.run(at("12:00:00", day=3))
    assert world.charged(project, kind="compute_on_demand") == Decimal("2.66")  # 31.92 x 300 / 3600


def test_expiry_convert_to_on_demand_keeps_the_cluster_and_bills_it_on_demand(world: BillingWorld) -> None:
    project, cluster = _reserved(world, "convert_to_on_demand")
    world.run(at("10:00:30"))
    result = world.run(at("10:00:30", day=3))
    assert result.reservations_expired == 1 and result.clusters_decommissioned == 0
    assert world.get_cluster(cluster).deletion_requested_at is None
    assert "ConvertedToOnDemand" in _phases(world, cluster)
    world.run(at("13:01:30", day=3))  # slices are final once they ended a settle period (60 s) ago
    assert world.charged(project, kind="compute_on_demand") == Decimal("31.92") * 3


def test_deletion_protection_is_respected_at_expiry_and_the_cluster_goes_on_demand(
    world: BillingWorld,
) -> None:
    project, cluster = _reserved(world, "decommission", protected=True)
    world.run(at("10:00:30"))
    world.run(at("10:00:30", day=3))
    assert world.get_cluster(cluster).deletion_requested_at is None
    assert "DecommissionBlocked" in _phases(world, cluster)
    world.run(at("11:15:30", day=3))
    # Covered until 10:15 (grace), on-demand from then: 10:15-11:00 = 45 minutes of 8 GPUs at 3.99.
    assert world.charged(project, kind="compute_on_demand") == Decimal("23.94")


def test_nodes_beyond_the_reservation_are_billed_on_demand(world: BillingWorld) -> None:
    project, cluster = _reserved(world, "decommission")
    world.run(at("10:00:30"))
    world.set_node_count(cluster, 2)
    world.transition(cluster, "n1", "RUNNING", at("11:00:00"))
    world.transition(cluster, "n1", "DESTROYING", at("11:30:00"))
    world.run(at("12:00:30"))
    assert world.charged(project, kind="compute_on_demand") == Decimal("15.96")
    assert world.charged(project, kind="reservation") == UPFRONT


def test_changing_the_grace_setting_later_never_re_prices_charged_time(world: BillingWorld) -> None:
    project, _cluster = _reserved(world, "decommission", protected=True)
    world.run(at("10:00:30"))
    world.run(at("12:01:00", day=3))
    charged = world.charged(project)
    world.settings = BillingSettings(settle_seconds=60, expiry_grace_minutes=45)
    world.run(at("12:01:30", day=3))
    assert world.charged(project) == charged  # the reservation's cover was fixed when the term started


def test_scaling_a_reserved_cluster_before_its_term_starts_charges_nothing_twice(world: BillingWorld) -> None:
    project = world.project()
    cluster = world.cluster(
        project,
        instance_type="8xH100",
        region="us-east-1",
        node_count=2,
        billing_type="reserved",
        duration_days=1,
        on_expiry="convert_to_on_demand",
    )
    world.transition(cluster, "n0", "RUNNING", at("09:00:00"))  # n1 still provisioning
    world.run(at("10:01:00"))
    world.set_node_count(cluster, 1)  # scaled down before the cluster was ever RUNNING in full
    world.run(at("11:01:00"))
    keys = [r.idempotency_key for r in world.records(project)]
    assert len(keys) == len(set(keys))
    assert world.charged(project) == Decimal("3.99") * Decimal("0.90") * 8 * 24  # the term, once
