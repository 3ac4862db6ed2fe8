"""gpucloud_security_group: plan-time rule checks from the API contract (ports against the protocol,
CIDR syntax, port bounds, rule count), the API body, empty rule lists kept null, updates sending only
changes, a delete refused while clusters use the group."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from provider.framework.diagnostics import Diagnostics
from provider.framework.validate import validate_config
from provider.resources.rest import IDEMPOTENCY_KEY
from provider.resources.security_group import SecurityGroupResource
from tests.provider.resources.fakes import context, problem

RESOURCE = SecurityGroupResource()
SSH = {"protocol": "tcp", "from_port": 22, "to_port": None, "cidr_blocks": ["203.0.113.0/24"],
       "description": None}
BODY = {"id": "sgr_1", "name": "lab", "description": None, "ingress": [SSH], "egress": [],
        "is_default": False, "cluster_ids": [], "created_at": "2026-11-26T01:00:00Z",
        "updated_at": "2026-11-26T01:00:00Z"}


def _errors(rule: dict[str, Any], direction: str = "ingress") -> dict[str, str]:
    diags = Diagnostics()
    validate_config(RESOURCE.schema, {"name": "lab", direction: [{**SSH, **rule}]}, diags)
    return {str(d.path): d.detail for d in diags if d.severity == "error"}


@pytest.mark.parametrize(
    ("rule", "attribute", "words"),
    [
        ({"protocol": "icmp"}, "from_port", "not allowed with protocol icmp"),
        ({"protocol": "all", "from_port": None, "to_port": 80}, "to_port", "not allowed with protocol all"),
        ({"protocol": "udp", "from_port": None}, "from_port", "needs from_port"),
        ({"from_port": 90, "to_port": 80}, "to_port", "below from_port"),
        ({"from_port": 0}, "from_port", "65535"),
        ({"to_port": 65536}, "to_port", "65535"),
        ({"protocol": "gre"}, "protocol", "tcp"),
        ({"cidr_blocks": ["10.0.0.0/8", "10.0.0.1/8"]}, "cidr_blocks[1]", "host bits set"),
        ({"cidr_blocks": ["10.0.0.0/8", "2001:db8::/129"]}, "cidr_blocks[1]", "not a CIDR block"),
        ({"cidr_blocks": ["anywhere"]}, "cidr_blocks[0]", "CIDR"),
    ],
)
def test_security_group_rule_checks_at_plan_time_name_the_attribute(
    rule: dict[str, Any], attribute: str, words: str
) -> None:
    errors = _errors(rule)
    matching = [d for path, d in errors.items() if path.startswith("ingress[0]") and attribute in path]
    assert matching and words in matching[0], errors


def test_security_group_valid_rules_and_too_many_rules() -> None:
    assert _errors({}) == {} and _errors({"protocol": "all", "from_port": None}, "egress") == {}
    assert _errors({"cidr_blocks": ["::/0", "0.0.0.0/0"], "from_port": 8000, "to_port": 8100}) == {}
    diags = Diagnostics()
    validate_config(RESOURCE.schema, {"name": "lab", "ingress": [SSH] * 51}, diags)
    assert [str(d.path) for d in diags if d.severity == "error"] == ["ingress"]


def _recorder(requests: list[tuple[str, Any]]) -> Any:
    def handler(request: httpx.Request) -> httpx.Response:
        sent = json.loads(request.content) if request.content else None
        requests.append((request.method, sent))
        return httpx.Response(201 if request.method == "POST" else 200, json={**BODY, **(sent or {})},
                              headers={"ETag": '"1"'})

    return handler


def test_security_group_create_sends_every_rule_field_and_keeps_unset_lists_null() -> None:
    requests: list[tuple[str, Any]] = []
    ctx = context(_recorder(requests), private={IDEMPOTENCY_KEY: "k"})
    planned = {"name": "lab", "description": None, "ingress": [SSH], "egress": None, "id": None,
               "is_default": None, "created_at": None}
    state = RESOURCE.create(ctx, planned)
    assert requests == [("POST", {"name": "lab", "description": None, "ingress": [SSH], "egress": []})]
    assert state is not None and state["ingress"] == [SSH] and state["egress"] is None
    requests.clear()
    wider = {**SSH, "to_port": 23}
    updated = RESOURCE.update(context(_recorder(requests)), {**state, "ingress": [wider]}, state)
    assert requests == [("PATCH", {"ingress": [wider]})]
    assert updated is not None and updated["ingress"] == [wider]


def test_security_group_delete_in_use_names_the_clusters() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return problem(409, "security_group_in_use", "in use", cluster_ids=["cls_1"])

    ctx = context(handler)
    with pytest.raises(Exception, match="cls_1"):
        RESOURCE.delete(ctx, {"id": "sgr_1"})
