"""gpucloud_gpu_cluster plans: defaults, plan-time values (cost, GPUs), every backend rule with its
attribute path, capacity, unknown values never rejected, FAILED clusters replaced."""

from __future__ import annotations

import datetime as dt
import threading
from decimal import Decimal
from typing import Any

import pytest

from provider.client import GpuCloudClient
from provider.cty import UNKNOWN, format_path, is_unknown
from provider.framework import Context
from provider.framework.plan import plan_resource
from provider.framework.schema import NestedAttribute
from provider.framework.state import schema_object
from provider.framework.validate import validate_config
from provider.resources import cluster_checks
from provider.resources._common import GpuCloudConfig
from provider.resources.gpu_cluster import GpuClusterResource
from provider.resources.gpu_cluster_schema import NODE_ATTRIBUTES
from provider.resources.rest import IDEMPOTENCY_KEY
from tests.provider.resources._gpu_cluster_fake_api import FakeClusterApi

RESOURCE = GpuClusterResource()
SCHEMA = RESOURCE.schema


@pytest.fixture(autouse=True)
def fresh_catalog():
    cluster_checks.forget_catalogs()
    yield
    cluster_checks.forget_catalogs()


def make_ctx(api: FakeClusterApi | None, private: dict[str, Any] | None = None) -> Context:
    if api is None:  # provider block not fully known: no client
        data = GpuCloudConfig("http://api.test", None, 30.0, 0, complete=False)
    else:
        client = GpuCloudClient("http://api.test", "k", transport=api.transport(), max_retries=0)
        data = GpuCloudConfig("http://api.test", "k", 30.0, 0, complete=True, client=client)
    return Context(stop=threading.Event(), provider_data=data, private=private or {})


def propose(config: dict[str, Any], prior: dict[str, Any] | None) -> dict[str, Any]:
    """What Terraform proposes: configured values, prior values for unconfigured computed attributes."""
    out = dict(config)
    for name, attr in SCHEMA.attributes.items():
        if config.get(name) is None and attr.computed and prior is not None:
            out[name] = prior.get(name)
        elif isinstance(attr, NestedAttribute) and config.get(name) is not None and prior and prior.get(name):
            out[name] = {
                k: (v if v is not None or not attr.attributes[k].computed else prior[name].get(k))
                for k, v in config[name].items()
            }
    return out


def plan(config: dict[str, Any], prior: dict[str, Any] | None = None, api: FakeClusterApi | None = None,
         *, configured: bool = True, private: dict[str, Any] | None = None,
         ) -> tuple[dict[str, Any] | None, Context]:
    full = schema_object(SCHEMA, config)
    planned, replace = plan_resource(SCHEMA, full, prior, propose(full, prior))
    ctx = make_ctx((api or FakeClusterApi()) if configured else None, private)
    ctx.requires_replace = replace
    validate_config(SCHEMA, full, ctx.diagnostics)  # what ValidateResourceConfig runs, as the server does
    RESOURCE.validate_config(ctx, full)
    out = RESOURCE.modify_plan(ctx, planned, prior, full)
    return out, ctx


def errors(ctx: Context) -> dict[str, str]:
    return {format_path(d.path) if d.path else "": f"{d.summary}: {d.detail}"
            for d in ctx.diagnostics if d.severity == "error"}


BASE = {"name": "train", "region": "us-east-1", "instance_type": "8xH100"}


def test_gpu_cluster_schema_every_attribute_described_and_immutables_replace():
    for name, attr in SCHEMA.attributes.items():
        assert attr.description, name
    replacing = {n for n, a in SCHEMA.attributes.items()
                 if any("forces a new resource" in m.description for m in a.plan_modifiers)}
    assert replacing == {"region", "instance_type", "orchestrator", "interconnect", "capacity_type",
                         "reservation_id", "host_pool_id"}
    billing = SCHEMA.attributes["billing"]
    assert isinstance(billing, NestedAttribute)
    assert billing.attributes["type"].plan_modifiers and billing.attributes["duration_days"].plan_modifiers
    assert not billing.attributes["on_expiry"].plan_modifiers


def test_gpu_cluster_plan_create_single_node_defaults_and_cost():
    planned, ctx = plan({"name": "one", "region": "us-east-1", "instance_type": "1xH100"})
    assert not ctx.diagnostics
    assert planned is not None
    assert planned["node_count"] == 1 and planned["orchestrator"] == "none"
    assert planned["interconnect"] == "ethernet"
    assert planned["billing"] == {"type": "on_demand", "duration_days": None, "on_expiry": "decommission"}
    assert planned["num_gpus"] == 1 and planned["gpu_type"] == "H100 SXM 80GB"
    assert planned["estimated_hourly_cost_usd"] == Decimal("4.29")
    assert planned["wait_for_running"] is True and planned["deletion_protection"] is False
    assert is_unknown(planned["id"]) and is_unknown(planned["nodes"]) and is_unknown(planned["status"])
    assert isinstance(ctx.private[IDEMPOTENCY_KEY], str)


def test_gpu_cluster_plan_multi_node_defaults_to_slurm_on_infiniband():
    planned, ctx = plan({**BASE, "node_count": 2})
    assert not ctx.diagnostics
    assert planned is not None
    assert (planned["orchestrator"], planned["interconnect"]) == ("slurm", "infiniband")
    assert planned["num_gpus"] == 16 and planned["estimated_hourly_cost_usd"] == Decimal("63.84")


def test_gpu_cluster_plan_reserved_cost_uses_the_term_discount():
    billing = {"type": "reserved", "duration_days": 30, "on_expiry": None}
    planned, ctx = plan({**BASE, "node_count": 2, "billing": billing})
    assert not ctx.diagnostics
    assert planned is not None
    # 3.99 x (1 - 0.25) x 16 GPUs
    assert planned["estimated_hourly_cost_usd"] == Decimal("47.88")
    assert planned["billing"]["on_expiry"] == "decommission"


@pytest.mark.parametrize(
    ("config", "path", "words"),
    [
        ({"region": "mars-1"}, "region", "us-east-1, us-west-2"),
        ({"instance_type": "9xZ9"}, "instance_type", "choose one of"),
        ({"instance_type": "1xH100", "node_count": 2}, "node_count", "not fabric-capable"),
        ({"interconnect": "efa"}, "interconnect",
         "supports infiniband, not efa; for EFA use instance_type 8xH100-EFA (offered in us-east-1)."),
        ({"instance_type": "8xB200"}, "instance_type", "offered in us-west-2"),
        ({"node_count": 5}, "node_count", "at most 4 are available"),
        ({"max_hourly_cost_usd": 10}, "max_hourly_cost_usd", "31.92 USD per hour"),
        ({"node_count": 2, "orchestrator": "none"}, "orchestrator", "needs orchestrator"),
        ({"node_count": 2, "container": "pytorch"}, "container", "single-node"),
        ({"billing": {"type": "reserved", "duration_days": None, "on_expiry": None}},
         "billing.duration_days", "needs billing.duration_days"),
        ({"billing": {"type": "on_demand", "duration_days": 7, "on_expiry": None}},
         "billing.duration_days", "only allowed"),
        ({"billing": {"type": None, "duration_days": 7, "on_expiry": None}},  # the default type
         "billing.duration_days", "only allowed"),
        ({"max_hourly_cost_usd": Decimal("12.3456789")}, "max_hourly_cost_usd", "4 decimal places"),
        ({"labels": {"Bad Key": "x"}}, 'labels["Bad Key"]', "key must be 1-63 lowercase"),
        ({"capacity_type": "cheap"}, "capacity_type", "spot_with_fallback"),
    ],
)
def test_gpu_cluster_plan_rejects_invalid_config_at_its_path(config, path, words):
    _, ctx = plan({**BASE, **config})
    found = errors(ctx)
    assert path in found, found
    assert words in found[path]


def warnings(ctx: Context) -> dict[str, str]:
    return {format_path(d.path) if d.path else "": f"{d.summary}: {d.detail}"
            for d in ctx.diagnostics if d.severity == "warning"}


@pytest.mark.parametrize(
    ("config", "path", "words"),
    [
        ({"shared_volume_ids": ["vol_west"]}, "shared_volume_ids", "is in us-west-2"),
        ({"ssh_key_ids": ["key_missing"]}, "ssh_key_ids", "No SSH key"),
    ],
)
def test_gpu_cluster_plan_problems_of_referenced_objects_warn_without_blocking_destroy(config, path, words):
    # terraform destroy plans a never-created cluster as a create first: an error would block it.
    planned, ctx = plan({**BASE, **config})
    assert planned is not None and not errors(ctx)
    assert words in warnings(ctx)[path] and "The apply will fail on it." in warnings(ctx)[path]


def test_gpu_cluster_plan_unknown_values_are_never_rejected():
    planned, ctx = plan({**BASE, "region": UNKNOWN, "node_count": UNKNOWN, "shared_volume_ids": UNKNOWN})
    assert not ctx.diagnostics
    assert planned is not None
    assert is_unknown(planned["orchestrator"]) and is_unknown(planned["estimated_hourly_cost_usd"])
    assert planned["interconnect"] == "infiniband"  # known from the instance type alone


def test_gpu_cluster_plan_without_configured_provider_skips_catalog_checks():
    planned, ctx = plan({**BASE, "region": "mars-1"}, configured=False)
    assert not ctx.diagnostics
    assert planned is not None and is_unknown(planned["estimated_hourly_cost_usd"])


def state_of(**overrides: Any) -> dict[str, Any]:
    base = schema_object(SCHEMA, {
        **BASE, "id": "cls_1", "node_count": 1, "orchestrator": "slurm", "interconnect": "infiniband",
        "billing": {"type": "on_demand", "duration_days": None, "on_expiry": "decommission"},
        "deletion_protection": False, "node_repair": "auto", "capacity_type": "on_demand",
        "scale_down_grace_minutes": 30, "wait_for_running": True, "status": "RUNNING",
        "phase": "Ready",
        "num_gpus": 8, "gpu_type": "H100 SXM 80GB", "created_at": "2026-11-26T01:00:00Z", "nodes": [],
        "nccl_env": {}, "estimated_hourly_cost_usd": Decimal("31.92"),
    })
    base.update(overrides)
    return base


def config_of(state: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    keys = ("name", "region", "instance_type", "node_count")
    return {**{k: state[k] for k in keys}, **overrides}


def test_gpu_cluster_plan_unchanged_is_empty():
    prior = state_of()
    planned, ctx = plan(config_of(prior), prior)
    assert not ctx.diagnostics
    assert planned == prior and not ctx.requires_replace


def test_gpu_cluster_plan_scale_up_checks_added_nodes_and_shows_new_cost():
    prior = state_of(node_count=2, num_gpus=16)
    planned, ctx = plan(config_of(prior, node_count=6), prior)
    assert not ctx.diagnostics  # 4 more nodes: exactly what is available
    assert planned is not None
    assert planned["num_gpus"] == 48 and planned["estimated_hourly_cost_usd"] == Decimal("191.52")
    assert planned["orchestrator"] == "slurm" and planned["id"] == "cls_1"
    planned, ctx = plan(config_of(prior, node_count=7), prior)
    found = errors(ctx)["node_count"]
    assert "add 5 nodes" in found and "node_count can grow to 6 at most" in found
    assert "choose another region" not in found and "changing region replaces this one" in found


def test_gpu_cluster_plan_scaling_a_bare_cluster_past_one_node_is_refused():
    prior = state_of(orchestrator="none")
    _, ctx = plan(config_of(prior, node_count=2), prior)
    assert "without an orchestrator" in errors(ctx)["node_count"]


def test_gpu_cluster_plan_immutable_change_requires_replace():
    prior = state_of()
    _, ctx = plan(config_of(prior, region="us-west-2"), prior)
    assert [format_path(p) for p in ctx.requires_replace] == ["region"]
    billing = {"type": "reserved", "duration_days": 7, "on_expiry": None}
    _, ctx = plan(config_of(prior, billing=billing), prior)
    assert sorted(format_path(p) for p in ctx.requires_replace) == ["billing.duration_days", "billing.type"]


def test_gpu_cluster_plan_capacity_type_defaults_on_demand_and_replaces_when_changed():
    planned, ctx = plan(dict(BASE))
    assert not ctx.diagnostics and planned is not None and planned["capacity_type"] == "on_demand"
    prior = state_of(capacity_type="on_demand")
    _, ctx = plan(config_of(prior, capacity_type="spot_with_fallback"), prior)
    assert [format_path(p) for p in ctx.requires_replace] == ["capacity_type"]
    older = state_of(capacity_type=None)  # written by a provider before capacity_type: on-demand
    _, ctx = plan(config_of(older), older)
    assert not ctx.requires_replace


def test_gpu_cluster_plan_on_expiry_changes_in_place():
    prior = state_of()
    billing = {"type": None, "duration_days": None, "on_expiry": "convert_to_on_demand"}
    planned, ctx = plan(config_of(prior, billing=billing), prior)
    assert not ctx.diagnostics and not ctx.requires_replace
    assert planned is not None and planned["billing"]["on_expiry"] == "convert_to_on_demand"


def test_gpu_cluster_plan_failed_cluster_is_replaced_with_a_reason():
    prior = state_of(status="FAILED", phase="Failed")
    planned, ctx = plan(config_of(prior), prior, private={"failure_reason": "node train-1: XID 79"})
    assert planned is not None and is_unknown(planned["status"])
    assert [format_path(p) for p in ctx.requires_replace] == ["status"]
    (warning,) = [d for d in ctx.diagnostics if d.severity == "warning"]
    assert "FAILED (node train-1: XID 79)" in warning.detail and "create a new one" in warning.detail


def test_gpu_cluster_plan_still_converging_cluster_resumes_the_wait_in_place():
    # Saved by an interrupted or timed-out wait: an in-place update (status known after apply), never
    # a replacement.
    for status, phase in (("PROVISIONING", "ProvisioningNodes"), ("RUNNING", "Reconfiguring")):
        prior = state_of(status=status, phase=phase)
        planned, ctx = plan(config_of(prior), prior)
        assert not ctx.diagnostics and not ctx.requires_replace
        assert planned is not None and is_unknown(planned["status"]) and is_unknown(planned["nodes"])
        assert planned["id"] == "cls_1" and planned["created_at"] == prior["created_at"]


def test_gpu_cluster_plan_settled_or_unwatched_cluster_is_not_waited_for():
    for prior in (state_of(), state_of(status="PENDING", phase="Admitted", wait_for_running=False)):
        planned, ctx = plan(config_of(prior, wait_for_running=prior["wait_for_running"]), prior)
        assert not ctx.diagnostics and planned == prior


def test_gpu_cluster_plan_destroy_of_protected_cluster_fails_at_plan():
    ctx2 = make_ctx(FakeClusterApi())
    assert RESOURCE.modify_plan(ctx2, None, state_of(deletion_protection=True), None) is None
    assert "deletion_protection" in errors(ctx2)
    assert RESOURCE.modify_plan(make_ctx(None), None, state_of(), None) is None


def test_gpu_cluster_plan_replacing_a_protected_cluster_fails_at_plan():
    prior = state_of(deletion_protection=True)
    _, ctx = plan(config_of(prior, region="us-west-2", deletion_protection=True), prior)
    found = errors(ctx)
    assert "Changing region replaces cluster cls_1" in found["deletion_protection"]


RUNTIME = {
    "nodes": [{"name": "train-0", "instance_id": "nod_0", "role": "standalone", "status": "RUNNING",
               "private_ip": "10.0.0.2", "public_ip": "203.0.113.9", "fabric": "ib-1", "partition_key": None,
               "hcas": [], "topology_path": None, "leaves": [], "efa_interfaces": []}],
    "login": {"host": "train-0", "port": 22, "user": "ubuntu", "ssh_command": "ssh ubuntu@203.0.113.9"},
    "slurm": {"controller": "train-0", "partitions": ["gpu"]},
    "kubernetes": None,
    "nccl_env": {"NCCL_IB_HCA": "mlx5"},
}
STABLE = ("nodes", "login", "slurm", "kubernetes", "nccl_env", "num_gpus", "gpu_type", "reservation")


def test_gpu_cluster_plan_label_change_keeps_runtime_values_known():
    prior = state_of(**RUNTIME)
    planned, ctx = plan(config_of(prior, labels={"team": "ml"}), prior)
    assert not ctx.diagnostics and planned is not None
    assert {n: planned[n] for n in STABLE} == {n: prior[n] for n in STABLE}
    # No engine work: a settled cluster keeps its status and phase; engine work may move them.
    assert (planned["status"], planned["phase"]) == ("RUNNING", "Ready")
    scaled, _ = plan(config_of(prior, container="pytorch"), prior)
    assert scaled is not None and is_unknown(scaled["status"]) and is_unknown(scaled["phase"])


def test_gpu_cluster_plan_changes_that_alter_runtime_values_plan_them_unknown():
    prior = state_of(**RUNTIME)
    scaled, _ = plan(config_of(prior, node_count=2), prior)
    assert scaled is not None and all(is_unknown(scaled[n]) for n in ("nodes", "login", "slurm"))
    assert scaled["num_gpus"] == 16 and scaled["nccl_env"] == prior["nccl_env"]
    renamed, _ = plan(config_of(prior, name="other"), prior)
    assert renamed is not None and is_unknown(renamed["login"]) and is_unknown(renamed["nodes"])
    converging = state_of(**RUNTIME, status="CONFIGURING")
    relabelled, _ = plan(config_of(converging, labels={"team": "ml"}), converging)
    assert relabelled is not None and is_unknown(relabelled["nodes"]) and is_unknown(relabelled["login"])


def test_gpu_cluster_plan_reserved_ip_change_plans_the_address_unknown_and_checks_the_reference():
    prior = state_of(**RUNTIME)
    moved, ctx = plan(config_of(prior, reserved_ip_id="rip_west"), prior)
    assert moved is not None and not errors(ctx)
    assert all(is_unknown(moved[n]) for n in ("login", "nodes", "kubernetes"))
    assert moved["slurm"] == prior["slurm"] and moved["nccl_env"] == prior["nccl_env"]
    assert "is in us-west-2, the cluster in us-east-1" in warnings(ctx)["reserved_ip_id"]
    _, ctx = plan(config_of(prior, reserved_ip_id="rip_gone"), prior)
    assert "No reserved IP with id" in warnings(ctx)["reserved_ip_id"]
    _, ctx = plan(config_of(prior, reserved_ip_id="not an id"), prior)
    assert "reserved_ip_id" in errors(ctx)


def test_gpu_cluster_plan_cost_above_a_lowered_limit_warns_unless_the_change_raises_it():
    prior = state_of(max_hourly_cost_usd=100)
    planned, ctx = plan(config_of(prior, max_hourly_cost_usd=10), prior)  # 31.92 USD/h now
    assert planned is not None and not errors(ctx)
    assert "above max_hourly_cost_usd = 10" in warnings(ctx)["max_hourly_cost_usd"]
    planned, ctx = plan(config_of(prior, max_hourly_cost_usd=10, labels={"a": "b"}), prior)
    assert not errors(ctx)
    _, ctx = plan(config_of(prior, max_hourly_cost_usd=10, node_count=2), prior)
    assert "would cost 63.84 USD per hour" in errors(ctx)["max_hourly_cost_usd"]


def test_gpu_cluster_plan_spot_is_priced_and_capped_at_the_rate_charged():
    # Issue 27: a spot 8xH100 planned 31.92 USD/h (on-demand) and max_hourly_cost_usd = 20 refused it.
    planned, ctx = plan({**BASE, "capacity_type": "spot", "max_hourly_cost_usd": 20})
    assert planned is not None and not errors(ctx), errors(ctx)
    assert planned["estimated_hourly_cost_usd"] == Decimal("12.768")
    # With fallback it costs the spot rate, and up to on-demand while on-demand nodes stand in.
    planned, ctx = plan({**BASE, "capacity_type": "spot_with_fallback", "max_hourly_cost_usd": 20})
    assert planned is not None and planned["estimated_hourly_cost_usd"] == Decimal("12.768")
    assert "31.92 USD per hour with on-demand nodes standing in" in errors(ctx)["max_hourly_cost_usd"]
    _, ctx = plan({**BASE, "capacity_type": "spot_with_fallback", "max_hourly_cost_usd": 32})
    assert not errors(ctx)


RESERVED_30 = {"type": "reserved", "duration_days": 30, "on_expiry": "decommission"}


def test_gpu_cluster_plan_reserved_create_shows_the_upfront_charge():
    planned, ctx = plan({**BASE, "node_count": 2, "billing": RESERVED_30})
    assert not ctx.diagnostics and planned is not None
    term = planned["reservation"]
    # 47.88 USD/h x 24 h x 30 days, charged when the cluster first runs.
    assert term["upfront_cost_usd"] == Decimal("34473.6")
    assert is_unknown(term["starts_at"]) and is_unknown(term["ends_at"])
    on_demand, _ = plan({**BASE, "node_count": 2})
    assert on_demand is not None and on_demand["reservation"] is None


def _started_term(days_in: float) -> dict[str, Any]:
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    start = now - dt.timedelta(days=days_in)
    return {"starts_at": start.isoformat().replace("+00:00", "Z"),
            "ends_at": (start + dt.timedelta(days=30)).isoformat().replace("+00:00", "Z"),
            "upfront_cost_usd": Decimal("46656")}


def test_gpu_cluster_plan_destroy_or_replace_of_a_running_term_warns_what_is_forfeited():
    prior = state_of(billing=RESERVED_30, reservation=_started_term(days_in=10))
    ctx = make_ctx(FakeClusterApi())
    assert RESOURCE.modify_plan(ctx, None, prior, None) is None
    (warning,) = ctx.diagnostics
    assert warning.severity == "warning" and warning.summary == "Reserved Term Forfeited"
    assert "20.0 days are left" in warning.detail
    assert "about 31,104 USD of the 46,656.00 USD" in warning.detail

    longer = {**RESERVED_30, "duration_days": 60}
    _, ctx = plan(config_of(prior, billing=longer), prior)
    assert [format_path(p) for p in ctx.requires_replace] == ["billing.duration_days"]
    assert "Replacing cluster cls_1" in warnings(ctx)["reservation"]
    relabelled, ctx = plan(config_of(prior, billing=RESERVED_30, labels={"a": "b"}), prior)
    assert "reservation" not in warnings(ctx) and not ctx.requires_replace
    assert relabelled is not None and relabelled["reservation"] == prior["reservation"]
    ended = state_of(billing=RESERVED_30, reservation=_started_term(days_in=31))
    ctx = make_ctx(FakeClusterApi())
    RESOURCE.modify_plan(ctx, None, ended, None)
    assert not ctx.diagnostics


def test_gpu_cluster_plan_refuses_an_orchestrator_the_backends_driver_does_not_offer(monkeypatch):
    # A backend on the local driver publishes no Kubernetes in the instance types' rules.
    import tests.provider.resources._gpu_cluster_fake_api as fake

    local = [{**t, "rules": {**t["rules"], "orchestrators_single_node": ["slurm", "none"],
                             "orchestrators_multi_node": ["slurm"]}} for t in fake.CATALOG_TYPES]
    monkeypatch.setattr(fake, "CATALOG_TYPES", local)
    _, ctx = plan({**BASE, "node_count": 2, "orchestrator": "kubernetes"})
    found = errors(ctx)
    assert "clusters of 2 nodes of 8xH100 with slurm, not kubernetes" in found["orchestrator"], found
    _, ctx = plan({**BASE, "node_count": 2, "orchestrator": "slurm"})
    assert "orchestrator" not in errors(ctx)
    _, ctx = plan({**BASE, "node_count": 2, "orchestrator": "none"})  # the static rule says it, once
    assert errors(ctx)["orchestrator"].count("Orchestrator") == 1


def test_gpu_cluster_plan_running_cluster_with_a_failed_or_repairing_node_plans_nothing():
    # Day 2: a node repaired in place (auto) or left failed (manual) neither replaces the cluster nor
    # resumes a wait; a failed node is named in a warning with how it comes back.
    node = {"name": "train-1", "instance_id": "nod_9", "role": "worker", "status": "PROVISIONING",
            "health": "repairing"}
    repairing = state_of(phase="Repairing", nodes=[dict.fromkeys(NODE_ATTRIBUTES) | node])
    planned, ctx = plan(config_of(repairing), repairing)
    assert not ctx.diagnostics and not ctx.requires_replace and planned == repairing

    failed_node = dict.fromkeys(NODE_ATTRIBUTES) | node | {"status": "FAILED", "health": "failed"}
    degraded = state_of(phase="Degraded", node_repair="manual", nodes=[failed_node])
    planned, ctx = plan(config_of(degraded, node_repair="manual"), degraded)
    assert not ctx.requires_replace and planned == degraded
    (warning,) = ctx.diagnostics
    assert warning.severity == "warning" and warning.summary == "Cluster Has Failed Nodes"
    assert "train-1" in warning.detail and '"action": "replace"' in warning.detail


def test_gpu_cluster_plan_autoscaling_makes_node_count_the_engines():
    scaling = {"min_nodes": 2, "max_nodes": 8, "scale_down_idle_minutes": None}
    planned, ctx = plan({**BASE, "autoscaling": scaling})
    assert not ctx.diagnostics and planned is not None
    assert is_unknown(planned["node_count"]) and planned["orchestrator"] == "slurm"
    assert planned["autoscaling"] == {"min_nodes": 2, "max_nodes": 8, "scale_down_idle_minutes": 10}
    # The autoscaler moved it from 2 to 5: no drift; a new range makes it known after apply.
    prior = state_of(node_count=5, num_gpus=40, autoscaling={**scaling, "scale_down_idle_minutes": 10})
    planned, ctx = plan({**BASE, "autoscaling": scaling}, prior)
    assert not ctx.diagnostics and planned == prior
    # A new range moves node_count into it, to the nearest bound, as the API does.
    planned, _ = plan({**BASE, "autoscaling": {**scaling, "max_nodes": 4}}, prior)
    assert planned is not None and planned["node_count"] == 4 and planned["num_gpus"] == 32
    assert is_unknown(planned["status"])  # a scale down: engine work
    # Without autoscaling a node_count left out is 1, as before.
    planned, _ = plan(dict(BASE), None)
    assert planned is not None and planned["node_count"] == 1


@pytest.mark.parametrize(("config", "path", "words"), [
    ({"node_count": 3, "autoscaling": {"min_nodes": 1, "max_nodes": 4}}, "node_count",
     "node_count and autoscaling cannot both be set"),
    ({"autoscaling": {"min_nodes": 4, "max_nodes": 2}}, "autoscaling.max_nodes",
     "max_nodes (2) must be at least autoscaling.min_nodes (4)"),
    ({"autoscaling": {"min_nodes": 1, "max_nodes": 300}}, "autoscaling.max_nodes", "lower it to 256"),
    ({"autoscaling": {"min_nodes": 5, "max_nodes": 8}}, "autoscaling.min_nodes", "at most 4 are available"),
    ({"autoscaling": {"min_nodes": 0, "max_nodes": 2}}, "autoscaling.min_nodes", "1"),
])
def test_gpu_cluster_plan_autoscaling_range_is_checked_at_plan(config, path, words):
    _, ctx = plan({**BASE, **config})
    assert words in errors(ctx).get(path, ""), errors(ctx)


def _worker(index: int) -> dict[str, Any]:
    return dict.fromkeys(NODE_ATTRIBUTES) | {
        "name": f"train-{index}", "instance_id": f"nod_{index}", "role": "worker", "status": "RUNNING",
        "private_ip": f"10.0.0.{index + 2}", "hcas": [], "leaves": [], "efa_interfaces": []}


MULTI = {
    "nodes": [_worker(i) for i in range(3)],
    "login": {"host": "train-jumphost", "port": 22, "user": "ubuntu",
              "ssh_command": "ssh ubuntu@203.0.113.9"},
    "slurm": {"controller": "train-jumphost", "partitions": ["gpu"]},
    "kubernetes": None, "nccl_env": {"NCCL_IB_HCA": "mlx5"}, "node_count": 3, "num_gpus": 24,
    "estimated_hourly_cost_usd": Decimal("95.76"),
}


def test_gpu_cluster_plan_autoscaling_range_change_keeps_everything_else_known():
    # Issue 27: raising max_nodes planned node_count, nodes, login, slurm and num_gpus unknown.
    scaling = {"min_nodes": 1, "max_nodes": 3, "scale_down_idle_minutes": 10}
    prior = state_of(**MULTI, autoscaling=scaling)
    planned, ctx = plan({**BASE, "autoscaling": {**scaling, "max_nodes": 6}}, prior)
    assert planned is not None and not errors(ctx)
    changed = {name for name in SCHEMA.attributes if planned[name] != prior[name]}
    assert changed == {"autoscaling"}, changed


def test_gpu_cluster_plan_scale_back_keeps_the_survivors_and_the_login_known():
    # Issue 27: a drift plan undoing a scale showed every node as `- {...} -> null` and login unknown.
    prior = state_of(**MULTI)
    planned, ctx = plan(config_of(prior, node_count=2), prior)
    assert planned is not None and not errors(ctx)
    # Which nodes go is the engine's choice (idle first, then the newest; issue 28): without the backend's
    # preview (this fake API has none) the survivors are unknown.
    assert len(planned["nodes"]) == 2 and all(is_unknown(n) for n in planned["nodes"])
    assert (planned["login"], planned["slurm"]) == (prior["login"], prior["slurm"])
    assert planned["num_gpus"] == 16 and planned["estimated_hourly_cost_usd"] == Decimal("63.84")
    assert is_unknown(planned["status"])  # the engine releases a node
    grown, _ = plan(config_of(prior, node_count=4), prior)
    assert grown is not None and grown["nodes"][:3] == prior["nodes"] and is_unknown(grown["nodes"][3])
    assert grown["login"] == prior["login"] and grown["num_gpus"] == 32
    single, _ = plan(config_of(prior, node_count=1), prior)  # every node's role and the login host change
    assert single is not None and is_unknown(single["nodes"]) and is_unknown(single["login"])
    renamed, _ = plan(config_of(prior, node_count=2, name="other"), prior)  # host names follow the name
    assert renamed is not None and is_unknown(renamed["nodes"]) and is_unknown(renamed["login"])


def test_gpu_cluster_plan_volume_detach_keeps_nodes_and_login_known():
    prior = state_of(**MULTI, shared_volume_ids=["vol_1"], ssh_key_ids=["key_1"])
    planned, ctx = plan(config_of(prior, ssh_key_ids=["key_1"]), prior)
    assert planned is not None and not errors(ctx)
    assert planned["shared_volume_ids"] is None
    assert {n: planned[n] for n in STABLE} == {n: prior[n] for n in STABLE}
    assert is_unknown(planned["status"])  # the engine unmounts it
