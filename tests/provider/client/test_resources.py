"""Per-resource methods: paths, bodies, headers and pagination."""

from __future__ import annotations

import json
from decimal import Decimal

import httpx
import pytest

from provider.client import GpuCloudClient, ServerError, new_idempotency_key
from tests.provider.client.fakes import ScriptedApi, make_client


def page(items: list[dict[str, object]], token: str | None) -> httpx.Response:
    return httpx.Response(200, json={"items": items, "next_page_token": token})


def test_listing_follows_page_tokens() -> None:
    api = ScriptedApi(page([{"id": "a"}, {"id": "b"}], "t1"), page([{"id": "c"}], "t2"), page([], None))
    keys = make_client(api).list_ssh_keys(name="laptop")
    assert [k["id"] for k in keys] == ["a", "b", "c"]
    params = [dict(r.url.params) for r in api.requests]
    assert params[0] == {"name": "laptop", "page_size": "100"}
    assert params[1]["page_token"] == "t1" and params[2]["page_token"] == "t2"


def test_listing_that_repeats_a_token_is_an_error_not_a_loop() -> None:
    api = ScriptedApi(page([{"id": "a"}], "t1"), page([{"id": "b"}], "t1"))
    with pytest.raises(ServerError, match="repeats a page token"):
        make_client(api).list_volumes()


def test_unpaginated_catalog_listing_is_accepted() -> None:
    api = ScriptedApi(httpx.Response(200, json=[{"name": "us-east-1"}]))
    assert make_client(api).list_regions() == [{"name": "us-east-1"}]


def test_create_cluster_sends_the_spec_with_exact_decimals() -> None:
    api = ScriptedApi(httpx.Response(201, json={"id": "clu_1", "max_hourly_cost_usd": 99.1234}))
    spec = {
        "name": "c",
        "node_count": 2,
        "max_hourly_cost_usd": Decimal("99.1234"),
        "labels": {"a": "b"},
        "billing": {"type": "reserved", "duration_days": 30},
        "ssh_key_ids": ("ssh_1",),
    }
    cluster = make_client(api).create_cluster(spec, idempotency_key="k1")
    request = api.requests[0]
    assert (request.method, request.url.path) == ("POST", "/v1/clusters")
    assert request.headers["Content-Type"] == "application/json"
    assert b'"max_hourly_cost_usd":99.1234' in request.content
    assert json.loads(request.content)["ssh_key_ids"] == ["ssh_1"]
    assert cluster["max_hourly_cost_usd"] == Decimal("99.1234")  # numbers come back exact, never float


def test_updates_send_only_given_fields_and_if_match() -> None:
    api = ScriptedApi(httpx.Response(200, json={"id": "vol_1"}), httpx.Response(200, json={"id": "ssh_1"}))
    client = make_client(api)
    client.update_volume("vol_1", size_tib=4, if_match='"3"')
    client.update_ssh_key("ssh_1", name="new")
    assert api.bodies == [{"size_tib": 4}, {"name": "new"}]
    assert api.requests[0].method == "PATCH" and api.requests[0].headers["If-Match"] == '"3"'
    assert "If-Match" not in api.requests[1].headers


def test_cluster_operations_use_the_documented_paths() -> None:
    cluster = {"id": "clu_1"}
    api = ScriptedApi(
        httpx.Response(200, json=cluster),
        httpx.Response(200, json=cluster),
        httpx.Response(202, json={"id": "clu_1", "status": "DESTROYING"}),
        httpx.Response(200, text="NodeName=node-0\n", headers={"content-type": "text/plain"}),
        httpx.Response(200, json={"user": "ubuntu"}),
        httpx.Response(200, json={"expires_at": "2030-01-01T01:00:00Z"}),
        httpx.Response(204),
        httpx.Response(204),
    )
    client = make_client(api)
    client.attach_volume("clu_1", "vol_1", idempotency_key="attach-1")
    client.detach_volume("clu_1", "vol_1")
    assert client.delete_cluster("clu_1") == {"id": "clu_1", "status": "DESTROYING"}
    assert client.get_cluster_artifact("clu_1", "slurm.conf") == "NodeName=node-0\n"
    assert client.get_cluster_credentials("clu_1") == {"user": "ubuntu"}
    assert client.renew_cluster_credentials("clu_1") == {"expires_at": "2030-01-01T01:00:00Z"}
    client.delete_volume("vol_1")
    client.delete_ssh_key("ssh_1")
    assert [(r.method, r.url.path) for r in api.requests] == [
        ("POST", "/v1/clusters/clu_1/volumes/vol_1"),
        ("DELETE", "/v1/clusters/clu_1/volumes/vol_1"),
        ("DELETE", "/v1/clusters/clu_1"),
        ("GET", "/v1/clusters/clu_1/artifacts/slurm.conf"),
        ("GET", "/v1/clusters/clu_1/credentials"),
        ("POST", "/v1/clusters/clu_1/credentials/renew"),
        ("DELETE", "/v1/volumes/vol_1"),
        ("DELETE", "/v1/ssh-keys/ssh_1"),
    ]
    assert api.requests[0].headers["Idempotency-Key"] == "attach-1"


def test_ids_cannot_escape_their_path_segment() -> None:
    api = ScriptedApi(httpx.Response(200, json={"id": "x"}))
    make_client(api).get_cluster("../volumes/vol_1?x=1")
    assert api.requests[0].url.raw_path == b"/v1/clusters/..%2Fvolumes%2Fvol_1%3Fx%3D1"


def test_catalog_filters_and_endpoint_prefix() -> None:
    api = ScriptedApi(page([{"name": "8xH100"}], None))
    client = GpuCloudClient("http://api.test/gpucloud/", "k", transport=httpx.MockTransport(api))
    client.list_instance_types(region="us-east-1", min_gpus=8)
    url = api.requests[0].url
    assert url.path == "/gpucloud/v1/instance-types"
    assert dict(url.params) == {"region": "us-east-1", "min_gpus": "8", "page_size": "100"}


def test_creates_of_keys_volumes_and_credits_carry_the_callers_key() -> None:
    api = ScriptedApi(*[httpx.Response(201, json={"id": "x"})] * 3)
    client = make_client(api)
    client.create_ssh_key(name="k", public_key="ssh-ed25519 AAAA", idempotency_key="a")
    client.create_volume(name="v", region="r", size_tib=2, idempotency_key="b")
    client.add_credits({"amount_usd": Decimal("100.00")}, idempotency_key="c")
    assert [r.headers["Idempotency-Key"] for r in api.requests] == ["a", "b", "c"]
    assert api.bodies[1] == {"name": "v", "region": "r", "size_tib": 2}
    assert api.requests[2].content == b'{"amount_usd":100.00}'


def test_new_idempotency_keys_are_unique() -> None:
    assert len({new_idempotency_key() for _ in range(100)}) == 100


def test_generic_request_exposes_status_and_etag() -> None:
    api = ScriptedApi(httpx.Response(200, json={"id": "vol_1"}, headers={"ETag": '"7"'}))
    response = make_client(api).request("GET", "/v1/volumes/vol_1")
    assert (response.status, response.body, response.etag) == (200, {"id": "vol_1"}, '"7"')
