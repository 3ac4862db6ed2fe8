"""Errors that say what is wrong and what to do (issue 31): a team-scoped key setting another team's label,
which firewall rule of a list is wrong, an unknown instance type (every type, the closest first, no
dependent errors), and a mistyped node name (the cluster's node names). SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from backend.settings import Settings
from tests.backend.access_keys import client_for, make_key

CLUSTER = {"region": "us-east-1", "instance_type": "1xH100"}


def _problem(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    problem: dict[str, Any] = response.json()
    return problem


def test_scoped_admin_labelling_another_team_is_told_its_scope_and_the_label(
    admin: TestClient, settings: Settings
) -> None:
    nlp_admin = client_for(admin, make_key(settings, "acme", "admin", "team=nlp"))
    problem = _problem(nlp_admin.post("/v1/clusters", json={**CLUSTER, "name": "away",
                                                              "labels": {"team": "vision"}}), 403)
    assert (problem["code"], problem["field"]) == ("out_of_scope", "labels.team")
    detail = problem["detail"]
    assert "this API key is scoped to team=nlp and cannot set team=vision" in detail, detail
    assert "labels.team must be 'nlp'" in detail and "read-only" not in detail


def test_security_group_errors_name_the_rule_by_its_index(admin: TestClient) -> None:
    backwards = {"protocol": "tcp", "from_port": 90, "to_port": 80, "cidr_blocks": ["0.0.0.0/0"]}
    portless = {"protocol": "udp", "cidr_blocks": ["10.0.0.1/8"]}
    body = {"name": "bad", "ingress": [backwards, portless]}
    problem = _problem(admin.post("/v1/security-groups", json=body), 422)
    messages = {error["field"]: error["message"] for error in problem["errors"]}
    assert messages == {
        "ingress[0].to_port": "ingress[0]: to_port 80 is below from_port 90; a range runs from low to high",
        "ingress[1].from_port": "ingress[1]: protocol udp needs from_port (1-65535; to_port for a range)",
        "ingress[1].cidr_blocks[0]":
            "ingress[1]: '10.0.0.1/8' has host bits set; write the network, 10.0.0.0/8",
    }
    # The detail is the first error, and says the others are listed (not "and 2 more" of something).
    assert problem["detail"].startswith("ingress[0]: to_port 80")
    assert problem["detail"].endswith("(and 2 more errors, listed in errors)")


@pytest.mark.parametrize("orchestrator", [None, "slurm", "none"])
def test_single_gpu_type_on_several_nodes_reports_node_count_only(
    admin: TestClient, orchestrator: str | None
) -> None:
    # `none` on three nodes would break the multi-node orchestrator rule; with node_count = 1, the fix,
    # it is fine: only node_count is reported, with that fix.
    body = {**CLUSTER, "name": "c", "node_count": 3, "orchestrator": orchestrator}
    problem = _problem(admin.post("/v1/clusters", json=body), 422)
    assert [(e["field"], e["code"]) for e in problem["errors"]] == [
        ("node_count", "requires_fabric_capable_type")]
    expected = ("1xH100 is not fabric-capable, so a cluster of it has one node: node_count = 3 needs an "
                "8-GPU type with InfiniBand or EFA; set node_count = 1, or instance_type to one of 8xH100")
    assert problem["detail"].startswith(expected), problem["detail"]


def test_unknown_instance_type_lists_every_type_suggests_the_closest_and_nothing_else(
    admin: TestClient
) -> None:
    types = [t["name"] for t in admin.get("/v1/instance-types").json()["items"]]
    assert 1 < len(types) <= 10
    problem = _problem(admin.post("/v1/clusters", json={**CLUSTER, "name": "c", "instance_type": "8xH1000"}),
                       422)
    assert [(e["field"], e["code"]) for e in problem["errors"]] == [
        ("instance_type", "unknown_instance_type")]
    detail = problem["detail"]
    assert detail.startswith("unknown instance type '8xH1000'; did you mean 8xH100"), detail
    assert detail.endswith(f"choose one of {', '.join(types)}"), detail
    assert "more" not in detail
    # Nor with an interconnect given: what the type supports is unknown.
    given = admin.post("/v1/clusters", json={**CLUSTER, "name": "c", "instance_type": "8xH1000",
                                             "interconnect": "efa"})
    assert [e["field"] for e in _problem(given, 422)["errors"]] == ["instance_type"]


def test_action_on_a_mistyped_node_names_the_clusters_nodes(admin: TestClient) -> None:
    created = admin.post("/v1/clusters", json={**CLUSTER, "name": "train", "instance_type": "8xH100",
                                               "node_count": 2})
    assert created.status_code == 201, created.text
    cluster = created.json()
    names = sorted(node["name"] for node in admin.get(f"/v1/clusters/{cluster['id']}").json()["nodes"])
    assert names == ["train-0", "train-1"]
    problem = _problem(admin.post(f"/v1/clusters/{cluster['id']}/nodes/trian-1/actions",
                                  json={"action": "restart"}), 404)
    assert problem["field"] == "name"
    assert problem["detail"].startswith("cluster train has no node named 'trian-1'; did you mean train-1")
    assert problem["detail"].endswith("? Its nodes: train-0, train-1"), problem["detail"]
    history = _problem(admin.get(f"/v1/clusters/{cluster['id']}/nodes/trian-1/events"), 404)
    assert "did you mean train-1" in history["detail"] and "Its nodes: train-0, train-1" in history["detail"]
