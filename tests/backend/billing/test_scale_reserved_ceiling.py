"""The cost ceiling of a scaled reserved cluster: nodes beyond the started term are priced on demand."""

from __future__ import annotations

from decimal import Decimal

import pytest

from backend.domain.catalog import default_catalog
from backend.domain.errors import ApiError
from backend.services import clusters
from tests.backend.billing.conftest import BillingWorld, at

# 8xH100 in us-east-1: 3.99 per GPU-hour on demand, 3.591 reserved for 1 day (10 % off).
ALL_RESERVED_2_NODES = Decimal("3.591") * 8 * 2  # 57.456: what a fresh 2-node reservation would cost
ONE_RESERVED_ONE_ON_DEMAND = Decimal("3.591") * 8 + Decimal("3.99") * 8  # 60.648


def test_scaling_a_started_reserved_term_prices_the_extra_node_on_demand(world: BillingWorld) -> None:
    project = world.project()
    cluster_id = world.cluster(
        project, instance_type="8xH100", region="us-east-1", node_count=1, billing_type="reserved",
        duration_days=1, on_expiry="convert_to_on_demand",
    )
    world.transition(cluster_id, "n0", "RUNNING", at("10:00:00"))
    assert world.run(at("10:01:00")).reservations_started == 1  # the term now covers one node
    ceiling = Decimal("59")  # above the all-reserved price, below the real one
    assert ALL_RESERVED_2_NODES < ceiling < ONE_RESERVED_ONE_ON_DEMAND

    with world.sessions() as session, pytest.raises(ApiError) as raised:
        clusters.update_cluster(
            session=session, catalog=default_catalog(), project_id=project, cluster_id=cluster_id,
            changes={"node_count": 2, "max_hourly_cost_usd": ceiling}, if_match=None,
        )

    assert raised.value.status == 422
    [error] = raised.value.errors
    assert (error.path, error.code) == ("max_hourly_cost_usd", "cost_limit_exceeded")
    assert Decimal(error.message.split()[4]) == ONE_RESERVED_ONE_ON_DEMAND  # "would cost X USD per hour"


def test_cost_ceiling_lowered_below_the_cost_refuses_only_changes_that_raise_it(world: BillingWorld) -> None:
    project = world.project()
    cluster_id = world.cluster(project, instance_type="8xH100", region="us-east-1", node_count=2)

    def update(changes: dict[str, object]) -> None:
        with world.sessions.begin() as session:
            clusters.update_cluster(session=session, catalog=default_catalog(), project_id=project,
                                    cluster_id=cluster_id, changes=changes, if_match=None)

    update({"max_hourly_cost_usd": 10})  # 63.84 USD/h now: lowering the ceiling is no raise
    update({"labels": {"team": "ml"}})  # nor is a label change
    update({"node_count": 1})  # nor a scale-down
    with pytest.raises(ApiError) as raised:
        update({"node_count": 3})
    assert [e.code for e in raised.value.errors] == ["cost_limit_exceeded"]
