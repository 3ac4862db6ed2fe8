"""gpucloud_gpu_cluster create/read/update/delete/import against a fake API, plus the data source and the
credentials ephemeral resource."""

from __future__ import annotations

import datetime as dt
import threading
from decimal import Decimal
from typing import Any

import httpx
import pytest

from provider.client import GpuCloudClient
from provider.cty import UNKNOWN
from provider.framework import Context
from provider.framework.state import schema_object
from provider.resources import cluster_checks, rest
from provider.resources._common import GpuCloudConfig
from provider.resources.cluster_credentials import ClusterCredentialsEphemeralResource
from provider.resources.cluster_data_source import GpuClusterDataSource
from provider.resources.gpu_cluster import GpuClusterResource
from provider.resources.rest import IDEMPOTENCY_KEY
from tests.provider.resources._gpu_cluster_fake_api import LOGIN_HOST_KEY, FakeClusterApi

RESOURCE = GpuClusterResource()
SCHEMA = RESOURCE.schema


class FastContext(Context):
    """A context whose waits return at once (still honouring cancellation)."""

    __slots__ = ("sleeps",)

    def sleep(self, seconds: float) -> None:
        self.sleeps = getattr(self, "sleeps", 0) + 1
        self.check_cancelled()


@pytest.fixture(autouse=True)
def fresh_catalog():
    cluster_checks.forget_catalogs()
    yield
    cluster_checks.forget_catalogs()


@pytest.fixture
def api() -> FakeClusterApi:
    return FakeClusterApi()


def ctx_for(api: FakeClusterApi, private: dict[str, Any] | None = None,
            stop: threading.Event | None = None) -> FastContext:
    client = GpuCloudClient("http://api.test", "k", transport=api.transport(), max_retries=0)
    data = GpuCloudConfig("http://api.test", "k", 30.0, 0, complete=True, client=client)
    return FastContext(stop=stop or threading.Event(), provider_data=data, private=private or {})


def planned(**values: Any) -> dict[str, Any]:
    """A create plan as Terraform hands it to apply (unknown computed values are simply replaced)."""
    return schema_object(SCHEMA, {
        "name": "train", "region": "us-east-1", "instance_type": "8xH100", "node_count": 2,
        "orchestrator": "slurm", "interconnect": "infiniband",
        "billing": {"type": "on_demand", "duration_days": None, "on_expiry": "decommission"},
        "deletion_protection": False, "wait_for_running": True, **values,
    })


def test_gpu_cluster_create_waits_for_running_and_fills_every_computed_value(api):
    ctx = ctx_for(api, {IDEMPOTENCY_KEY: "key-1"})
    state = RESOURCE.create(ctx, planned(labels={"team": "ml"}))
    assert not ctx.diagnostics
    assert state is not None
    assert state["status"] == "RUNNING" and state["phase"] == "Ready" and state["id"] == "cls_1"
    assert state["num_gpus"] == 16 and state["estimated_hourly_cost_usd"] == Decimal("63.84")
    assert [n["name"] for n in state["nodes"]] == ["train-0", "train-1"]
    node = state["nodes"][0]
    assert node["hcas"] == [f"mlx5_{i}" for i in range(8)]  # the storage HCA is left out
    assert node["partition_key"] == "0x8001" and node["topology_path"] == "ib-east-a/su00/pos00"
    assert node["role"] == "worker" and node["instance_id"] == "nod_0"
    assert state["login"] == {"host": "198.18.0.7", "port": 22, "user": "ubuntu",
                              "ssh_command": "ssh ubuntu@198.18.0.7", "host_key": LOGIN_HOST_KEY}
    assert node["host_key"] == "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINode0"
    assert state["slurm"] == {"controller": "train-jumphost", "partitions": ["gpu"]}
    assert state["kubernetes"] is None and state["reservation"] is None
    assert state["ssh_key_ids"] is None and state["labels"] == {"team": "ml"}
    assert IDEMPOTENCY_KEY not in ctx.private
    assert ctx.private["etag"] == f'"{api.clusters["cls_1"]["updated_at"]}"'  # the first refresh finds it
    posts = [r for r in api.requests if r[0] == "POST"]
    assert posts[0][2]["orchestrator"] == "slurm" and "ssh_key_ids" not in posts[0][2]


def test_gpu_cluster_created_by_a_team_key_keeps_the_configured_labels(api):
    """The API labels a team key's cluster with its team; that label is the key's, so neither the create
    nor a refresh puts it into `labels` (no "inconsistent result after apply")."""
    api.scope_labels = {"team": "nlp"}
    ctx = ctx_for(api, {IDEMPOTENCY_KEY: "key-1"})
    state = RESOURCE.create(ctx, planned(labels=None))
    assert not ctx.diagnostics and state is not None and state["labels"] is None
    assert api.clusters["cls_1"]["labels"] == {"team": "nlp"}
    assert RESOURCE.read(ctx, state)["labels"] is None


def test_gpu_cluster_create_without_waiting_returns_at_once(api):
    ctx = ctx_for(api)
    state = RESOURCE.create(ctx, planned(wait_for_running=False))
    assert state is not None and state["status"] == "PENDING"
    assert [r[0] for r in api.requests if "/clusters" in r[1]] == ["POST"]


def test_gpu_cluster_create_failure_returns_partial_state_and_error(api):
    api.fail_next_create = True
    ctx = ctx_for(api)
    state = RESOURCE.create(ctx, planned())
    assert state is not None and state["id"] == "cls_1" and state["status"] == "FAILED"
    (error,) = ctx.diagnostics
    assert error.summary == "Error Creating GPU Cluster"
    assert "node boot failed" in error.detail and "tainted" in error.detail


def test_gpu_cluster_create_retries_with_the_same_key_while_the_api_is_down(api, monkeypatch):
    monkeypatch.setattr(rest, "RESEND_PAUSE_SECONDS", 0.0)
    api.unreachable_posts = 2
    ctx = ctx_for(api, {IDEMPOTENCY_KEY: "key-7"})
    state = RESOURCE.create(ctx, planned())
    assert not ctx.diagnostics and state is not None and state["status"] == "RUNNING"
    assert len(api.clusters) == 1 and api.idempotency == {"key-7": "cls_1"}


def test_gpu_cluster_create_whose_answer_is_lost_is_kept_unconfirmed_and_cleaned_up_on_replace(api):
    api.lost_create_answers = 1  # the backend made the cluster and answered 500
    ctx = ctx_for(api, {IDEMPOTENCY_KEY: "key-8"})
    state = RESOURCE.create(ctx, planned())
    assert state is not None and state["id"] == "unconfirmed-create:key-8"  # not forgotten: tainted
    (error,) = ctx.diagnostics
    assert error.summary == "Error Creating GPU Cluster" and "may have happened" in error.detail
    assert list(api.clusters) == ["cls_1"]
    assert RESOURCE.read(ctx_for(api), state) == state  # a refresh sends no create
    RESOURCE.delete(ctx_for(api), state)  # the replacing apply: replay with the key, delete what it made
    assert api.clusters == {} and api.idempotency == {"key-8": "cls_1"}


def test_gpu_cluster_create_that_never_reached_the_api_by_its_deadline_keeps_nothing(api):
    api.unreachable_posts = 100
    ctx = ctx_for(api, {IDEMPOTENCY_KEY: "key-9"})
    assert RESOURCE.create(ctx, planned(timeouts={"create": "0s"})) is None
    (error,) = ctx.diagnostics
    assert error.summary == "Error Creating GPU Cluster" and "may have happened" not in error.detail
    assert api.clusters == {}


def test_gpu_cluster_create_rejected_by_api_names_the_field(api):
    api.reject_create = [{"field": "volume_ids[0]", "message": "volume vol_x is in us-west-2"}]
    ctx = ctx_for(api)
    assert RESOURCE.create(ctx, planned()) is None
    (error,) = ctx.diagnostics
    assert error.summary == "Error Creating GPU Cluster" and "us-west-2" in error.detail
    assert error.path is not None and [s.name for s in error.path] == ["shared_volume_ids"]


def test_gpu_cluster_create_degraded_node_fails_at_once_naming_the_node(api):
    api.degrade_next_create = True
    ctx = ctx_for(api, {IDEMPOTENCY_KEY: "key-1"})
    state = RESOURCE.create(ctx, planned(timeouts={"create": "3s"}))  # the old wait polled to the deadline
    assert state is not None and state["status"] == "FAILED" and state["phase"] == "Degraded"
    (error,) = ctx.diagnostics
    assert error.severity == "error" and error.summary == "Error Creating GPU Cluster"
    assert "train-0" in error.detail and "XID 79: GPU 3 has fallen off the bus" in error.detail
    assert "tainted" in error.detail
    assert len([r for r in api.requests if r[0] == "GET" and r[1] == "/v1/clusters/cls_1"]) == 2


def test_gpu_cluster_create_interrupted_saves_the_healthy_cluster_with_a_warning(api):
    stop = threading.Event()
    api.on_get = stop.set  # StopProvider while the wait's first poll is in flight
    ctx = ctx_for(api, {IDEMPOTENCY_KEY: "key-1"}, stop=stop)
    state = RESOURCE.create(ctx, planned())
    assert state is not None and state["id"] == "cls_1" and state["status"] in ("PENDING", "PROVISIONING")
    (warning,) = ctx.diagnostics
    assert warning.severity == "warning" and warning.summary == "GPU Cluster Still Converging"
    assert "interrupted" in warning.detail and "resumes the wait" in warning.detail
    assert IDEMPOTENCY_KEY not in ctx.private  # recorded in state: never created again


def test_gpu_cluster_create_timed_out_saves_the_healthy_cluster_with_a_warning(api):
    ctx = ctx_for(api)
    state = RESOURCE.create(ctx, planned(timeouts={"create": "0s"}))
    assert state is not None and state["status"] != "RUNNING"
    (warning,) = ctx.diagnostics
    assert warning.severity == "warning" and "timed out" in warning.detail


def test_gpu_cluster_create_interrupted_before_the_post_creates_nothing(api):
    stop = threading.Event()
    stop.set()
    ctx = ctx_for(api, stop=stop)
    assert RESOURCE.create(ctx, planned()) is None
    assert api.clusters == {} and ctx.diagnostics.has_errors


def test_gpu_cluster_update_resumes_an_interrupted_wait_without_a_change(api):
    stop = threading.Event()
    api.on_get = stop.set
    saved = RESOURCE.create(ctx_for(api, stop=stop), planned())
    assert saved is not None and saved["status"] != "RUNNING"
    api.on_get = None
    before = len(api.requests)
    ctx = ctx_for(api)
    new = RESOURCE.update(ctx, {**saved, "status": None}, saved)
    assert not ctx.diagnostics and new is not None and new["status"] == "RUNNING"
    assert [m for m, _, _ in api.requests[before:] if m != "GET"] == []  # only waited


def test_gpu_cluster_update_interrupted_warns_and_keeps_the_change(api):
    state = created(api)
    stop = threading.Event()

    def interrupt_while_scaling() -> None:
        api.clusters["cls_1"]["status"] = "PENDING"  # the new nodes are still being placed
        stop.set()

    api.on_get = interrupt_while_scaling
    ctx = ctx_for(api, stop=stop)
    new = RESOURCE.update(ctx, {**state, "node_count": 3}, state)
    assert new is not None and new["node_count"] == 3 and new["status"] == "PROVISIONING"
    assert [(d.severity, d.summary) for d in ctx.diagnostics] == [("warning", "GPU Cluster Still Converging")]


def created(api: FakeClusterApi, **values: Any) -> dict[str, Any]:
    state = RESOURCE.create(ctx_for(api), planned(**values))
    assert state is not None
    return state


def test_gpu_cluster_read_reflects_drift_and_removes_deleted_clusters(api):
    state = created(api)
    api.clusters["cls_1"]["labels"] = {"owner": "someone"}
    api.clusters["cls_1"]["volume_ids"] = ["vol_east"]
    fresh = RESOURCE.read(ctx_for(api), state)
    assert fresh is not None
    assert fresh["labels"] == {"owner": "someone"} and fresh["shared_volume_ids"] == ["vol_east"]
    assert fresh["ssh_key_ids"] is None  # still empty: stays null as configured
    api.clusters["cls_1"]["deletion_requested_at"] = "2026-11-26T02:00:00Z"
    assert RESOURCE.read(ctx_for(api), state) is None
    del api.clusters["cls_1"]
    assert RESOURCE.read(ctx_for(api), state) is None


def test_gpu_cluster_read_keeps_the_users_spelling_of_numbers(api):
    state = created(api, max_hourly_cost_usd=Decimal("100.50"))
    fresh = RESOURCE.read(ctx_for(api), state)
    assert fresh is not None and fresh["max_hourly_cost_usd"] == Decimal("100.50")


def test_gpu_cluster_update_patches_only_changes_and_waits_for_the_scale(api):
    state = created(api)
    ctx = ctx_for(api)
    # As planned: what the scale changes is unknown.
    plan = {**state, "node_count": 3, "labels": {"a": "b"}, "nodes": UNKNOWN, "login": UNKNOWN,
            "slurm": UNKNOWN}
    before = len(api.requests)
    new = RESOURCE.update(ctx, plan, state)
    assert not ctx.diagnostics and new is not None
    patch = next(r for r in api.requests[before:] if r[0] == "PATCH")
    assert patch[2] == {"node_count": 3, "labels": {"a": "b"}}
    assert len(new["nodes"]) == 3 and new["status"] == "RUNNING"


def test_gpu_cluster_update_attaches_and_detaches_volumes(api):
    state = created(api, shared_volume_ids=["vol_east"])
    assert state["shared_volume_ids"] == ["vol_east"]
    before = len(api.requests)
    new = RESOURCE.update(ctx_for(api), {**state, "shared_volume_ids": ["vol_two"]}, state)
    calls = [(m, p) for m, p, _ in api.requests[before:] if "/volumes/" in p]
    assert calls == [("DELETE", "/v1/clusters/cls_1/volumes/vol_east"),
                     ("POST", "/v1/clusters/cls_1/volumes/vol_two")]
    assert new is not None and new["shared_volume_ids"] == ["vol_two"]


def test_gpu_cluster_update_on_expiry_sends_only_that_billing_field(api):
    state = created(api)
    plan = {**state, "billing": {**state["billing"], "on_expiry": "convert_to_on_demand"}}
    before = len(api.requests)
    new = RESOURCE.update(ctx_for(api), plan, state)
    assert [r[2] for r in api.requests[before:] if r[0] == "PATCH"] == [
        {"billing": {"on_expiry": "convert_to_on_demand"}}]
    assert new is not None and new["billing"]["on_expiry"] == "convert_to_on_demand"


def test_gpu_cluster_delete_waits_until_gone_and_tolerates_404(api):
    state = created(api)
    ctx = ctx_for(api)
    RESOURCE.delete(ctx, state)
    assert not ctx.diagnostics and api.clusters == {}
    RESOURCE.delete(ctx, state)  # already gone
    assert not ctx.diagnostics


def test_gpu_cluster_import_reads_a_state_that_plans_clean(api):
    created(api)
    ctx = ctx_for(api)
    imported = RESOURCE.import_state(ctx, "cls_1")
    assert imported is not None
    state = RESOURCE.read(ctx, imported)
    assert state is not None
    assert state["wait_for_running"] is True and state["timeouts"] is None
    assert state["billing"] == {"type": "on_demand", "duration_days": None, "on_expiry": "decommission"}
    assert state["labels"] is None and state["ssh_key_ids"] is None


def test_gpu_cluster_data_source_by_name(api):
    created(api)
    source = GpuClusterDataSource()
    config = schema_object(source.schema, {"name": "train"})
    state = source.read(ctx_for(api), config)
    assert state is not None and state["id"] == "cls_1" and len(state["nodes"]) == 2
    assert "wait_for_running" not in source.schema.attributes
    assert set(state) == set(source.schema.attributes)


def test_gpu_cluster_credentials_kubeconfig_or_ssh(api):
    created(api, orchestrator="kubernetes")
    created(api, name="slurmy")
    eph = ClusterCredentialsEphemeralResource()
    kube = eph.open(ctx_for(api), {"cluster_id": "cls_1"}).result
    assert kube["kind"] == "kubeconfig" and kube["kubeconfig"].startswith("apiVersion")
    assert eph.schema.attributes["kubeconfig"].sensitive
    ssh = eph.open(ctx_for(api), {"cluster_id": "cls_2"}).result
    assert ssh["kind"] == "ssh" and ssh["ssh_command"] == "ssh ubuntu@198.18.0.7"
    ctx = ctx_for(api)
    eph.open(ctx, {"cluster_id": "cls_404"})
    assert [d.summary for d in ctx.diagnostics] == ["Cluster Not Found"]


def test_gpu_cluster_credentials_renewed_halfway_to_their_expiry(api):
    created(api, orchestrator="kubernetes")
    created(api, name="slurmy")
    eph = ClusterCredentialsEphemeralResource()
    soon = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    api.credentials_expire_at = soon.isoformat().replace("+00:00", "Z")
    ctx = ctx_for(api)
    opened = eph.open(ctx, {"cluster_id": "cls_1"})
    assert opened.result["expires_at"] == api.credentials_expire_at
    assert opened.renew_at is not None
    assert dt.timedelta(minutes=29) < opened.renew_at - dt.datetime.now(dt.UTC) <= dt.timedelta(minutes=30)

    renewal = ctx_for(api, private=dict(ctx.private))  # Terraform hands the private data back
    api.credentials_expire_at = (soon + dt.timedelta(hours=1)).isoformat().replace("+00:00", "Z")
    next_renewal = eph.renew(renewal)
    assert api.credential_renewals == 1 and api.credential_reads == 1  # the same token, extended
    assert next_renewal is not None and next_renewal - opened.renew_at > dt.timedelta(minutes=29)

    api.credentials_lapsed = True
    lapsed = ctx_for(api, private=dict(ctx.private))
    assert eph.renew(lapsed) is None
    (error,) = lapsed.diagnostics
    assert error.summary == "Error Renewing Cluster Credentials" and "lapsed" in error.detail
    assert eph.open(ctx_for(api), {"cluster_id": "cls_2"}).renew_at is None  # SSH logins do not lapse


def test_gpu_cluster_reservation_estimated_until_billed_then_as_billed(api):
    billing = {"type": "reserved", "duration_days": 7, "on_expiry": "decommission"}
    state = created(api, node_count=1, orchestrator="none", billing=billing)
    # Before the term starts: 8 GPUs x 3.99 x (1 - 0.15) x 24 h x 7 days.
    estimate = {"starts_at": None, "ends_at": None, "upfront_cost_usd": Decimal("4558.176")}
    assert state["reservation"] == estimate
    api.clusters["cls_1"]["reservation"] = {
        "term_start": "2026-11-26T01:00:05Z", "term_end": "2026-12-03T01:00:05Z",
        "upfront_usd": "4558.176000",
    }
    fresh = RESOURCE.read(ctx_for(api), state)
    assert fresh is not None and fresh["reservation"] == {
        "starts_at": "2026-11-26T01:00:05Z", "ends_at": "2026-12-03T01:00:05Z",
        "upfront_cost_usd": Decimal("4558.176")}


def test_gpu_cluster_read_when_the_api_is_down_is_a_clear_error(api):
    state = created(api)
    down = GpuCloudClient("http://127.0.0.1:9", "k", max_retries=0, timeout=1.0)
    ctx = FastContext(stop=threading.Event(),
                      provider_data=GpuCloudConfig("http://127.0.0.1:9", "k", 1.0, 0, client=down))
    assert RESOURCE.read(ctx, state) == state
    (error,) = ctx.diagnostics
    assert error.summary == "Error Reading GPU Cluster" and "API is running" in error.detail


def test_gpu_cluster_read_keeps_the_failure_reason_for_the_plan(api):
    state = created(api)
    api.clusters["cls_1"].update(_fail=True)
    ctx = ctx_for(api)
    fresh = RESOURCE.read(ctx, state)
    assert fresh is not None and fresh["status"] == "FAILED"
    assert ctx.private["failure_reason"] == "node boot failed 3 times"


def test_gpu_cluster_read_records_node_health_and_a_repaired_nodes_new_instance(api):
    state = created(api)
    assert [n["health"] for n in state["nodes"]] == ["healthy", "healthy"]
    # train-1 failed and is being replaced in place: same name, new machine, cluster still RUNNING.
    cluster = api.clusters["cls_1"]
    cluster["nodes"][1].update(instance_id="nod_9", status="PROVISIONING")
    cluster["phase"] = "Repairing"
    fresh = RESOURCE.read(ctx_for(api), state)
    assert fresh is not None and fresh["status"] == "RUNNING" and fresh["phase"] == "Repairing"
    assert [(n["name"], n["instance_id"], n["health"]) for n in fresh["nodes"]] == [
        ("train-0", "nod_0", "healthy"), ("train-1", "nod_9", "repairing")]
    # Health comes with the cluster: a refresh is one GET of the cluster, no second request.
    assert not [r for r in api.requests if r[1].endswith("/nodes")]


def test_gpu_cluster_read_against_an_api_without_node_health_leaves_it_null(api):
    state = created(api)

    def older_api(request: httpx.Request) -> httpx.Response:  # a backend whose nodes carry no health
        response = api.handle(request)
        if request.method == "GET" and request.url.path == "/v1/clusters/cls_1":
            body = response.json()
            for node in body["nodes"]:
                del node["health"]
            return httpx.Response(200, json=body, headers=response.headers)
        return response

    api.transport = lambda: httpx.MockTransport(older_api)  # type: ignore[method-assign]
    ctx = ctx_for(api)
    fresh = RESOURCE.read(ctx, state)
    assert not ctx.diagnostics
    assert fresh is not None and [n["health"] for n in fresh["nodes"]] == [None, None]


def test_cluster_credentials_renewal_time_accepts_an_expiry_without_offset():
    from provider.resources.cluster_credentials import _renew_at

    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)
    naive = later.replace(tzinfo=None).isoformat()  # a time without offset is UTC
    left = _renew_at(naive) - dt.datetime.now(dt.UTC)  # halfway to the expiry
    assert dt.timedelta(minutes=55) < left <= dt.timedelta(minutes=60)
