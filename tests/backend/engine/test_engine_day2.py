"""Day 2 through the API: scale up and down, volumes, SSH keys, container, protection, capacity."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from backend.domain.catalog import Catalog
from backend.domain.clock import ManualClock
from backend.provisioning.worker import EngineWorker
from backend.store.engine_models import Allocation, EngineNode, NodeTransition
from tests.backend.engine.conftest import catch_up, create, drain, get, ssh_public_key


def statuses_of(sessions: sessionmaker[Session], node_name: str) -> list[str]:
    with sessions() as session:
        return list(
            session.scalars(
                select(NodeTransition.to_status)
                .where(NodeTransition.node_name == node_name)
                .order_by(NodeTransition.id)
            )
        )


def test_engine_scale_up_leaves_running_nodes_untouched(
    admin: TestClient, make_worker: Callable[..., EngineWorker], sessions: sessionmaker[Session]
) -> None:
    cluster = create(admin)
    worker = make_worker()
    drain(worker)
    before = statuses_of(sessions, "train-0")
    response = admin.patch(f"/v1/clusters/{cluster['id']}", json={"node_count": 4})
    assert response.status_code == 200, response.text
    drain(worker)
    body = get(admin, cluster["id"])
    assert body["status"] == "RUNNING"
    assert [n["name"] for n in body["nodes"]] == ["train-0", "train-1", "train-2", "train-3"]
    assert statuses_of(sessions, "train-0") == before
    assert statuses_of(sessions, "train-3")[-1] == "RUNNING"
    assert "train-[0-3]" in admin.get(f"/v1/clusters/{cluster['id']}/artifacts/slurm.conf").text


def test_engine_scale_down_removes_highest_index_first(
    admin: TestClient, make_worker: Callable[..., EngineWorker], sessions: sessionmaker[Session]
) -> None:
    cluster = create(admin, node_count=3)
    worker = make_worker()
    drain(worker)
    assert admin.patch(f"/v1/clusters/{cluster['id']}", json={"node_count": 2}).status_code == 200
    drain(worker)
    body = get(admin, cluster["id"])
    assert [n["name"] for n in body["nodes"]] == ["train-0", "train-1"] and body["status"] == "RUNNING"
    assert statuses_of(sessions, "train-2")[-2:] == ["DESTROYING", "DESTROYED"]
    with sessions() as session:
        held = session.scalar(select(func.count()).select_from(Allocation).where(Allocation.kind == "slot"))
    assert held == 2
    assert "train-2" not in admin.get(f"/v1/clusters/{cluster['id']}/artifacts/slurm.conf").text


def test_engine_scale_down_by_explicit_node_names(
    admin: TestClient, make_worker: Callable[..., EngineWorker], sessions: sessionmaker[Session]
) -> None:
    from backend.provisioning.engine import request_reconcile

    cluster = create(admin, node_count=3)
    worker = make_worker()
    drain(worker)
    with sessions.begin() as session:
        from backend.store.models import Cluster

        row = session.get(Cluster, cluster["id"])
        assert row is not None
        row.node_count = 2
        request_reconcile(session, cluster["id"], remove_node_names=["train-0"])
    drain(worker)
    # The simulated schedule follows the wall clock (drain catches up with it), so a modelled job may be
    # running on train-0: then it is drained and its jobs are requeued after scale_down_grace_minutes,
    # which drain, stopping at the next poll, does not wait for. Move the clock past the grace.
    clock = worker.clock
    assert isinstance(clock, ManualClock)
    clock.set(clock.now() + dt.timedelta(minutes=cluster["scale_down_grace_minutes"], seconds=1))
    drain(worker, catch_up_with_wall=False)
    assert [n["name"] for n in get(admin, cluster["id"])["nodes"]] == ["train-1", "train-2"]


def test_engine_volume_attach_detach_reconfigures_running_nodes(
    admin: TestClient, make_worker: Callable[..., EngineWorker], sessions: sessionmaker[Session]
) -> None:
    cluster = create(admin)
    worker = make_worker()
    drain(worker)
    volume = admin.post("/v1/volumes", json={"name": "data", "region": "us-east-1", "size_tib": 2}).json()
    assert admin.post(f"/v1/clusters/{cluster['id']}/volumes/{volume['id']}").status_code in (200, 201)
    drain(worker)
    assert statuses_of(sessions, "train-0")[-3:] == ["RUNNING", "CONFIGURING", "RUNNING"]
    assert admin.delete(f"/v1/clusters/{cluster['id']}/volumes/{volume['id']}").status_code in (200, 204)
    drain(worker)
    assert statuses_of(sessions, "train-1")[-5:] == [
        "RUNNING",
        "CONFIGURING",
        "RUNNING",
        "CONFIGURING",
        "RUNNING",
    ]
    with sessions() as session:
        node = session.scalars(select(EngineNode).where(EngineNode.name == "train-1")).one()
        assert node.applied_config["volume_ids"] == []


def test_engine_change_made_while_a_reconfigure_runs_is_applied_by_another(
    admin: TestClient, make_worker: Callable[..., EngineWorker], sessions: sessionmaker[Session],
    clock: ManualClock
) -> None:
    """A reconfigure records what it was submitted with: a volume attached while it ran is not marked
    as applied by it, so the node is reconfigured again (the local driver's volume swap showed this)."""
    cluster = create(admin, instance_type="1xH100", node_count=1)
    worker = make_worker()
    drain(worker)
    first = admin.post("/v1/volumes", json={"name": "a", "region": "us-east-1", "size_tib": 1}).json()
    second = admin.post("/v1/volumes", json={"name": "b", "region": "us-east-1", "size_tib": 1}).json()
    assert admin.post(f"/v1/clusters/{cluster['id']}/volumes/{first['id']}").status_code in (200, 201)
    worker = make_worker(simulation_speed=2000.0)  # operations take time now: one can be caught running
    catch_up(clock)  # the attach's wake-up is on the wall clock
    for _ in range(20):  # until the reconfigure for the first volume is submitted, not finished
        worker.run_once()
        with sessions() as session:
            node = session.scalars(select(EngineNode).where(EngineNode.name == "train-0")).one()
            if node.stage == "reconfiguring" and node.op_token is not None:
                break
    else:
        raise AssertionError("the node never started reconfiguring")
    assert admin.post(f"/v1/clusters/{cluster['id']}/volumes/{second['id']}").status_code in (200, 201)
    drain(worker)
    assert statuses_of(sessions, "train-0")[-4:] == ["CONFIGURING", "RUNNING", "CONFIGURING", "RUNNING"]
    with sessions() as session:
        node = session.scalars(select(EngineNode).where(EngineNode.name == "train-0")).one()
        assert sorted(node.applied_config["volume_ids"]) == sorted([first["id"], second["id"]])
        assert "applying" not in node.applied_config


def test_engine_ssh_key_and_container_changes_apply_in_place(
    admin: TestClient, make_worker: Callable[..., EngineWorker], sessions: sessionmaker[Session]
) -> None:
    cluster = create(admin, instance_type="1xH100", node_count=1, container="base")
    worker = make_worker()
    drain(worker)
    assert get(admin, cluster["id"])["status"] == "RUNNING"
    key = admin.post("/v1/ssh-keys", json={"name": "me", "public_key": ssh_public_key()}).json()
    assert admin.patch(f"/v1/clusters/{cluster['id']}", json={"ssh_key_ids": [key["id"]]}).status_code == 200
    drain(worker)
    assert statuses_of(sessions, "train-0")[-2:] == ["CONFIGURING", "RUNNING"]
    assert admin.patch(f"/v1/clusters/{cluster['id']}", json={"container": "pytorch"}).status_code == 200
    drain(worker)
    assert statuses_of(sessions, "train-0")[-2:] == ["CONTAINER_CREATING", "RUNNING"]
    body = get(admin, cluster["id"])
    assert body["status"] == "RUNNING" and body["nodes"][0]["public_ip"] is not None


def test_engine_deletion_protection_refuses_delete(
    admin: TestClient, make_worker: Callable[..., EngineWorker]
) -> None:
    cluster = create(admin, deletion_protection=True)
    drain(make_worker())
    response = admin.delete(f"/v1/clusters/{cluster['id']}")
    assert response.status_code == 409 and response.json()["field"] == "deletion_protection"
    assert get(admin, cluster["id"])["status"] == "RUNNING"


def test_engine_create_beyond_capacity_is_409_and_stores_nothing(
    three_h100: Catalog, admin: TestClient, sessions: sessionmaker[Session]
) -> None:
    create(admin, node_count=2)
    response = admin.post(
        "/v1/clusters",
        json={"name": "big", "region": "us-east-1", "instance_type": "8xH100", "node_count": 2},
    )
    assert response.status_code == 409, response.text
    problem = response.json()
    assert problem["code"] == "insufficient_capacity" and "at most 1 available" in problem["detail"]
    assert problem["available"] == [
        {"region": "us-east-1", "fabric": "ib-east-a", "instance_type": "8xH100", "available_nodes": 1}
    ]
    names = [c["name"] for c in admin.get("/v1/clusters").json()["items"]]
    assert names == ["train"]
    with sessions() as session:
        assert (
            session.scalar(select(func.count()).select_from(Allocation).where(Allocation.kind == "slot")) == 2
        )


def test_engine_scale_up_beyond_capacity_is_409(
    three_h100: Catalog,
    admin: TestClient,
    make_worker: Callable[..., EngineWorker],
) -> None:
    cluster = create(admin, node_count=2)
    drain(make_worker())
    response = admin.patch(f"/v1/clusters/{cluster['id']}", json={"node_count": 4})
    assert response.status_code == 409 and response.json()["code"] == "insufficient_capacity"
    assert get(admin, cluster["id"])["node_count"] == 2


def test_engine_pause_holds_changes_and_resume_applies_them(
    admin: TestClient, make_worker: Callable[..., EngineWorker], sessions: sessionmaker[Session]
) -> None:
    from backend.provisioning.engine import pause_cluster, resume_cluster

    cluster = create(admin)
    worker = make_worker()
    drain(worker)
    with sessions.begin() as session:
        pause_cluster(session, cluster["id"], "credits exhausted")
    drain(worker)
    body = get(admin, cluster["id"])
    assert body["status"] == "PAUSED" and body["status_reason"] == "credits exhausted"
    assert body["phase"] == "Paused"
    assert admin.patch(f"/v1/clusters/{cluster['id']}", json={"node_count": 3}).status_code == 200
    drain(worker)
    assert len(get(admin, cluster["id"])["nodes"]) == 3
    assert statuses_of(sessions, "train-2") == ["PENDING"]  # held: admitted, not started
    with sessions.begin() as session:
        resume_cluster(session, cluster["id"], "credits added")
    drain(worker)
    body = get(admin, cluster["id"])
    assert body["status"] == "RUNNING" and body["status_reason"] is None
    assert statuses_of(sessions, "train-2")[-1] == "RUNNING"


def test_engine_rename_keeps_hostnames(admin: TestClient, make_worker: Callable[..., EngineWorker]) -> None:
    cluster = create(admin)
    worker = make_worker()
    drain(worker)
    assert (
        admin.patch(f"/v1/clusters/{cluster['id']}", json={"name": "renamed", "node_count": 3}).status_code
        == 200
    )
    drain(worker)
    body = get(admin, cluster["id"])
    assert [n["name"] for n in body["nodes"]] == ["train-0", "train-1", "train-2"]
    conf = admin.get(f"/v1/clusters/{cluster['id']}/artifacts/slurm.conf").text
    assert "SlurmctldHost=train-jumphost(" in conf and "NodeName=train-[0-2]" in conf
