"""One price (issue 27): for every capacity type and a few shapes, `POST /v1/pricing/estimate` shows
what the metering job charges for the cluster's first hour, and admission and every cluster's
`estimated_hourly_cost_usd` use that same price (spot clusters are no longer priced on-demand)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

from fastapi.testclient import TestClient

from backend.billing.estimate import HOURS_PER_DAY
from backend.domain.ids import new_id
from backend.store.billing_models import CapacityReservation
from backend.store.models import Cluster
from tests.backend.billing.conftest import T0, BillingWorld, at

SHAPES = (
    ("8xH100", "us-east-1", 2), ("8xH200", "eu-north-1", 3), ("8xB200", "us-west-2", 1),
    ("1xH100", "us-east-1", 1),
)
# pricing -> (capacity_type, billing, draws a reservation)
PRICINGS: dict[str, tuple[str, dict[str, Any] | None, bool]] = {
    "on_demand": ("on_demand", None, False),
    "spot": ("spot", None, False),
    "spot_with_fallback": ("spot_with_fallback", None, False),
    "reserved_1d": ("on_demand", {"type": "reserved", "duration_days": 1}, False),
    "reserved_30d": ("on_demand", {"type": "reserved", "duration_days": 30}, False),
    "drawn_reservation": ("on_demand", None, True),
}
# The capacity the engine puts the nodes on first (a fallback cluster takes spot while there is some).
FIRST_CAPACITY = {"spot": "spot", "spot_with_fallback": "spot"}
MICROS = Decimal(1_000_000)


def _estimate(client: TestClient, shape: tuple[str, str, int], pricing: str, **extra: Any) -> dict[str, Any]:
    itype, region, nodes = shape
    capacity_type, billing, drawn = PRICINGS[pricing]
    body: dict[str, Any] = {"instance_type": itype, "region": region, "node_count": nodes,
                            "capacity_type": capacity_type, **extra}
    if billing is not None:
        body["billing"] = billing
    if drawn:
        body["reservation_id"] = "res_0000000000000000"
    response = client.post("/v1/pricing/estimate", json=body)
    assert response.status_code == 200, (shape, pricing, response.text)
    estimate: dict[str, Any] = response.json()
    return estimate


def _draw_reservation(
    world: BillingWorld, project: str, cluster_id: str, shape: tuple[str, str, int]
) -> None:
    """A capacity reservation booked from 09:00 for a day, and the cluster drawing from it."""
    itype, region, nodes = shape
    with world.sessions.begin() as session:
        reservation = CapacityReservation(
            id=new_id("reservation"), project_id=project, name="block", region=region, instance_type=itype,
            pool=f"{region}/f/{itype}", node_count=nodes, gpus_per_node=world.prices.gpus_per_node(itype),
            duration_days=1, starts_at=T0, ends_at=T0 + timedelta(days=1), discount=Decimal("0.10"),
            gpu_hour_usd=world.prices.reserved_gpu_hour(itype, region, 1), upfront_micros=0, created_at=T0,
        )
        session.add(reservation)
        cluster = session.get(Cluster, cluster_id)
        assert cluster is not None
        cluster.reservation_id = reservation.id


def _first_hour(world: BillingWorld, shape: tuple[str, str, int], pricing: str, capacity: str) -> Decimal:
    """What the metering job charges for the first hour of a cluster of `shape` whose nodes all run on
    `capacity` from 10:00: its compute lines of 10:00-11:00 plus the term's share of that hour."""
    itype, region, nodes = shape
    _, billing, drawn = PRICINGS[pricing]
    days = billing["duration_days"] if billing else None
    project = world.project(f"p{pricing}{itype}{capacity}".lower())
    cluster = world.cluster(project, instance_type=itype, region=region, node_count=nodes,
                            billing_type="reserved" if days else "on_demand", duration_days=days,
                            on_expiry="decommission" if days else None)
    if drawn:
        _draw_reservation(world, project, cluster, shape)
    names = [f"n{i}" for i in range(nodes)]
    world.nodes(cluster, names, "PROVISIONING", at("09:50:00"), capacity)
    world.nodes(cluster, names, "RUNNING", at("10:00:00"), capacity)
    world.run(at("11:01:00"))
    lines = [r for r in world.records(project) if r.cluster_id == cluster]
    compute = [r for r in lines if r.kind.startswith("compute") and r.period_start.hour == 10]
    assert len(compute) == nodes and all(r.seconds == 3600 for r in compute), (shape, pricing)
    first_hour = sum((Decimal(r.amount_micros) for r in compute), Decimal(0)) / MICROS
    if days:  # the term is charged up front: each of its hours costs the charge / its hours
        (term,) = [r for r in lines if r.kind == "reservation"]
        first_hour += Decimal(term.amount_micros) / MICROS / (HOURS_PER_DAY * days)
    return first_hour


def test_one_price_api_estimate_is_the_first_hour_the_meter_charges(
    world: BillingWorld, member: TestClient
) -> None:
    for shape in SHAPES:
        for pricing in PRICINGS:
            estimate = _estimate(member, shape, pricing)
            charged = _first_hour(world, shape, pricing, FIRST_CAPACITY.get(pricing, "on_demand"))
            assert Decimal(estimate["hourly_usd"]) == charged, (shape, pricing, estimate, charged)
            if pricing == "spot_with_fallback":  # the ceiling: every node an on-demand stand-in
                ceiling = _first_hour(world, shape, pricing, "on_demand")
                assert Decimal(estimate["max_hourly_usd"]) == ceiling > charged, (shape, estimate)
            else:
                assert estimate["max_hourly_usd"] == estimate["hourly_usd"], (shape, pricing, estimate)


def test_one_price_spot_estimate_shows_the_spot_rate(member: TestClient) -> None:
    spot = _estimate(member, ("8xH100", "us-east-1", 1), "spot", max_hourly_cost_usd="20")
    # The numbers: a spot 8xH100 planned at 31.92 (on-demand) and was charged 12.768.
    assert (spot["hourly_usd"], spot["gpu_hour_usd"], spot["capacity_type"]) == ("12.768", "1.596", "spot")
    assert spot["within_max_hourly_cost"] is True
    fallback = _estimate(member, ("8xH100", "us-east-1", 1), "spot_with_fallback", max_hourly_cost_usd="20")
    assert (fallback["hourly_usd"], fallback["max_hourly_usd"]) == ("12.768", "31.92")
    assert fallback["within_max_hourly_cost"] is False


def _create(client: TestClient, name: str, capacity_type: str, ceiling: str) -> Any:
    return client.post("/v1/clusters", json={
        "name": name, "region": "us-east-1", "instance_type": "8xH100", "node_count": 2,
        "capacity_type": capacity_type, "max_hourly_cost_usd": ceiling,
    })


def test_one_price_admission_and_cluster_cost_use_the_capacity_rate(admin: TestClient) -> None:
    # A spot 2 x 8xH100 costs 25.536 per hour: admitted under a ceiling of 30 (on-demand is 63.84).
    spot = _create(admin, "spot", "spot", "30")
    assert spot.status_code == 201, spot.text
    assert Decimal(str(spot.json()["estimated_hourly_cost_usd"])) == Decimal("25.536")
    got = admin.get(f"/v1/clusters/{spot.json()['id']}").json()
    assert Decimal(str(got["estimated_hourly_cost_usd"])) == Decimal("25.536")
    # A fallback cluster can run wholly on on-demand stand-ins: the ceiling is compared with that.
    fallback = _create(admin, "fallback", "spot_with_fallback", "30")
    assert fallback.status_code == 422, fallback.text
    problem = fallback.json()
    assert problem["field"] == "max_hourly_cost_usd" and problem["code"] == "cost_limit_exceeded"
    assert "63.84" in problem["detail"] and "on-demand nodes standing in" in problem["detail"]
    on_demand = _create(admin, "od", "on_demand", "30")
    assert on_demand.status_code == 422 and "63.84" in on_demand.json()["detail"], on_demand.text
