"""Diagnostics that say what is wrong and what to do (issue 31): the API's own explanation is not followed
by a next step that contradicts it (a team scope is not a read-only key, a mistyped node is not a
deleted one), firewall rule errors name the rule's index, a single-GPU type on several nodes reports
node_count and nothing that depends on it, and an unknown instance type suggests the closest."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from provider.client import Forbidden, NotFound
from provider.framework import Context
from provider.framework.diagnostics import Diagnostics
from provider.framework.validate import validate_config
from provider.resources._common import api_error
from provider.resources.security_group import SecurityGroupResource
from tests.provider.resources.test_gpu_cluster_plan import BASE, errors, plan
from tests.provider.resources.test_gpu_cluster_plan import fresh_catalog as fresh_catalog  # autouse fixture


def _detail(error: Any, subject: str = "GPU cluster") -> str:
    ctx = Context(stop=threading.Event())
    api_error(ctx, "Error", error, subject=subject)
    (diagnostic,) = ctx.diagnostics
    return str(diagnostic.detail)


def test_out_of_scope_refusal_is_not_explained_as_a_read_only_key() -> None:
    detail = _detail(Forbidden(
        status=403, code="out_of_scope", field="labels.team",
        detail="this API key is scoped to team=nlp and cannot set team=vision: labels.team must be 'nlp'",
    ))
    assert "scoped to team=nlp and cannot set team=vision" in detail
    assert "read-only" not in detail and "admin role" not in detail


def test_a_bare_refusal_still_gets_the_role_hint() -> None:
    assert "member keys are read-only" in _detail(Forbidden(status=403, detail="not allowed"))


def test_missing_node_is_the_apis_explanation_not_a_vanished_object() -> None:
    detail = _detail(NotFound(status=404, field="name", detail="cluster train has no node named 'trian-1'; "
                              "did you mean train-1? Its nodes: train-0, train-1"), subject="cluster node")
    assert "Its nodes: train-0, train-1" in detail and "no longer exists" not in detail
    # The object of the request itself gone (no field): that is what it says.
    assert "no longer exists" in _detail(NotFound(status=404, detail="no cluster cls_1"))


def test_security_group_plan_errors_name_each_rules_index() -> None:
    ssh = {"protocol": "tcp", "from_port": 22, "to_port": None, "cidr_blocks": ["203.0.113.0/24"],
           "description": None}
    diags = Diagnostics()
    rules = [{**ssh, "from_port": 90, "to_port": 80}, {**ssh, "cidr_blocks": ["10.0.0.1/8"]}]
    validate_config(SecurityGroupResource().schema, {"name": "lab", "ingress": rules}, diags)
    details = sorted(d.detail for d in diags if d.severity == "error")
    assert details == [
        "ingress[0]: to_port 80 is below from_port 90; a range runs from low to high.",
        "ingress[1]: '10.0.0.1/8' has host bits set; write the network, 10.0.0.0/8.",
    ]


@pytest.mark.parametrize("orchestrator", [None, "slurm", "kubernetes"])
def test_single_gpu_type_on_three_nodes_reports_node_count_only(orchestrator: str | None) -> None:
    _, ctx = plan({**BASE, "instance_type": "1xH100", "node_count": 3, "orchestrator": orchestrator})
    found = errors(ctx)
    assert list(found) == ["node_count"], found
    assert "Set node_count = 1, or a fabric-capable instance_type (8xB200, 8xH100" in found["node_count"]


def test_unknown_instance_type_suggests_the_closest() -> None:
    _, ctx = plan({**BASE, "instance_type": "8xH1000"})
    found = errors(ctx)
    assert list(found) == ["instance_type"], found
    assert 'Instance type "8xH1000" does not exist; did you mean 8xH100' in found["instance_type"]
