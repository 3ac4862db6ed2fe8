"""gpucloud_gpu_cluster on a host pool (`host_pool_id`, issue 32): what the API refuses on a pool is refused
at plan on the attribute to remove, the orchestrator defaults to Slurm, the cost is 0, the region's capacity
is not what limits it (the pool's free hosts are), and the id goes to the API and back into state."""

from __future__ import annotations

from typing import Any

import pytest

from provider.cty import UNKNOWN, format_path, is_unknown
from provider.framework import Context
from provider.framework.state import schema_object
from provider.resources import cluster_checks
from provider.resources.cluster_data_source import GpuClusterDataSource
from provider.resources.gpu_cluster_schema import spec_from_plan
from tests.provider.resources._gpu_cluster_fake_api import FakeClusterApi, host_pool
from tests.provider.resources.test_gpu_cluster_apply import ctx_for, planned
from tests.provider.resources.test_gpu_cluster_plan import RESOURCE, plan, state_of, warnings

ON_POOL = {"name": "own", "region": "us-east-1", "instance_type": "8xH100", "host_pool_id": "hpl_lab"}


@pytest.fixture(autouse=True)
def fresh_catalog():
    cluster_checks.forget_catalogs()
    yield
    cluster_checks.forget_catalogs()


def errors_at(ctx: Context, path: str) -> list[str]:
    return [f"{d.summary}: {d.detail}" for d in ctx.diagnostics
            if d.severity == "error" and d.path is not None and format_path(d.path) == path]


def all_errors(ctx: Context) -> list[str]:
    return [f"{format_path(d.path) if d.path else ''}: {d.detail}" for d in ctx.diagnostics
            if d.severity == "error"]


def test_host_pool_id_is_replaced_when_changed():
    prior = state_of(host_pool_id="hpl_lab", orchestrator="slurm", estimated_hourly_cost_usd=0)
    _, ctx = plan({**ON_POOL, "name": "train", "node_count": 1, "host_pool_id": "hpl_other"}, prior)
    assert [format_path(p) for p in ctx.requires_replace] == ["host_pool_id"]


def test_a_cluster_on_a_pool_plans_slurm_at_no_cost_beyond_the_regions_capacity():
    # 8 nodes of 8xH100: the region has 4 free, the pool 8: the pool's servers are what count.
    api = FakeClusterApi(host_pools={"hpl_lab": host_pool(8, free=8)})
    planned_, ctx = plan({**ON_POOL, "node_count": 8}, api=api)
    assert not ctx.diagnostics, [d.detail for d in ctx.diagnostics]
    assert planned_ is not None
    assert planned_["orchestrator"] == "slurm" and planned_["estimated_hourly_cost_usd"] == 0
    assert planned_["num_gpus"] == 64 and planned_["host_pool_id"] == "hpl_lab"


def test_one_node_on_a_pool_defaults_to_slurm_and_sends_it():
    planned_, ctx = plan(ON_POOL)
    assert not ctx.diagnostics and planned_ is not None
    assert planned_["orchestrator"] == "slurm"  # the API's default for one node is none, refused on a pool
    assert spec_from_plan(planned_)["orchestrator"] == "slurm"


@pytest.mark.parametrize(
    ("extra", "path", "words"),
    [
        ({"reservation_id": "rsv_1"}, "reservation_id", "capacity reservation holds the cloud's nodes"),
        ({"capacity_type": "spot"}, "capacity_type", "spot capacity is the cloud's"),
        ({"autoscaling": {"min_nodes": 1, "max_nodes": 2, "scale_down_idle_minutes": None}}, "autoscaling",
         "set node_count instead"),
        ({"reserved_ip_id": "rip_1"}, "reserved_ip_id", "answers on its own server's address"),
        ({"container": "pytorch"}, "container", "containers are not offered on host pools"),
        ({"container_images": {"torch": "nvcr.io/nvidia/pytorch:24.05-py3"}, "orchestrator": "slurm"},
         "container_images", "containers are not offered on host pools"),
        ({"billing": {"type": "reserved", "duration_days": 7, "on_expiry": None}}, "billing",
         "no compute charge to reserve"),
        ({"orchestrator": "kubernetes", "node_count": 2}, "orchestrator",
         "run Slurm, not kubernetes: set orchestrator = \"slurm\""),
        ({"orchestrator": "none"}, "orchestrator", "run Slurm, not none: set orchestrator = \"slurm\""),
    ],
)
def test_what_the_api_refuses_on_a_pool_is_an_error_on_that_attribute(extra: dict[str, Any], path: str,
                                                                       words: str):
    _, ctx = plan({**ON_POOL, **extra})
    found = errors_at(ctx, path)
    assert any(words in e and "host pool (host_pool_id)" in e for e in found), all_errors(ctx)
    assert all(format_path(d.path) != "host_pool_id" for d in ctx.diagnostics if d.path is not None)


def test_the_same_settings_without_a_pool_are_not_refused_for_it():
    _, ctx = plan({**ON_POOL, "host_pool_id": None, "capacity_type": "spot", "container": "pytorch"})
    assert not any("host_pool_id" in e for e in all_errors(ctx)), all_errors(ctx)


def test_an_unknown_pool_id_judges_nothing_and_leaves_what_it_decides_unknown():
    planned_, ctx = plan({**ON_POOL, "host_pool_id": UNKNOWN, "capacity_type": "spot"})
    assert not ctx.diagnostics
    assert planned_ is not None
    # One node: slurm on a pool, none elsewhere; and the price is 0 or the spot rate.
    assert is_unknown(planned_["orchestrator"]) and is_unknown(planned_["estimated_hourly_cost_usd"])
    several, _ = plan({**ON_POOL, "host_pool_id": UNKNOWN, "node_count": 2})
    assert several is not None and several["orchestrator"] == "slurm"


def test_the_pool_is_in_another_region():
    _, ctx = plan({**ON_POOL, "region": "us-west-2", "instance_type": "8xB200"})
    (error,) = errors_at(ctx, "region")
    assert "Host pool hpl_lab (lab) is in region us-east-1; set region = \"us-east-1\"" in error


def test_a_pool_in_a_region_of_its_own_plans_without_the_catalog_regions():
    # The pool's region is a name of the user's: the catalog's regions and fabrics do not apply, and the
    # servers' network defaults to Ethernet, as the API's.
    api = FakeClusterApi(host_pools={"hpl_lab": host_pool(region="on-prem-berlin")})
    planned, ctx = plan({**ON_POOL, "region": "on-prem-berlin"}, api=api)
    assert not all_errors(ctx)
    assert planned["interconnect"] == "ethernet" and planned["estimated_hourly_cost_usd"] == 0


def test_a_cluster_elsewhere_than_its_pool_is_refused_on_region():
    api = FakeClusterApi(host_pools={"hpl_lab": host_pool(region="on-prem-berlin")})
    _, ctx = plan({**ON_POOL, "region": "us-east-1"}, api=api)
    (error,) = errors_at(ctx, "region")
    assert 'is in region on-prem-berlin; set region = "on-prem-berlin"' in error


def test_not_enough_free_hosts_names_them_and_the_fixes():
    api = FakeClusterApi(host_pools={"hpl_lab": host_pool(3, free=1)})
    _, ctx = plan({**ON_POOL, "node_count": 2}, api=api)
    (error,) = errors_at(ctx, "node_count")
    assert "needs 2 hosts of host pool hpl_lab (lab), which has 1 free" in error
    assert "3 of its 3 hosts are ready" in error and "lower node_count" in error


def test_hosts_still_being_checked_warn_instead():
    # A pool registered in the same apply: its hosts are checked seconds later.
    api = FakeClusterApi(host_pools={"hpl_lab": host_pool(2, free=0, pending=2)})
    _, ctx = plan({**ON_POOL, "node_count": 2}, api=api)
    assert not all_errors(ctx)
    assert "2 still being checked" in warnings(ctx)["node_count"]


def test_a_scale_up_counts_the_added_hosts_and_a_relabel_reads_no_pool():
    prior = state_of(host_pool_id="hpl_lab", estimated_hourly_cost_usd=0)  # one node
    api = FakeClusterApi(host_pools={"hpl_lab": host_pool(3, free=1)})
    _, ctx = plan({**ON_POOL, "name": "train", "node_count": 3}, prior, api=api)
    (error,) = errors_at(ctx, "node_count")
    assert "needs 2 more hosts" in error
    api.requests.clear()
    planned_, ctx = plan({**ON_POOL, "name": "train", "node_count": 1, "labels": {"a": "b"}}, prior, api=api)
    assert not ctx.diagnostics and planned_ is not None and planned_["estimated_hourly_cost_usd"] == 0
    assert not [r for r in api.requests if r[1].startswith("/v1/host-pools")]


def test_volumes_on_a_pool_without_shared_storage_warn_at_plan():
    api = FakeClusterApi(host_pools={"hpl_lab": host_pool()})
    _, ctx = plan({**ON_POOL, "shared_volume_ids": ["vol_east"]}, api=api)
    assert not all_errors(ctx)  # the pool's, not this configuration's: destroy must not be blocked
    assert "declares no shared_storage_path" in warnings(ctx)["shared_volume_ids"]


def test_a_pool_behind_a_bastion_takes_clusters():
    api = FakeClusterApi(host_pools={"hpl_lab": host_pool(proxy_jump="ops@bastion")})
    _, ctx = plan(dict(ON_POOL), api=api)
    assert not ctx.diagnostics


def test_a_pool_with_shared_storage_takes_volumes():
    api = FakeClusterApi(host_pools={"hpl_lab": host_pool(shared_storage_path="/shared")})
    _, ctx = plan({**ON_POOL, "shared_volume_ids": ["vol_east"]}, api=api)
    assert not ctx.diagnostics


def test_an_unknown_pool_warns():
    _, ctx = plan({**ON_POOL, "host_pool_id": "hpl_gone"})
    assert "No host pool with id \"hpl_gone\"" in warnings(ctx)["host_pool_id"]


def test_create_sends_the_pool_and_reads_it_back_and_the_data_source_shows_it():
    api = FakeClusterApi()
    ctx = ctx_for(api)
    state = RESOURCE.create(ctx, planned(name="own", host_pool_id="hpl_lab", node_count=2))
    assert not ctx.diagnostics and state is not None
    (post,) = [body for method, path, body in api.requests if (method, path) == ("POST", "/v1/clusters")]
    assert post["host_pool_id"] == "hpl_lab" and post["orchestrator"] == "slurm"
    assert state["host_pool_id"] == "hpl_lab" and state["estimated_hourly_cost_usd"] == 0
    source = GpuClusterDataSource()
    found = source.read(ctx_for(api), schema_object(source.schema, {"name": "own"}))
    assert found is not None and found["host_pool_id"] == "hpl_lab"
    assert not source.schema.attributes["host_pool_id"].optional


# -- region and instance_type left out on a pool: the API's choice ------------------------------------

LEFT_OUT = {"name": "own", "host_pool_id": "hpl_lab", "node_count": 2}


def pool_state(**overrides: Any) -> dict[str, Any]:
    """A cluster on pool hpl_lab as the API wrote it (region and instance type filled in)."""
    return state_of(host_pool_id="hpl_lab", name="own", node_count=2, num_gpus=16, interconnect="ethernet",
                    estimated_hourly_cost_usd=0, **overrides)


@pytest.mark.parametrize("attr", ["region", "instance_type"])
def test_region_and_instance_type_are_required_without_a_pool(attr: str):
    config = {k: v for k, v in ON_POOL.items() if k not in (attr, "host_pool_id")}
    _, ctx = plan(config)
    (error,) = errors_at(ctx, attr)
    assert f"{attr} is required unless host_pool_id is set" in error
    assert [format_path(d.path) for d in ctx.diagnostics if d.path is not None] == [attr]


def test_region_and_instance_type_are_not_required_while_the_pool_id_is_unknown():
    planned_, ctx = plan({**LEFT_OUT, "host_pool_id": UNKNOWN})
    assert not all_errors(ctx)
    assert planned_ is not None and is_unknown(planned_["region"]) and is_unknown(planned_["instance_type"])


def test_a_create_on_a_pool_without_region_and_type_plans_the_pools_region_and_the_type_after_apply():
    api = FakeClusterApi(host_pools={"hpl_lab": host_pool(region="on-prem-berlin")})
    planned_, ctx = plan(LEFT_OUT, api=api)
    assert not ctx.diagnostics, [d.detail for d in ctx.diagnostics]
    assert planned_ is not None and planned_["region"] == "on-prem-berlin"
    assert is_unknown(planned_["instance_type"])  # the API picks it from the servers' GPUs
    assert is_unknown(planned_["num_gpus"]) and is_unknown(planned_["gpu_type"])
    assert planned_["estimated_hourly_cost_usd"] == 0  # known at plan: your servers cost nothing
    assert (planned_["orchestrator"], planned_["interconnect"]) == ("slurm", "ethernet")
    spec = spec_from_plan(planned_)  # what apply sends: the type is left to the API
    assert spec["region"] == "on-prem-berlin" and "instance_type" not in spec


def test_a_pool_the_plan_cannot_read_leaves_the_region_unknown():
    planned_, ctx = plan({**LEFT_OUT, "host_pool_id": "hpl_gone"})
    assert not all_errors(ctx) and "hpl_gone" in warnings(ctx)["host_pool_id"]
    assert planned_ is not None and is_unknown(planned_["region"]) and is_unknown(planned_["instance_type"])


def test_a_cluster_on_a_pool_without_region_and_type_has_no_diff_and_keeps_them_on_a_change():
    prior = pool_state()
    planned_, ctx = plan(LEFT_OUT, prior)
    assert not ctx.diagnostics and not ctx.requires_replace
    assert planned_ == prior
    api = FakeClusterApi(host_pools={"hpl_lab": host_pool(3, free=3)})
    planned_, ctx = plan({**LEFT_OUT, "node_count": 3, "labels": {"team": "ml"}}, prior, api=api)
    assert not all_errors(ctx) and not ctx.requires_replace
    assert planned_ is not None
    assert (planned_["region"], planned_["instance_type"]) == ("us-east-1", "8xH100")
    assert planned_["num_gpus"] == 24 and planned_["estimated_hourly_cost_usd"] == 0


def test_leaving_out_a_region_and_type_that_were_set_keeps_the_cluster():
    prior = pool_state()  # created with region and instance_type set: the values the API keeps
    planned_, ctx = plan({**LEFT_OUT, "labels": {"team": "ml"}}, prior)
    assert not all_errors(ctx) and not ctx.requires_replace
    assert planned_ is not None and planned_["instance_type"] == "8xH100"


@pytest.mark.parametrize(("attr", "value"), [("instance_type", "8xH200"), ("region", "on-prem-berlin")])
def test_a_different_region_or_type_set_on_a_pool_still_replaces_the_cluster(attr: str, value: str):
    api = FakeClusterApi(host_pools={"hpl_lab": host_pool(region="on-prem-berlin")})
    _, ctx = plan({**LEFT_OUT, attr: value}, pool_state(), api=api)
    assert [format_path(p) for p in ctx.requires_replace] == [attr]


def test_another_pool_plans_its_region_for_the_new_cluster():
    pools = {"hpl_lab": host_pool(), "hpl_berlin": host_pool(id="hpl_berlin", region="on-prem-berlin")}
    planned_, ctx = plan({**LEFT_OUT, "host_pool_id": "hpl_berlin"}, pool_state(), api=FakeClusterApi(
        host_pools=pools))
    assert not all_errors(ctx)
    assert sorted(format_path(p) for p in ctx.requires_replace) == ["host_pool_id", "instance_type", "region"]
    assert planned_ is not None and planned_["region"] == "on-prem-berlin"  # not the old pool's
    assert is_unknown(planned_["instance_type"])


def test_create_without_region_and_type_sends_neither_and_records_the_apis_choice():
    api = FakeClusterApi()
    ctx = ctx_for(api)
    plan_ = planned(name="own", host_pool_id="hpl_lab", region=UNKNOWN, instance_type=UNKNOWN,
                    interconnect="ethernet")
    state = RESOURCE.create(ctx, plan_)
    assert not ctx.diagnostics and state is not None
    (post,) = [body for method, path, body in api.requests if (method, path) == ("POST", "/v1/clusters")]
    assert "region" not in post and "instance_type" not in post
    assert (state["region"], state["instance_type"], state["num_gpus"]) == ("us-east-1", "8xH100", 16)
    # Imported or refreshed, the cluster reads the same (the API always answers both).
    found = RESOURCE.read(ctx_for(api), state)
    assert found is not None and (found["region"], found["instance_type"]) == ("us-east-1", "8xH100")
