"""Every 422 input rule of the API is also a plan-time error of the provider, at the attribute to blame.

The walk enumerates the rules from their one source: the JSON Schema keywords of the request schemas and
their `x-gpucloud-rules`, as the app publishes them. For each rule it sends a body breaking it to the
real API (in process) and runs the provider's ValidateResourceConfig on the equivalent configuration:
both must refuse, the API naming the field and the provider the attribute path. A keyword or rule this
walk cannot break fails it, so a new rule cannot slip past the provider unnoticed.

The API's other 422 rules need the catalog or stored objects (unknown regions, fabric offers, missing or
foreign-region references, the cost ceiling): the provider checks them while planning, against the same
API, so the walk runs those through PlanResourceChange with the provider's client on the in-process API
(references to other objects are warnings there, so that they never block a destroy: `PLAN_WARNINGS`).
Rules between fields that the backend's code states instead of an `x-gpucloud-rule` (region and
instance_type required without a host pool) go through ValidateResourceConfig too (`VALIDATE_BREAKERS`).
Every error code the backend's sources can raise must be walked one way or the other, or be listed in
`NOT_PLAN_TIME` with the reason.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from backend.api.openapi import render_openapi
from backend.api.problems import _CODES as SCHEMA_CODES
from backend.app import create_app
from backend.domain.input_rules import RULES
from backend.settings import Settings
from backend.store.db import make_engine
from backend.store.migrate import upgrade_to_head
from provider._proto import tfplugin6_pb2 as pb
from provider.client import GpuCloudClient
from provider.cty import encode_msgpack
from provider.framework.server import ProviderServer
from provider.framework.state import schema_object
from provider.resources import api_rules, cluster_checks
from provider.resources._common import GpuCloudConfig
from provider.resources.provider import GpuCloudProvider
from tests.backend.conftest import make_tenant
from tests.backend.keys import ed25519_key, rsa_key
from tests.contract.private_keys import private_key

REPO = Path(__file__).resolve().parents[2]
# Request schema -> (collection, Terraform resource type, API -> attribute renames, a valid body).
RESOURCES: dict[str, tuple[str, str, dict[str, str], dict[str, Any]]] = {
    "ClusterCreate": (
        "/v1/clusters",
        "gpucloud_gpu_cluster",
        {"volume_ids": "shared_volume_ids"},
        {"name": "train", "region": "us-east-1", "instance_type": "8xH100"},
    ),
    "SshKeyCreate": ("/v1/ssh-keys", "gpucloud_ssh_key", {}, {"name": "deploy", "public_key": None}),
    "VolumeCreate": (
        "/v1/volumes", "gpucloud_shared_volume", {}, {"name": "data", "region": "us-east-1", "size_tib": 1}
    ),
    "BudgetCreate": ("/v1/budgets", "gpucloud_budget", {}, {"name": "nlp", "amount_usd": 100}),
    "SecurityGroupCreate": ("/v1/security-groups", "gpucloud_security_group", {}, {"name": "lab"}),
    "HostPoolCreate": ("/v1/host-pools", "gpucloud_host_pool", {}, {
        "name": "lab", "region": "on-prem", "ssh_private_key": private_key("ed25519", "openssh"),
        "hosts": [{"address": "10.0.0.5"}]}),
}
# Lists of objects (`ingress[].protocol` in the table): a breaking value goes into one valid element.
OBJECT_LISTS = {"ingress", "egress", "partitions", "qos", "hosts"}
VALID_RULE = {"protocol": "tcp", "from_port": 22, "cidr_blocks": ["0.0.0.0/0"]}
# A valid element of each list of objects (the security groups' rules, slurm_config's partitions and QoS).
# A valid value of each map whose values are objects (by the schema they refer to).
VALID_MAP_VALUES: dict[str, Any] = {"#/components/schemas/RegistryLogin": {"username": "u", "password": "p"}}
VALID_ELEMENTS: dict[str, dict[str, Any]] = {
    "ingress": VALID_RULE, "egress": VALID_RULE, "partitions": {"name": "debug"}, "qos": {"name": "urgent"},
    "hosts": {"address": "10.0.0.5"},
}

# One body fragment breaking each x-gpucloud-rule, by (schema, code).
RULE_BREAKERS: dict[tuple[str, str], Any] = {
    ("ClusterCreate", "invalid_name"): lambda: {"name": "9lives"},
    ("ClusterCreate", "orchestrator_required"): lambda: {"node_count": 2, "orchestrator": "none"},
    ("ClusterCreate", "container_requires_single_node"): lambda: {"node_count": 2, "container": "base"},
    ("ClusterCreate", "required"): lambda: {"billing": {"type": "reserved"}},
    ("ClusterCreate", "not_allowed"): lambda: {"billing": {"duration_days": 7}},
    ("ClusterCreate", "spot_not_reservable"): lambda: {
        "capacity_type": "spot", "billing": {"type": "reserved", "duration_days": 7}
    },
    ("SshKeyCreate", "private_key"): lambda: {"public_key": private_key("ed25519", "openssh")},
    ("SshKeyCreate", "unsupported_key_type"): lambda: {"public_key": "ssh-dss AAAAB3NzaC1kc3MAAACBAP"},
    ("SshKeyCreate", "invalid_ssh_key"): lambda: {
        "public_key": "ssh-ed25519 " + rsa_key(2048).split()[1]  # the data holds another type
    },
    ("SshKeyCreate", "key_too_weak"): lambda: {"public_key": rsa_key(1024)},
    # One rule per list: by (schema, code, field).
    **{
        ("SecurityGroupCreate", "invalid_security_rule", direction): lambda d=direction: {
            d: [{"protocol": "icmp", "from_port": 8, "cidr_blocks": ["0.0.0.0/0"]}]
        }
        for direction in OBJECT_LISTS
    },
}

# Candidates that break a `pattern` (the first that does is used).
PATTERN_BREAKERS = ("Not Valid!", "UPPER", " lead", "a\x01b", "-", "a_b")


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The real app on a fresh SQLite database (the walked rules are checked before anything is stored)."""
    tmp = tmp_path_factory.mktemp("walk")
    settings = Settings(database_url=f"sqlite:///{tmp / 'db'}", data_dir=tmp / "data",
                        embedded_worker=False, auth_cache_seconds=0)
    engine = make_engine(settings)
    upgrade_to_head(engine)
    engine.dispose()
    tenant = make_tenant(settings, "walk")
    app = create_app(settings)
    with TestClient(app, raise_server_exceptions=False,
                    headers={"Authorization": f"Bearer {tenant.admin_key}"}) as client:
        yield client
    app.state.gpucloud.engine.dispose()


SERVER = ProviderServer(GpuCloudProvider())


def test_api_rules_table_is_the_served_contract(api: TestClient) -> None:
    served = json.loads(render_openapi(api.app))  # type: ignore[arg-type]
    committed = json.loads((REPO / "proto" / "openapi.json").read_text())
    assert served == committed
    assert api_rules.extract(served) == api_rules.table(), "run scripts/generate.sh rules"


def _violations(c: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """(keyword, a value breaking it) for every constraint keyword of one JSON Schema."""
    for keyword, bound in c.items():
        if keyword in ("type", "default", "writeOnly"):
            continue  # Terraform checks types; defaults and write-only marks are no rule
        if keyword == "enum":
            yield keyword, "bogus"
        elif keyword == "minLength":
            yield keyword, "a" * (bound - 1)
        elif keyword == "maxLength":
            yield keyword, "a" * (bound + 1)
        elif keyword == "pattern":
            yield keyword, next(s for s in PATTERN_BREAKERS if re.search(bound, s) is None)
        elif keyword in ("minimum", "exclusiveMinimum"):
            yield keyword, int(bound) - (1 if keyword == "minimum" else 0)
        elif keyword == "maximum":
            yield keyword, int(bound) + 1
        elif keyword == "x-decimal-places":
            yield keyword, 12.3456789 if bound < 7 else 10.0 ** -(bound + 1)
        elif keyword == "x-max-digits":
            yield keyword, float("9" * (bound - 3) + ".999")
        elif keyword == "maxItems":
            numbers = c.get("items", {}).get("type") == "integer"
            yield keyword, [i + 1 if numbers else f"abc_{i}" for i in range(bound + 1)]
        elif keyword == "minItems":
            yield keyword, []
        elif keyword == "format":
            yield keyword, "tomorrow"
        elif keyword == "items":
            yield from ((f"items.{k}", [v]) for k, v in _violations(bound))
        elif keyword == "maxProperties":
            value = VALID_MAP_VALUES.get(c.get("additionalProperties", {}).get("$ref"), "v")
            yield keyword, {f"k{i}": value for i in range(bound + 1)}
        elif keyword == "propertyNames":
            yield from ((f"keys.{k}", {v: "v"}) for k, v in _violations(bound))
        elif keyword == "additionalProperties":
            if "$ref" not in bound:  # a map of objects: their fields are rules of their own schema
                yield from ((f"values.{k}", {"k": v}) for k, v in _violations(bound))
        elif keyword == "patternProperties":
            for pattern, values in bound.items():
                yield "keys.pattern", {next(s for s in PATTERN_BREAKERS if not re.search(pattern, s)): "v"}
                yield from ((f"values.{k}", {"k": v}) for k, v in _violations(values))
        else:
            raise AssertionError(f"the walk cannot break JSON Schema keyword {keyword!r}: teach it")


def _nest(dotted: str, value: Any) -> dict[str, Any]:
    first, _, rest = dotted.partition(".")
    if first.endswith("[]"):  # one element of a list of objects
        return {first[:-2]: [{**VALID_ELEMENTS[first[:-2]], **_nest(rest, value)}]}
    if first in OBJECT_LISTS and not rest and isinstance(value, list):  # the list's own size
        return {first: [VALID_ELEMENTS[first]] * len(value)}
    return {first: _nest(rest, value) if rest else value}


def walk() -> Iterator[Any]:
    for schema in RESOURCES:
        for field, c in api_rules.table()[schema]["fields"].items():
            for keyword, value in _violations(c):
                yield pytest.param(schema, field, None, lambda f=field, v=value: _nest(f, v),
                                   id=f"{schema}.{field}.{keyword}")
    for rule in RULES:
        breaker = RULE_BREAKERS.get((rule.schema, rule.code, rule.field)) or RULE_BREAKERS.get(
            (rule.schema, rule.code)
        )
        assert breaker is not None, f"no breaker for rule {rule.schema}/{rule.code}: add one"
        yield pytest.param(rule.schema, rule.field, rule, breaker, id=f"{rule.schema}.{rule.code}")


def _api_body(schema: str, fragment: dict[str, Any]) -> dict[str, Any]:
    body = {**RESOURCES[schema][3], **fragment}
    if schema == "SshKeyCreate" and body["public_key"] is None:  # each key registers once
        body["public_key"] = ed25519_key()
    return body


def _config(schema: str, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The Terraform configuration equivalent to an API body."""
    _, type_name, renames, _ = RESOURCES[schema]
    resource = SERVER._resources[type_name]
    config = schema_object(resource.schema, {})
    for name, value in body.items():
        attr = renames.get(name, name)
        if isinstance(value, dict) and attr in ("billing", "label_filter", "autoscaling"):
            value = {**dict.fromkeys(resource.schema.attributes[attr].attributes), **value}
        if attr in OBJECT_LISTS:
            empty = dict.fromkeys(resource.schema.attributes[attr].attributes)
            value = [{**empty, **element} for element in value]
        if isinstance(value, dict) and attr == "slurm_config":  # nested lists of objects inside
            nested = resource.schema.attributes[attr].attributes
            value = {**dict.fromkeys(nested), **value}
            for name in ("partitions", "qos"):
                if value[name] is not None:
                    value[name] = [{**dict.fromkeys(nested[name].attributes), **element}
                                   for element in value[name]]
        if isinstance(value, float):
            value = Decimal(str(value))
        config[attr] = value
    return type_name, config


def _provider_errors(schema: str, body: dict[str, Any]) -> list[tuple[list[str], str, str]]:
    type_name, config = _config(schema, body)
    resource = SERVER._resources[type_name]
    request = pb.ValidateResourceConfig.Request(
        type_name=type_name, config=pb.DynamicValue(msgpack=encode_msgpack(config, resource.schema.cty_type))
    )
    response = SERVER.validate_resource_config(request)
    return [
        ([s.attribute_name for s in d.attribute.steps if s.attribute_name], d.summary, d.detail)
        for d in response.diagnostics if d.severity == pb.Diagnostic.ERROR
    ]


@pytest.mark.parametrize("schema", list(RESOURCES))
def test_api_rules_walk_valid_bodies_pass_both(api: TestClient, schema: str) -> None:
    body = _api_body(schema, {})
    assert _provider_errors(schema, body) == []
    assert api.post(RESOURCES[schema][0], json=body).status_code in (200, 201, 202)


@pytest.mark.parametrize(("schema", "field", "rule", "breaker"), list(walk()))
def test_api_rules_walk_every_rule_is_refused_by_the_api_and_at_plan_time(
    api: TestClient, schema: str, field: str, rule: Any, breaker: Any
) -> None:
    body = _api_body(schema, breaker())
    response = api.post(RESOURCES[schema][0], json=body)
    assert response.status_code == 422, response.text
    # Element indexes as the table writes them: `ingress[0].protocol` is field `ingress[].protocol`.
    api_errors = [(re.sub(r"\[\d+\]", "[]", e["field"]), e["code"]) for e in response.json()["errors"]]
    api_fields = [f for f, _ in api_errors]
    assert any(f == field or f.startswith((field + ".", field + "[")) for f in api_fields), api_fields
    # A rule on a list of objects blames the element's attribute at fault.
    in_element = field in OBJECT_LISTS
    if rule is not None:
        assert any((f == rule.field or (in_element and f.startswith(rule.field + "[]."))) and c == rule.code
                   for f, c in api_errors), api_errors

    renames = RESOURCES[schema][2]
    first, *rest = field.replace("[]", "").split(".")
    attribute_path = [renames.get(first, first), *rest]
    found = _provider_errors(schema, body)

    def blamed(path: list[str]) -> bool:
        return path == attribute_path or (in_element and path[: len(attribute_path)] == attribute_path)

    assert any(blamed(path) for path, _, _ in found), found
    if rule is not None:
        assert any(blamed(path) and summary == rule.title for path, summary, _ in found), found


# Rules between fields that the backend's code states rather than an `x-gpucloud-rule` (the fields are
# optional in the schema): (schema, field, code) -> a body fragment breaking it. The provider refuses them
# in ValidateResourceConfig, as it does the contract's rules.
VALIDATE_BREAKERS: dict[tuple[str, str, str], dict[str, Any]] = {
    # Without host_pool_id (on a pool they default to the pool's region and its servers' type).
    ("ClusterCreate", "region", "required"): {"region": None},
    ("ClusterCreate", "instance_type", "required"): {"instance_type": None},
}


@pytest.mark.parametrize(("schema", "field", "code"), list(VALIDATE_BREAKERS), ids=lambda p: str(p))
def test_api_rules_walk_rules_of_the_backends_code_are_refused_by_validate(
    api: TestClient, schema: str, field: str, code: str
) -> None:
    body = _api_body(schema, VALIDATE_BREAKERS[(schema, field, code)])
    response = api.post(RESOURCES[schema][0], json=body)
    assert response.status_code == 422, response.text
    assert (field, code) in [(e["field"], e["code"]) for e in response.json()["errors"]], response.text
    first, *rest = field.split(".")
    assert [RESOURCES[schema][2].get(first, first), *rest] in [path for path, _, _ in
                                                              _provider_errors(schema, body)]


# Rules needing the catalog or stored objects: (schema, field, code) -> body fragment breaking it.
PLAN_BREAKERS: dict[tuple[str, str, str], dict[str, Any]] = {
    ("ClusterCreate", "region", "unknown_region"): {"region": "mars-1"},
    ("ClusterCreate", "instance_type", "unknown_instance_type"): {"instance_type": "9xZ9"},
    ("ClusterCreate", "node_count", "requires_fabric_capable_type"): {
        "instance_type": "1xH100", "node_count": 2
    },
    ("ClusterCreate", "interconnect", "unsupported_interconnect"): {"interconnect": "efa"},
    ("ClusterCreate", "instance_type", "not_offered_in_region"): {"instance_type": "8xB200"},
    ("ClusterCreate", "max_hourly_cost_usd", "cost_limit_exceeded"): {"max_hourly_cost_usd": 10},
    ("ClusterCreate", "ssh_key_ids", "not_found"): {"ssh_key_ids": ["ssh_0missing"]},
    ("ClusterCreate", "volume_ids", "region_mismatch"): {"volume_ids": ["<west volume>"]},
    ("VolumeCreate", "region", "unknown_region"): {"region": "mars-1"},
    ("ClusterCreate", "ttl", "conflicting_fields"): {"ttl": "8h", "expires_at": "2030-01-01T00:00:00Z"},
    ("ClusterCreate", "idle_teardown_minutes", "requires_slurm"): {"idle_teardown_minutes": 30},
    ("ClusterCreate", "node_count", "conflicts_with_autoscaling"): {
        "node_count": 2, "autoscaling": {"min_nodes": 1, "max_nodes": 2}
    },
    ("ClusterCreate", "autoscaling.max_nodes", "below_min_nodes"): {
        "autoscaling": {"min_nodes": 3, "max_nodes": 2}
    },
    ("ClusterCreate", "autoscaling.max_nodes", "exceeds_capacity"): {
        "autoscaling": {"min_nodes": 1, "max_nodes": 4000}
    },
    ("ClusterCreate", "autoscaling", "requires_slurm"): {
        "orchestrator": "kubernetes", "autoscaling": {"min_nodes": 1, "max_nodes": 2}
    },
    ("ClusterCreate", "slurm_config", "requires_slurm"): {"slurm_config": {"qos": [{"name": "urgent"}]}},
    # The rules between slurm_config's fields blame the element's attribute (the list here).
    ("ClusterCreate", "slurm_config.partitions", "reserved_name"): {
        "orchestrator": "slurm", "slurm_config": {"partitions": [{"name": "gpu"}]}
    },
    ("ClusterCreate", "slurm_config.qos", "duplicate_name"): {
        "orchestrator": "slurm", "slurm_config": {"qos": [{"name": "urgent"}, {"name": "urgent"}]}
    },
    ("ClusterCreate", "slurm_config.partitions", "multiple_defaults"): {
        "orchestrator": "slurm",
        "slurm_config": {"partitions": [{"name": "a", "default": True}, {"name": "b", "default": True}]},
    },
    ("ClusterCreate", "slurm_config.partitions", "above_max_time"): {
        "orchestrator": "slurm",
        "slurm_config": {
            "partitions": [{"name": "debug", "max_time_minutes": 30, "default_time_minutes": 60}]
        },
    },
    ("ClusterCreate", "slurm_config.prolog", "not_on_attached_volume"): {
        "orchestrator": "slurm", "slurm_config": {"prolog": "/mnt/shared/vol_0abc/prolog.sh"}
    },
    ("ClusterCreate", "slurm_config.epilog", "invalid_path"): {
        "orchestrator": "slurm", "slurm_config": {"epilog": "/mnt/shared/vol_0abc/../epilog.sh"}
    },
}
# Rules about other objects are plan-time warnings (the API still refuses them at apply): Terraform
# plans a never-created resource as a create before a destroy too, and an error there blocks destroy.
PLAN_WARNINGS = {
    ("ClusterCreate", "ssh_key_ids", "not_found"),
    ("ClusterCreate", "volume_ids", "region_mismatch"),
}
# Error codes the backend raises that are no plan-time input rule, and why.
NOT_PLAN_TIME = {
    "reservation_mismatch": "needs the reservation read from the API: the plan checks it with a lookup "
    "(cluster_checks.check_reservation), not with a rule of this table",
    "conflicts_with_reservation": "billing or capacity_type beside reservation_id: refused at apply (422 "
    "naming the field)",
    "duplicate": "an id listed twice: Terraform sets cannot hold duplicates",
    "immutable_field": "updates only: the provider plans a replacement instead",
    "no_price": "a catalog without a price: the operator's error, not the user's",
    "inconsistent_with_removed_nodes": "remove_node_names is no provider attribute",
    "unknown_node": "remove_node_names is no provider attribute",
    "controller_node": "remove_node_names is no provider attribute",
    "invalid_ttl": "the ttl's range (1 minute to 365 days) is checked at apply; its form at plan time",
    "already_elapsed": "updates only: whether the cluster has outlived a new ttl depends on its age then",
    "in_the_past": "depends on the moment of the apply: a plan made earlier would pass it",
    "invalid_datetime": "a date-time without a time zone: the plan-time date-time format requires one",
    "invalid_group_by": "a query parameter of GET /v1/billing/usage, no provider attribute",
    "too_many_lines": "a limit of the usage CSV export, no provider attribute",
    "unsupported_by_driver": "local driver only (this walk's API runs the simulated one); the provider "
    "reads the orchestrators the driver runs from the catalog rules (see test_local_driver.py)",
    "label_mismatch": "compares with the team labels of the cluster an IP is reserved for, read at apply",
    "invalid_private_key": "the provider never parses a private key (it may be write-only and unknown at "
    "plan time): the API refuses it at apply, naming ssh_private_key(_wo)",
    "encrypted_private_key": "as invalid_private_key: only a parse of the key can tell",
    "invalid_address": "an IP address or a DNS name: the API's parser, no JSON Schema rule; the provider "
    "checks the same at plan time (host_pool_hosts.ADDRESS, tested in test_host_pool.py)",
    "invalid_proxy_jump": "[user@]host[:port] parsed by the API at apply, naming proxy_jump",
    "duplicate_host": "the same host twice (address and port in use, with the pool's default port): refused "
    "at apply naming hosts[i]",
    "invalid_path": "shared_storage_path's form, refused at apply naming it",
    "host_pool_region": "needs the host pool read from the API: the plan checks it with a lookup "
    "(cluster_host_pool.check_host_pool, tested in test_gpu_cluster_host_pool.py)",
    "unsupported_on_host_pool": "a field beside host_pool_id: refused on the attribute at plan "
    "(cluster_host_pool.check_host_pool_config)",
    "no_shared_storage": "needs the host pool read from the API (its shared_storage_path): a plan "
    "warning from cluster_host_pool.check_host_pool, refused at apply",
    "no_fitting_instance_type": "instance_type left out on a host pool is the API's choice from its servers' "
    "checked GPUs: the plan leaves it unknown (known after apply) and the API refuses a pool with no "
    "fitting ready server at apply, naming instance_type",
}


def _backend_codes() -> set[str]:
    """Every error code a FieldError in the backend's sources is given (second argument or `code=`)."""
    codes = set()
    for source in (REPO / "backend").rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "FieldError":
                given = [*node.args[1:2], *(k.value for k in node.keywords if k.arg == "code")]
                codes |= {a.value for a in given if isinstance(a, ast.Constant)}
    return codes


def test_api_rules_walk_covers_every_code_the_backend_raises() -> None:
    walked = {rule.code for rule in RULES} | {code for _, _, code in (*PLAN_BREAKERS, *VALIDATE_BREAKERS)}
    walked |= set(SCHEMA_CODES.values()) | {"invalid_ssh_key"}  # JSON Schema keywords; the SSH parser
    assert _backend_codes() - walked - set(NOT_PLAN_TIME) == set()


@pytest.fixture(scope="module")
def planning_server(api: TestClient) -> ProviderServer:
    """A provider server configured with a client that reaches the in-process API."""

    def forward(request: httpx.Request) -> httpx.Response:
        answer = api.request(request.method, request.url.raw_path.decode(), content=request.content,
                             headers={"Content-Type": "application/json"})
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)

    server = ProviderServer(GpuCloudProvider())
    client = GpuCloudClient("http://api.test", "k", transport=httpx.MockTransport(forward), max_retries=0)
    server._provider_data = GpuCloudConfig("http://api.test", "k", 30.0, 0, client=client)
    cluster_checks.forget_catalogs()
    return server


def _plan_errors(server: ProviderServer, schema: str, body: dict[str, Any],
                 severity: int = pb.Diagnostic.ERROR) -> list[list[str]]:
    type_name, config = _config(schema, body)
    cty_type = server._resources[type_name].schema.cty_type
    response = server.plan_resource_change(pb.PlanResourceChange.Request(
        type_name=type_name,
        prior_state=pb.DynamicValue(msgpack=encode_msgpack(None, cty_type)),
        proposed_new_state=pb.DynamicValue(msgpack=encode_msgpack(config, cty_type)),
        config=pb.DynamicValue(msgpack=encode_msgpack(config, cty_type)),
    ))
    return [[s.attribute_name for s in d.attribute.steps if s.attribute_name]
            for d in response.diagnostics if d.severity == severity]


@pytest.mark.parametrize(("schema", "field", "code"), list(PLAN_BREAKERS), ids=lambda p: str(p))
def test_api_rules_walk_catalog_and_reference_rules_are_refused_at_plan_time(
    api: TestClient, planning_server: ProviderServer, schema: str, field: str, code: str
) -> None:
    fragment = dict(PLAN_BREAKERS[(schema, field, code)])
    if fragment.get("volume_ids") == ["<west volume>"]:
        west = api.post("/v1/volumes", json={"name": "west", "region": "us-west-2", "size_tib": 1})
        fragment["volume_ids"] = [west.json()["id"]]
    body = _api_body(schema, fragment)
    response = api.post(RESOURCES[schema][0], json=body)
    assert response.status_code == 422, response.text
    assert code in [e["code"] for e in response.json()["errors"] if e["field"].split("[")[0] == field]

    renames = RESOURCES[schema][2]
    severity = pb.Diagnostic.WARNING if (schema, field, code) in PLAN_WARNINGS else pb.Diagnostic.ERROR
    first, *rest = field.split(".")
    wanted = [renames.get(first, first), *rest]
    # An element's attribute of a list is blamed below the list (`slurm_config.partitions[1].default`).
    found = _plan_errors(planning_server, schema, body, severity)
    assert any(path[: len(wanted)] == wanted for path in found), found
