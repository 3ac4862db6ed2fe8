"""Security groups through the engine: a group's new rules and a cluster's new group list reach its
running nodes in place (a reconfigure, no replacement); each node records the rules it enforces."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from backend.provisioning.worker import EngineWorker
from backend.store.engine_models import EngineNode
from tests.backend.engine.conftest import create, drain
from tests.backend.engine.test_engine_day2 import statuses_of


def _rules_of_nodes(sessions: sessionmaker[Session]) -> list[dict[str, Any]]:
    with sessions() as session:
        nodes = session.scalars(select(EngineNode).where(EngineNode.active_name.is_not(None))).all()
        return [node.applied_config["security_rules"] for node in nodes]


def test_engine_security_group_changes_reconfigure_running_nodes_in_place(
    admin: TestClient, make_worker: Callable[..., EngineWorker], sessions: sessionmaker[Session]
) -> None:
    cluster = create(admin)
    worker = make_worker()
    drain(worker)
    (default_rules, _) = _rules_of_nodes(sessions)
    assert [(r["protocol"], r["from_port"]) for r in default_rules["ingress"]] == [("tcp", 22)]
    rule = {"protocol": "tcp", "from_port": 8888, "cidr_blocks": ["198.51.100.0/24"]}
    group = admin.post("/v1/security-groups", json={"name": "lab", "ingress": [rule]}).json()
    attached = admin.patch(f"/v1/clusters/{cluster['id']}", json={"security_group_ids": [group["id"]]})
    assert attached.status_code == 200, attached.text
    drain(worker)
    assert statuses_of(sessions, "train-0")[-3:] == ["RUNNING", "CONFIGURING", "RUNNING"]
    expected = {"ingress": [{"protocol": "tcp", "from_port": 8888, "to_port": None,
                             "cidr_blocks": ["198.51.100.0/24"]}], "egress": []}
    assert _rules_of_nodes(sessions) == [expected, expected]
    wider = {**rule, "to_port": 8899}
    assert admin.patch(f"/v1/security-groups/{group['id']}", json={"ingress": [wider]}).status_code == 200
    drain(worker)
    assert statuses_of(sessions, "train-1")[-5:] == ["RUNNING", "CONFIGURING", "RUNNING", "CONFIGURING",
                                                     "RUNNING"]
    assert [r["ingress"][0]["to_port"] for r in _rules_of_nodes(sessions)] == [8899, 8899]
    with sessions() as session:  # the same machines: reconfigured, not replaced
        assert all(n.attempt == 1 for n in session.scalars(select(EngineNode)))
