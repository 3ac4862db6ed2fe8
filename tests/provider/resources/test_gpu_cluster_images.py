"""gpucloud_gpu_cluster container images: plan-time checks on the map key, in-place changes, the waits for
imports, a failed update reported on `container_images["<name>"]` with the old reference kept in state,
write-only registry passwords, and the data source."""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any

import httpx
import pytest

from backend.domain.errors import ApiError
from backend.provisioning import images
from provider.client import GpuCloudClient
from provider.client.image_refs import name_problem, reference_problem, registry_problem
from provider.cty import format_path, is_unknown
from provider.framework import Context
from provider.framework.plan import plan_resource
from provider.framework.state import schema_object
from provider.framework.validate import validate_config
from provider.resources import cluster_checks
from provider.resources._common import GpuCloudConfig
from provider.resources.cluster_data_source import GpuClusterDataSource
from provider.resources.gpu_cluster import GpuClusterResource
from provider.resources.gpu_cluster_schema import spec_from_plan
from provider.resources.rest import IDEMPOTENCY_KEY
from tests.provider.resources._gpu_cluster_fake_api import FakeClusterApi
from tests.provider.resources.test_gpu_cluster_plan import propose

RESOURCE = GpuClusterResource()
SCHEMA = RESOURCE.schema
TRAIN_V3 = "registry.internal:5000/team/train:v3"
TRAIN_V4 = "registry.internal:5000/team/train:v4"
MISSING = "registry.internal:5000/team/train:nope"
UBUNTU = "ubuntu:22.04"


def digest_of(reference: str) -> str:
    return "sha256:" + hashlib.sha256(reference.encode()).hexdigest()


class ImageApi(FakeClusterApi):
    """The fake cluster API with the images contract: each GET moves images one step (pending ->
    importing -> ready, or failed for a reference in `missing`); a create whose image fails rolls back
    FAILED naming it, an update keeps the old digest and size. Passwords are kept apart, never answered."""

    def __init__(self, missing: tuple[str, ...] = (MISSING,)) -> None:
        super().__init__()
        self.missing = set(missing)
        self.passwords: dict[str, dict[str, str]] = {}

    def _create(self, request: httpx.Request, spec: dict[str, Any]) -> httpx.Response:
        response = super()._create(request, spec)
        if response.status_code != 201:
            return response
        cluster = self.clusters[response.json()["id"]]
        cluster.update(container_images=dict(spec.get("container_images") or {}), images=[],
                       image_storage_bytes=0)
        self._logins(cluster, spec.get("registry_credentials") or {})
        self._want(cluster)
        return httpx.Response(201, json=cluster)

    def handle(self, request: httpx.Request) -> httpx.Response:
        response = super().handle(request)
        parts = request.url.path.strip("/").split("/")[1:]
        if request.method != "PATCH" or len(parts) != 2 or response.status_code != 200:
            return response
        body = json.loads(request.content)
        cluster = self.clusters[parts[1]]
        if "registry_credentials" in body:
            self._logins(cluster, body["registry_credentials"])
        if "container_images" in body:
            self._want(cluster)
        return httpx.Response(200, json=cluster, headers=response.headers)

    def _logins(self, cluster: dict[str, Any], logins: dict[str, Any]) -> None:
        self.passwords[cluster["id"]] = {host: login["password"] for host, login in logins.items()}
        cluster["registry_credentials"] = {host: {"username": login["username"]}
                                           for host, login in logins.items()}

    def _want(self, cluster: dict[str, Any]) -> None:
        """The images after a change of `container_images`: changed ones pending, removed ones gone."""
        old = {i["name"]: i for i in cluster["images"]}
        images = []
        for name, reference in sorted(cluster["container_images"].items()):
            image = dict(old.get(name) or {"name": name, "digest": None, "size_bytes": None, "reason": None})
            if image.get("reference") != reference or image.get("state") == "failed":
                image.update(reference=reference, state="pending", updated_at=self._now())
            images.append(image)
        cluster["images"] = images
        if any(i["state"] == "pending" for i in images):
            cluster["phase"] = "ImportingImages"
            cluster["phase_history"].append({"phase": "ImportingImages", "at": self._now()})

    def _advance(self, cluster: dict[str, Any]) -> None:
        if cluster["status"] == "FAILED":
            return
        if cluster["status"] != "RUNNING" or cluster["phase"] != "ImportingImages":
            super()._advance(cluster)
            pending = any(i["state"] == "pending" for i in cluster["images"])
            cluster["_settled"] = cluster.get("_settled") or (cluster["status"] == "RUNNING" and not pending)
            if cluster["status"] != "RUNNING" or not pending:
                return
            cluster["phase"] = "ImportingImages"
        for image in cluster["images"]:
            if image["state"] == "pending":
                image["state"] = "importing"
            elif image["state"] == "importing":
                self._import(cluster, image)
        if not any(i["state"] in ("pending", "importing") for i in cluster["images"]):
            cluster["phase"] = "Ready"
            cluster["phase_history"].append({"phase": "Ready", "at": self._now()})
            cluster["image_storage_bytes"] = sum(i["size_bytes"] or 0 for i in cluster["images"])
            cluster["_settled"] = True

    def _import(self, cluster: dict[str, Any], image: dict[str, Any]) -> None:
        if image["reference"] in self.missing:
            reason = f"manifest {image['reference']} not found in the registry"
            image.update(state="failed", reason=reason)
            if not cluster.get("_settled"):  # a create: rolled back
                cluster.update(status="FAILED", phase="Failed",
                               status_reason=f'container image "{image["name"]}": {reason}')
            return
        image.update(state="ready", reason=None, digest=digest_of(image["reference"]), size_bytes=1000)


class FastContext(Context):
    __slots__ = ()

    def sleep(self, seconds: float) -> None:
        self.check_cancelled()


@pytest.fixture(autouse=True)
def fresh_catalog():
    cluster_checks.forget_catalogs()
    yield
    cluster_checks.forget_catalogs()


def ctx_for(api: FakeClusterApi, private: dict[str, Any] | None = None) -> FastContext:
    client = GpuCloudClient("http://api.test", "k", transport=api.transport(), max_retries=0)
    data = GpuCloudConfig("http://api.test", "k", 30.0, 0, complete=True, client=client)
    return FastContext(stop=threading.Event(), provider_data=data, private=private or {})


BASE = {"name": "train", "region": "us-east-1", "instance_type": "8xH100", "node_count": 2}
LOGIN = {"registry.internal:5000": {"username": "ci", "password": "s3cret"}}


def planned(**values: Any) -> dict[str, Any]:
    return schema_object(SCHEMA, {
        **BASE, "orchestrator": "slurm", "interconnect": "infiniband",
        "billing": {"type": "on_demand", "duration_days": None, "on_expiry": "decommission"},
        "deletion_protection": False, "wait_for_running": True, **values,
    })


def plan(config: dict[str, Any], prior: dict[str, Any] | None = None,
         api: FakeClusterApi | None = None) -> tuple[dict[str, Any] | None, Context]:
    full = schema_object(SCHEMA, config)
    planned_state, replace = plan_resource(SCHEMA, full, prior, propose(full, prior))
    ctx = ctx_for(api or ImageApi())
    ctx.requires_replace = replace
    validate_config(SCHEMA, full, ctx.diagnostics)
    RESOURCE.validate_config(ctx, full)
    return RESOURCE.modify_plan(ctx, planned_state, prior, full), ctx


def errors(ctx: Context) -> dict[str, str]:
    return {format_path(d.path) if d.path else "": f"{d.summary}: {d.detail}"
            for d in ctx.diagnostics if d.severity == "error"}


def created(api: ImageApi, **values: Any) -> dict[str, Any]:
    ctx = ctx_for(api, {IDEMPOTENCY_KEY: "key-1"})
    state = RESOURCE.create(ctx, planned(**values))
    assert not errors(ctx), errors(ctx)
    assert state is not None
    return state


# -- plan-time checks ----------------------------------------------------------------------------------


@pytest.mark.parametrize("reference", [
    TRAIN_V3, UBUNTU, "nvcr.io/nvidia/pytorch:24.05-py3", "ghcr.io/org/img@sha256:" + "a" * 64,
    "localhost/img", "127.0.0.1:5000/busybox:1", "[::1]:5000/x/y:z",
])
def test_reference_shapes_the_api_takes_pass(reference):
    assert reference_problem(reference) is None


@pytest.mark.parametrize(("reference", "words"), [
    ("", "the reference is empty"),
    ("https://ghcr.io/org/img:1", 'drop "https://"'),
    ("ghcr.io/org/img@sha256:abc", "is not a digest"),
    ("ghcr.io/Org/img:1", 'write "ghcr.io/org/img:1"'),
    ("ghcr.io/org/img:-bad", "is not a tag"),
    ("registry.internal:99999/x:1", "is not a port"),
    ("bad_host.io:5000/x:1", "is not a registry host name"),
])
def test_reference_problems_say_the_fix(reference, words):
    problem = reference_problem(reference)
    assert problem is not None and words in problem


def test_names_and_registry_hosts():
    assert name_problem("train") is None and name_problem("py-3.11_x") is None
    for bad in ("Train", ".hidden", "a/b", "x" * 64):
        assert "/images/<name>" in str(name_problem(bad))
    assert registry_problem("registry.internal:5000") is None
    assert "host[:port] only" in str(registry_problem("registry.internal:5000/team"))


def test_plan_rejects_bad_images_on_the_map_key():
    _, ctx = plan({**BASE, "container_images": {"Train": UBUNTU, "ok": "ghcr.io/Org/x:1"}})
    found = errors(ctx)
    assert set(found) == {'container_images["Train"]', 'container_images["ok"]'}
    assert "Invalid Container Image Name" in found['container_images["Train"]']
    assert 'write "ghcr.io/org/x:1"' in found['container_images["ok"]']


def test_plan_rejects_more_than_16_images_and_bad_registry_hosts():
    images = {f"img{i}": UBUNTU for i in range(17)}
    logins = {"https://registry.internal": {"username": "u", "password": "p"}}
    _, ctx = plan({**BASE, "container_images": images, "registry_credentials": logins})
    found = errors(ctx)
    assert "at most 16" in found["container_images"]
    assert "host[:port] only" in found['registry_credentials["https://registry.internal"]']


def test_registry_password_is_sensitive():
    logins = SCHEMA.attributes["registry_credentials"]
    assert logins.attributes["password"].sensitive and not logins.attributes["username"].sensitive  # type: ignore[attr-defined]


# -- apply ---------------------------------------------------------------------------------------------


def test_create_sends_images_and_logins_and_waits_until_they_are_imported():
    api = ImageApi()
    state = created(api, container_images={"train": TRAIN_V3, "base": UBUNTU}, registry_credentials=LOGIN)
    sent = next(body for method, path, body in api.requests if method == "POST" and path == "/v1/clusters")
    assert sent["container_images"] == {"train": TRAIN_V3, "base": UBUNTU}
    assert sent["registry_credentials"] == LOGIN
    assert state["status"] == "RUNNING" and state["phase"] == "Ready"
    assert [(i["name"], i["state"], i["digest"]) for i in state["images"]] == [
        ("base", "ready", digest_of(UBUNTU)), ("train", "ready", digest_of(TRAIN_V3))]
    assert state["image_storage_bytes"] == 2000
    # the API never answers the password: the configured one stays in state
    assert state["registry_credentials"] == LOGIN


def test_create_whose_image_is_missing_fails_naming_the_image():
    api = ImageApi()
    ctx = ctx_for(api, {IDEMPOTENCY_KEY: "key-1"})
    state = RESOURCE.create(ctx, planned(container_images={"train": MISSING}))
    assert state is not None and state["status"] == "FAILED"
    detail = errors(ctx)[""]
    assert 'container image "train"' in detail and "not found" in detail


def test_changing_images_is_in_place_and_waits_for_the_import():
    api = ImageApi()
    state = created(api, container_images={"train": TRAIN_V3})
    out, ctx = plan({**BASE, "container_images": {"train": TRAIN_V4}}, state, api)
    assert not errors(ctx) and not ctx.requires_replace and out is not None
    assert is_unknown(out["images"]) and is_unknown(out["image_storage_bytes"])
    assert out["nodes"] == state["nodes"] and out["login"] == state["login"]  # nodes are not touched
    ctx = ctx_for(api)
    new = RESOURCE.update(ctx, schema_object(SCHEMA, {**state, **out, "status": None, "phase": None,
                                                     "images": None, "image_storage_bytes": None}), state)
    assert not errors(ctx) and new is not None
    patch = [body for method, _, body in api.requests if method == "PATCH"]
    assert patch == [{"container_images": {"train": TRAIN_V4}}]
    assert new["container_images"] == {"train": TRAIN_V4}
    assert new["images"][0]["digest"] == digest_of(TRAIN_V4) and new["images"][0]["state"] == "ready"


def test_login_change_plans_images_unknown_and_keeps_the_status():
    """New credentials retry a failed import, so the images may change: unknown until applied."""
    api = ImageApi()
    state = created(api, container_images={"train": TRAIN_V3}, registry_credentials=LOGIN)
    logins = {"registry.internal:5000": {"username": "ci", "password": "rotated"}}
    out, ctx = plan({**BASE, "container_images": {"train": TRAIN_V3}, "registry_credentials": logins},
                    state, api)
    assert not errors(ctx) and out is not None and not ctx.requires_replace
    assert is_unknown(out["images"]) and out["status"] == "RUNNING"


def update_to(api: ImageApi, state: dict[str, Any], images: dict[str, str]) -> tuple[dict[str, Any], Context]:
    out, ctx = plan({**BASE, "container_images": images}, state, api)
    assert out is not None and not errors(ctx)
    ctx = ctx_for(api)
    resolved = {k: (None if is_unknown(v) else v) for k, v in out.items()}
    new = RESOURCE.update(ctx, schema_object(SCHEMA, resolved), state)
    assert new is not None
    return new, ctx


def test_failed_update_names_the_image_and_keeps_the_old_reference_in_state():
    api = ImageApi()
    state = created(api, container_images={"train": TRAIN_V3})
    new, ctx = update_to(api, state, {"train": MISSING, "base": UBUNTU})
    found = errors(ctx)
    assert list(found) == ['container_images["train"]']
    assert "not found" in found['container_images["train"]']
    assert f"keeps the previous image ({TRAIN_V3})" in found['container_images["train"]']
    assert new["container_images"] == {"train": TRAIN_V3, "base": UBUNTU}
    train = next(i for i in new["images"] if i["name"] == "train")
    assert (train["state"], train["digest"], train["reference"]) == ("failed", digest_of(TRAIN_V3), MISSING)
    # a refresh agrees (the API echoes the wanted map), so the next plan proposes the change again
    read = RESOURCE.read(ctx_for(api), new)
    assert read is not None and read["container_images"] == {"train": TRAIN_V3, "base": UBUNTU}
    again, ctx = plan({**BASE, "container_images": {"train": MISSING, "base": UBUNTU}}, read, api)
    assert again is not None and is_unknown(again["images"])


def test_failed_new_image_is_left_out_of_state():
    api = ImageApi()
    state = created(api, container_images={"train": TRAIN_V3})
    new, ctx = update_to(api, state, {"train": TRAIN_V3, "extra": MISSING})
    assert "/images/extra does not exist" in errors(ctx)['container_images["extra"]']
    assert new["container_images"] == {"train": TRAIN_V3}


def test_import_and_data_source_never_show_a_password():
    api = ImageApi()
    state = created(api, container_images={"train": TRAIN_V3}, registry_credentials=LOGIN)
    imported = RESOURCE.read(ctx_for(api), {"id": state["id"]})
    assert imported is not None
    host = "registry.internal:5000"
    assert imported["registry_credentials"] == {host: {"username": "ci", "password": None}}
    source = GpuClusterDataSource()
    assert "password" not in source.schema.attributes["registry_credentials"].attributes  # type: ignore[attr-defined]
    read = source.read(ctx_for(api), {"id": state["id"], "name": None})
    assert read is not None
    assert read["registry_credentials"] == {"registry.internal:5000": {"username": "ci"}}
    assert read["images"][0]["name"] == "train"


def test_spec_sends_no_images_when_none_are_configured():
    assert "container_images" not in spec_from_plan(planned())
    assert "registry_credentials" not in spec_from_plan(planned())


def test_plan_refuses_images_on_a_cluster_without_slurm():
    one = {"name": "one", "region": "us-east-1", "instance_type": "1xH100", "container_images": {"a": UBUNTU}}
    _, ctx = plan(one)
    assert "Set orchestrator = \"slurm\"" in errors(ctx)["container_images"]
    _, ctx = plan({**one, "orchestrator": "slurm"})
    assert not errors(ctx)


PARITY = [
    TRAIN_V3, UBUNTU, "ghcr.io/org/img@sha256:" + "a" * 64, "localhost/img", "[::1]:5000/x/y:z", "", " ",
    "https://ghcr.io/x:1", "ghcr.io/x@sha256:abc", "ghcr.io/Org/x:1", "ghcr.io/x:-1", "host:99999/x:1",
    "bad_host.io:5000/x:1", "[zz]:5000/x", "a//b", "x:", "ghcr.io/a__b/c-d.e:1", "ghcr.io/-a:1",
]


@pytest.mark.parametrize("reference", PARITY)
def test_plan_time_reference_check_agrees_with_the_backend(reference):
    try:
        images.parse_image_ref(reference)
        backend_ok = True
    except ApiError:
        backend_ok = False
    assert (reference_problem(reference) is None) == backend_ok


@pytest.mark.parametrize("host", ["registry.internal:5000", "ghcr.io", "[::1]:5000", "a/b", "https://x", "",
                                  "x:0", "under_score.io"])
def test_plan_time_registry_check_agrees_with_the_backend(host):
    try:
        images.check_registry_host(host)
        backend_ok = True
    except ApiError:
        backend_ok = False
    assert (registry_problem(host) is None) == backend_ok
