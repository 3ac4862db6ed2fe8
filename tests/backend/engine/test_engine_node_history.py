"""Node history (`GET .../nodes/{name}/events`): a fault and its automatic repair leave events (the
fault with its XID code, repair started and finished) readable through the API and the audit log, the
node's status_reason says the last one, a node action records who asked for it, and the metrics
sampler records degraded readings and their recovery."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from backend.domain.clock import ManualClock
from backend.provisioning.worker import EngineWorker
from backend.store.engine_models import NodeTransition
from tests.backend.engine.conftest import create, drain, get
from tests.backend.engine.test_engine_repair import _bring_up_then_fault, _seed_failing_once, _worker
from tests.backend.engine.test_engine_repair_degraded import WHY
from tests.backend.engine.test_engine_repair_degraded import _worker as degraded_worker


def _events(client: TestClient, cluster_id: str, name: str, **params: Any) -> dict[str, Any]:
    response = client.get(f"/v1/clusters/{cluster_id}/nodes/{name}/events", params=params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _audit(admin: TestClient, cluster_id: str, action: str) -> list[dict[str, Any]]:
    response = admin.get("/v1/audit-events", params={"resource_id": cluster_id, "action": action})
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


def test_engine_node_history_records_a_fault_and_its_automatic_repair(
    admin: TestClient, member: TestClient, make_worker: Callable[..., EngineWorker],
    sessions: sessionmaker[Session]
) -> None:
    seed = _seed_failing_once("train-1")
    before, _ = _bring_up_then_fault(admin, make_worker, seed)
    cluster_id = before["id"]
    assert _events(admin, cluster_id, "train-1")["items"] == []  # nothing happened yet
    drain(_worker(make_worker, seed))
    after = get(admin, cluster_id)
    assert (after["status"], after["phase"], after["status_reason"]) == ("RUNNING", "Ready", None)
    old_id, new_id = before["nodes"][1]["instance_id"], after["nodes"][1]["instance_id"]
    assert old_id != new_id

    body = member.get(f"/v1/clusters/{cluster_id}/nodes/train-1/events").json()  # readers may read
    assert [e["kind"] for e in body["items"]] == ["repair_finished", "repair_started", "xid"]
    assert body["next_page_token"] is None
    finished, started, fault = body["items"]
    with sessions() as session:
        fault_reason = session.scalar(select(NodeTransition.reason).where(
            NodeTransition.node_id == old_id, NodeTransition.to_status == "FAILED"))
    code = re.search(r"XID (\d+)", fault["detail"])
    assert code is not None and fault["code"] == int(code.group(1)) and fault["code"] in (79, 48, 94)
    assert fault_reason == f"hardware fault: {fault['detail']}"
    assert (fault["instance_id"], fault["actor"], fault["node"]) == (old_id, "engine", "train-1")
    assert (started["instance_id"], started["actor"]) == (old_id, "engine")
    assert "replaced after a fault" in started["detail"] and new_id in started["detail"]
    assert f"XID {fault['code']}" in started["detail"]  # the cause travels with the repair
    assert (finished["instance_id"], finished["actor"]) == (new_id, "engine")
    assert old_id in finished["detail"]
    assert fault["at"] <= started["at"] <= finished["at"]
    # The repaired node says so (it used to say nothing), in the cluster and the node views.
    node = after["nodes"][1]
    assert node["status_reason"].startswith("repaired: ") and old_id in node["status_reason"]
    view = admin.get(f"/v1/clusters/{cluster_id}/nodes").json()["items"][1]
    assert view["last_event"]["kind"] == "repair_finished" and view["status_reason"] == node["status_reason"]
    assert admin.get(f"/v1/clusters/{cluster_id}/nodes").json()["items"][0]["last_event"] is None
    # The other nodes' histories are empty; the audit log has each event once.
    assert _events(admin, cluster_id, "train-0")["items"] == []
    for action in ("node.xid", "node.repair_started", "node.repair_finished"):
        [event] = _audit(admin, cluster_id, action)
        assert event["actor"] == "engine" and event["details"]["node"] == "train-1"
    assert _audit(admin, cluster_id, "node.xid")[0]["details"]["code"] == fault["code"]


def test_engine_node_history_names_who_asked_for_a_node_action(
    admin: TestClient, make_worker: Callable[..., EngineWorker]
) -> None:
    cluster = create(admin, node_count=2)
    worker = make_worker()
    drain(worker)
    url = f"/v1/clusters/{cluster['id']}/nodes/train-0/actions"
    assert admin.post(url, json={"action": "drain"}).status_code == 202
    assert admin.post(url, json={"action": "resume"}).status_code == 202
    assert admin.post(url, json={"action": "restart"}).status_code == 202
    drain(worker)
    [asked] = _audit(admin, cluster["id"], "cluster.node_restart")
    key = asked["actor"]  # the admin key's prefix, as the audit log names it
    body = _events(admin, cluster["id"], "train-0")
    kinds = [(e["kind"], e["actor"]) for e in body["items"]]
    assert kinds == [("restart_finished", key), ("restart_started", key), ("restart_requested", key),
                     ("resume_requested", key), ("drain_requested", key)]
    assert body["items"][2]["detail"] == f"restart requested by {key}"
    node = get(admin, cluster["id"])["nodes"][0]
    assert node["status"] == "RUNNING" and node["status_reason"].startswith("restarted: ")
    # The request audits itself: no second audit event for the same action; the engine's part is audited.
    assert _audit(admin, cluster["id"], "node.restart_requested") == []
    assert [e["actor"] for e in _audit(admin, cluster["id"], "node.restart_finished")] == [key]

    # Newest first, page by page.
    first = _events(admin, cluster["id"], "train-0", page_size=2)
    assert [e["kind"] for e in first["items"]] == ["restart_finished", "restart_started"]
    rest = _events(admin, cluster["id"], "train-0", page_size=2, page_token=first["next_page_token"])
    assert [e["kind"] for e in rest["items"]] == ["restart_requested", "resume_requested"]
    last = _events(admin, cluster["id"], "train-0", page_size=2, page_token=rest["next_page_token"])
    assert [e["kind"] for e in last["items"]] == ["drain_requested"] and last["next_page_token"] is None


def test_engine_node_history_unknown_node_and_bad_token(
    admin: TestClient, make_worker: Callable[..., EngineWorker]
) -> None:
    cluster = create(admin, node_count=1)
    drain(make_worker())
    url = f"/v1/clusters/{cluster['id']}/nodes"
    missing = admin.get(f"{url}/train-7/events")
    assert (missing.status_code, missing.json()["field"]) == (404, "name")
    assert admin.get("/v1/clusters/cls_00000000000000000000000000/nodes/train-0/events").status_code == 404
    bad = admin.get(f"{url}/train-0/events", params={"page_token": "abc"})
    assert (bad.status_code, bad.json()["code"]) == (400, "invalid_page_token")


def test_engine_node_history_records_degraded_readings_and_their_recovery(
    admin: TestClient, sessions: sessionmaker[Session], clock: ManualClock
) -> None:
    cluster = create(admin, node_count=2, node_repair="manual")
    broken = {("train-1", 1)}
    worker = degraded_worker(sessions, clock, broken)
    drain(worker)
    worker.collect_metrics()
    drain(worker)
    worker.collect_metrics()  # the same reading again: no second event
    broken.clear()  # the link trained up again
    worker.collect_metrics()
    drain(worker)
    body = _events(admin, cluster["id"], "train-1")
    assert [(e["kind"], e["actor"]) for e in body["items"]] == [("recovered", "engine"),
                                                                ("degraded", "engine")]
    assert body["items"][1]["detail"] == WHY
    node = get(admin, cluster["id"])["nodes"][1]
    assert node["status_reason"] == "recovered: readings healthy again"
    assert [e["details"]["detail"] for e in _audit(admin, cluster["id"], "node.degraded")] == [WHY]
