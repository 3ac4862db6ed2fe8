"""The address plan through the API: every region and fabric allocates from its own blocks, in any order,
and no address is ever held twice (SQLite and PostgreSQL)."""

from __future__ import annotations

import itertools
from collections import Counter
from ipaddress import ip_address, ip_network
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from backend.domain.catalog import default_catalog
from backend.settings import Settings
from backend.store.engine_models import Allocation, EngineCluster, EngineNode
from tests.backend.conftest import make_tenant

CATALOG = default_catalog()
REGIONS = [r.name for r in CATALOG.regions]
# Every region first once, and every region before and after every other one.
ORDERS = [tuple(REGIONS[i:] + REGIONS[:i]) for i in range(len(REGIONS))]


def every_shape(region: str) -> list[dict[str, Any]]:
    """One cluster body per (fabric, instance type) of the region: two nodes where the type can form a
    cluster, one otherwise."""
    return [
        {"name": f"c-{fabric.name}-{itype.lower()}", "region": region, "instance_type": itype,
         "interconnect": fabric.kind, "node_count": 2 if CATALOG.instance_type(itype).fabric_capable else 1}
        for fabric in CATALOG.fabrics_in(region) for itype in fabric.pools
    ]


def assert_no_address_held_twice(sessions: sessionmaker[Session]) -> None:
    with sessions() as session:
        allocations = session.scalars(select(Allocation)).all()
        nodes = session.scalars(select(EngineNode)).all()
        states = session.scalars(select(EngineCluster)).all()
    for kind in ("subnet", "public_ip", "private_ip"):
        held = Counter(a.value for a in allocations if a.kind == kind)
        assert [v for v, count in held.items() if count > 1] == [], kind
    private = [n.private_ip for n in nodes] + [s.jumphost_ip for s in states if s.jumphost_ip]
    assert len(set(private)) == len(private)
    public = [s.public_ip for s in states]
    assert len(set(public)) == len(public)


def test_engine_regions_issue_sequence_creates_in_two_regions(admin: TestClient) -> None:
    first = admin.post("/v1/clusters", json={"name": "c", "region": "us-west-2", "instance_type": "8xB200",
                                             "node_count": 2})
    second = admin.post("/v1/clusters", json={"name": "c", "region": "eu-north-1", "instance_type": "8xH200",
                                              "node_count": 2})
    assert (first.status_code, second.status_code) == (201, 201), second.text
    assert first.json()["fabric"]["subnet"] != second.json()["fabric"]["subnet"]
    assert first.json()["login"]["public_ip"] != second.json()["login"]["public_ip"]


@pytest.mark.parametrize("order", ORDERS, ids="-".join)
def test_engine_regions_create_and_scale_every_shape_in_any_order(
    admin: TestClient, sessions: sessionmaker[Session], order: tuple[str, ...]
) -> None:
    created: list[dict[str, Any]] = []
    for region in order:
        for body in every_shape(region):
            response = admin.post("/v1/clusters", json=body)
            assert response.status_code == 201, response.text
            created.append(response.json())
    for cluster in created:
        fabric = CATALOG.fabric(cluster["region"], cluster["fabric"]["name"])
        region = CATALOG.region(cluster["region"])
        assert fabric is not None and fabric.private_cidr is not None and region is not None
        assert ip_network(cluster["fabric"]["subnet"]).subnet_of(ip_network(fabric.private_cidr))
        assert ip_address(cluster["login"]["public_ip"]) in ip_network(region.public_cidr)
    for cluster in (c for c in created if c["node_count"] > 1):
        response = admin.patch(f"/v1/clusters/{cluster['id']}", json={"node_count": 3})
        assert response.status_code == 200, response.text
        assert [n["name"] for n in response.json()["nodes"]][-1].endswith("-2")
    assert_no_address_held_twice(sessions)


def test_engine_regions_single_nodes_get_distinct_public_ips_across_regions_and_projects(
    admin: TestClient, settings: Settings, sessions: sessionmaker[Session]
) -> None:
    other_key = make_tenant(settings, "other").admin_key
    other = TestClient(admin.app, headers={"Authorization": f"Bearer {other_key}"},
                       raise_server_exceptions=False)
    public: dict[str, str] = {}
    for client, region in itertools.product((admin, other), REGIONS):
        for itype in ("1xH100", "8xH200" if region != "us-west-2" else "8xB200"):
            body = {"name": "solo", "region": region, "instance_type": itype, "node_count": 1}
            response = client.post("/v1/clusters", json=body)
            assert response.status_code == 201, response.text
            body = response.json()
            block = CATALOG.region(region).public_cidr  # type: ignore[union-attr]
            assert ip_address(body["login"]["public_ip"]) in ip_network(block)
            assert body["nodes"][0]["public_ip"] == body["login"]["public_ip"]
            public[body["id"]] = body["login"]["public_ip"]
    assert len(set(public.values())) == len(public) == 12
    assert_no_address_held_twice(sessions)
