"""Reserved IPs through the API and the engine: reserve, attach, move, detach, convert, release
(SQLite and PostgreSQL). An address is never in two places: every check collects the public addresses of
the clusters and the reserved IPs and finds them distinct."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker

from backend.provisioning.worker import EngineWorker
from backend.settings import Settings
from backend.store.engine_models import Allocation, AllocationCursor, EngineCluster
from tests.backend.access_keys import client_for, make_key
from tests.backend.conftest import make_tenant
from tests.backend.engine.conftest import cluster_body, drain, get

EAST_PUBLIC = ipaddress.ip_network("198.18.0.0/18")


def _reserve(admin: TestClient, **body: Any) -> dict[str, Any]:
    response = admin.post("/v1/reserved-ips", json={"region": "us-east-1", **body})
    assert response.status_code == 201, response.text
    return dict(response.json())


def _cluster(admin: TestClient, name: str, **spec: Any) -> dict[str, Any]:
    response = admin.post("/v1/clusters", json=cluster_body(name=name, instance_type="1xH100", node_count=1,
                                                            **spec))
    assert response.status_code == 201, response.text
    return dict(response.json())


def _login(admin: TestClient, cluster_id: str) -> str:
    return str(get(admin, cluster_id)["login"]["public_ip"])


def _no_address_twice(sessions: sessionmaker[Session]) -> None:
    with sessions() as session:
        live = [s.public_ip for s in session.scalars(select(EngineCluster).where(~EngineCluster.finished))]
        floating = list(session.scalars(select(Allocation.value).where(Allocation.kind == "public_ip")))
    assert len(live) == len(set(live)) and len(floating) == len(set(floating))


def test_reserved_ip_lifecycle_echoes_input_and_refuses_bad_input(
    admin: TestClient, settings: Settings
) -> None:
    ip = _reserve(admin, name="edge", labels={"env": "prod"})
    assert (ip["name"], ip["region"], ip["labels"], ip["status"], ip["cluster_id"]) == (
        "edge", "us-east-1", {"env": "prod"}, "reserved", None)
    assert ipaddress.ip_address(ip["address"]) in EAST_PUBLIC and ip["hourly_cost_usd"] == 0.005
    assert admin.get(f"/v1/reserved-ips/{ip['id']}").json() == ip
    assert [i["id"] for i in admin.get("/v1/reserved-ips").json()["items"]] == [ip["id"]]
    patched = admin.patch(f"/v1/reserved-ips/{ip['id']}", json={"name": None, "labels": {"env": "dev"}})
    assert patched.status_code == 200
    assert (patched.json()["name"], patched.json()["labels"]) == (None, {"env": "dev"})
    assert patched.json()["address"] == ip["address"]

    unknown = admin.post("/v1/reserved-ips", json={"region": "mars-1"})
    assert unknown.status_code == 422 and (unknown.json()["field"], unknown.json()["code"]) == ("region",
                                                                                               "unknown_region")
    vision = client_for(admin, make_key(settings, "acme", "admin", scope="team=vision"))
    assert vision.get(f"/v1/reserved-ips/{ip['id']}").status_code == 404  # no team label: not vision's
    theirs = vision.post("/v1/reserved-ips", json={"region": "us-east-1"}).json()
    assert theirs["labels"] == {"team": "vision"}
    assert vision.get("/v1/reserved-ips").json()["items"] == [theirs]
    other = make_tenant(settings, "other")
    foreign = TestClient(admin.app, headers={"Authorization": f"Bearer {other.admin_key}"})
    assert foreign.get(f"/v1/reserved-ips/{ip['id']}").status_code == 404
    assert foreign.delete(f"/v1/reserved-ips/{ip['id']}").status_code == 404
    assert foreign.get("/v1/reserved-ips").json()["items"] == []
    stolen = foreign.post("/v1/clusters", json=cluster_body(name="x", instance_type="1xH100", node_count=1,
                                                            reserved_ip_id=ip["id"]))
    assert stolen.status_code == 422 and stolen.json()["errors"][0]["field"] == "reserved_ip_id"
    west = _reserve(admin, region="us-west-2")
    wrong = admin.post("/v1/clusters", json=cluster_body(name="y", instance_type="1xH100", node_count=1,
                                                         reserved_ip_id=west["id"]))
    assert wrong.status_code == 422
    assert (wrong.json()["errors"][0]["field"], wrong.json()["errors"][0]["code"]) == (
        "reserved_ip_id", "region_mismatch")
    assert "us-west-2" in wrong.json()["errors"][0]["message"]
    assert admin.delete(f"/v1/reserved-ips/{ip['id']}").status_code == 204
    assert admin.get(f"/v1/reserved-ips/{ip['id']}").status_code == 404


def test_reserved_ip_attach_move_detach_and_release_refused_while_attached(
    admin: TestClient, make_worker: Callable[..., EngineWorker], sessions: sessionmaker[Session]
) -> None:
    ip = _reserve(admin)
    a, b = _cluster(admin, "a", reserved_ip_id=ip["id"]), _cluster(admin, "b")
    drain(make_worker())
    assert _login(admin, a["id"]) == ip["address"] and a["reserved_ip_id"] == ip["id"]
    b_floating = _login(admin, b["id"])
    assert b_floating != ip["address"]
    held = admin.get(f"/v1/reserved-ips/{ip['id']}").json()
    assert (held["status"], held["cluster_id"], held["hourly_cost_usd"]) == ("attached", a["id"], 0.0025)

    refused = admin.delete(f"/v1/reserved-ips/{ip['id']}")
    assert refused.status_code == 409 and refused.json()["code"] == "reserved_ip_attached"
    assert refused.json()["cluster_id"] == a["id"] and a["id"] in refused.json()["detail"]

    # The move as Terraform may order it: attach to B first (moves it; A falls back to a floating
    # address without a new ETag), then A's own detach with its old If-Match is a no-op.
    a_etag = admin.get(f"/v1/clusters/{a['id']}").headers["etag"]
    moved = admin.patch(f"/v1/clusters/{b['id']}", json={"reserved_ip_id": ip["id"]})
    assert moved.status_code == 200 and moved.json()["login"]["public_ip"] == ip["address"]
    a_now = get(admin, a["id"])
    assert a_now["reserved_ip_id"] is None and a_now["login"]["public_ip"] not in (ip["address"], None)
    detach_a = admin.patch(f"/v1/clusters/{a['id']}", json={"reserved_ip_id": None},
                           headers={"If-Match": a_etag})
    assert detach_a.status_code == 200, detach_a.text
    _no_address_twice(sessions)

    # And the other order: detach from B first (B gets a fresh floating address), then attach to A.
    detached = admin.patch(f"/v1/clusters/{b['id']}", json={"reserved_ip_id": None}).json()
    assert detached["reserved_ip_id"] is None and detached["login"]["public_ip"] != ip["address"]
    assert admin.get(f"/v1/reserved-ips/{ip['id']}").json()["status"] == "reserved"
    back = admin.patch(f"/v1/clusters/{a['id']}", json={"reserved_ip_id": ip["id"]}).json()
    assert back["login"]["public_ip"] == ip["address"]
    assert back["login"]["ssh_command"].endswith("@" + ip["address"])
    _no_address_twice(sessions)

    # Deleting the cluster leaves the IP reserved, free to release.
    assert admin.delete(f"/v1/clusters/{a['id']}").status_code == 202
    drain(make_worker())
    assert admin.get(f"/v1/reserved-ips/{ip['id']}").json()["cluster_id"] is None
    assert admin.delete(f"/v1/reserved-ips/{ip['id']}").status_code == 204


def test_cluster_reserve_ip_keeps_its_address_and_the_pool_skips_it(
    admin: TestClient, make_worker: Callable[..., EngineWorker], sessions: sessionmaker[Session]
) -> None:
    cluster = _cluster(admin, "keep")
    drain(make_worker())
    address = _login(admin, cluster["id"])
    reserved = admin.post(f"/v1/clusters/{cluster['id']}/reserve-ip", json={"name": "kept"})
    assert reserved.status_code == 201, reserved.text
    ip = reserved.json()
    assert (ip["address"], ip["cluster_id"], ip["status"]) == (address, cluster["id"], "attached")
    after = get(admin, cluster["id"])
    assert after["reserved_ip_id"] == ip["id"] and after["login"]["public_ip"] == address
    again = admin.post(f"/v1/clusters/{cluster['id']}/reserve-ip", json={})
    assert again.status_code == 409 and again.json()["code"] == "already_reserved"

    assert admin.patch(f"/v1/clusters/{cluster['id']}", json={"reserved_ip_id": None}).status_code == 200
    assert _login(admin, cluster["id"]) != address
    with sessions.begin() as session:  # the next-free pointers start over: the reserved address is next
        session.execute(delete(AllocationCursor))
    other = _cluster(admin, "other")
    drain(make_worker())
    assert _login(admin, other["id"]) != address
    assert _reserve(admin)["address"] != address
    _no_address_twice(sessions)


def test_reserved_ip_stays_reserved_when_its_clusters_create_rolls_back(
    admin: TestClient, make_worker: Callable[..., EngineWorker]
) -> None:
    ip = _reserve(admin)
    cluster = _cluster(admin, "doomed", reserved_ip_id=ip["id"])
    drain(make_worker(simulation_boot_failure_rate=1.0, engine_max_replacements=0))
    assert get(admin, cluster["id"])["status"] == "FAILED"
    after = admin.get(f"/v1/reserved-ips/{ip['id']}").json()
    assert (after["cluster_id"], after["status"], after["address"]) == (None, "reserved", ip["address"])
    assert admin.delete(f"/v1/clusters/{cluster['id']}").status_code == 202
    assert admin.delete(f"/v1/reserved-ips/{ip['id']}").status_code == 204
