"""gpucloud_host_pool through the provider server, against an in-memory /v1/host-pools: the key given
write-only never reaches plan or state yet is sent on create and when its version changes; hosts keep the
configuration's spelling (null port, no recorded key); drift and disappearance show at read; the data
source finds a pool by name."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

from provider._proto import tfplugin6_pb2 as pb
from provider.cty import decode_msgpack, encode_msgpack, is_unknown
from provider.framework.server import ProviderServer
from provider.resources.host_pool import HostPoolResource
from provider.resources.host_pool_data_source import HostPoolDataSource
from provider.resources.provider import GpuCloudProvider
from tests.contract.private_keys import private_key, secret_lines

T = HostPoolResource.schema.cty_type
KEY_TEXT = private_key("ed25519", "openssh")
OTHER_KEY_TEXT = private_key("rsa", "openssh")
RECORDED = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHostKeyRecordedOnFirstUse"


class FakeHostPools:
    """/v1/host-pools as the backend answers it (hosts keyed by address and declared port)."""

    def __init__(self) -> None:
        self.pools: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str, Any]] = []
        self.delete_refusal: httpx.Response | None = None  # what a DELETE answers instead, if set

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        self.requests.append((request.method, request.url.path, body))
        path = request.url.path
        if path == "/v1/ssh-keys":  # the provider's credentials check
            return httpx.Response(200, json={"items": [], "next_page_token": None})
        if path == "/v1/host-pools" and request.method == "POST":
            return self.create(body)
        if path == "/v1/host-pools":
            name = request.url.params.get("name")
            items = [self.out(p) for p in self.pools.values() if name in (None, p["name"])]
            return httpx.Response(200, json={"items": items, "next_page_token": None})
        pool = self.pools.get(path.rsplit("/", 1)[1])
        if pool is None:
            return problem(404, "not_found", "host pool not found")
        if request.method == "PATCH":
            self.patch(pool, body)
        elif request.method == "DELETE":
            if self.delete_refusal is not None:
                return self.delete_refusal
            del self.pools[pool["id"]]
            return httpx.Response(204)
        return httpx.Response(200, json=self.out(pool), headers={"ETag": f'"{pool["generation"]}"'})

    def create(self, body: dict[str, Any]) -> httpx.Response:
        if "BEGIN OPENSSH PRIVATE KEY" not in body.get("ssh_private_key", ""):
            return problem(422, "validation_failed", "invalid", errors=[
                {"field": "ssh_private_key", "message": "ssh_private_key is not a private key"}])
        pool = {**body, "id": f"hpl_{len(self.pools) + 1}", "generation": 1, "labels": body.get("labels", {}),
                "hosts": [self.host(h) for h in body["hosts"]]}
        self.pools[pool["id"]] = pool
        return httpx.Response(201, json=self.out(pool), headers={"ETag": '"1"'})

    @staticmethod
    def host(declared: dict[str, Any]) -> dict[str, Any]:
        key = declared.get("host_key")
        return {"address": declared["address"], "port": declared.get("port"),
                "host_key": " ".join(key.split()[:2]) if key else None, "status": "pending"}

    def patch(self, pool: dict[str, Any], body: dict[str, Any]) -> None:
        body = dict(body)  # the recorded request stays whole
        hosts = body.pop("hosts", None)
        pool.update(body)
        if hosts is not None:
            kept = {(h["address"], h["port"]): h for h in pool["hosts"]}
            pool["hosts"] = [kept.get((h["address"], h.get("port"))) or self.host(h) for h in hosts]
        pool["generation"] += 1

    @staticmethod
    def out(pool: dict[str, Any]) -> dict[str, Any]:
        fingerprint = "SHA256:" + str(abs(hash(pool["ssh_private_key"])))
        hosts = [{"address": h["address"], "port": h["port"] or pool["ssh_port"], "status": h["status"],
                  "reason_code": h.get("reason_code"), "reason": h.get("reason"), "host_key": h["host_key"],
                  "checked_at": h.get("checked_at"), "cluster_id": h.get("cluster_id"), "node": h.get("node"),
                  "inventory": h.get("inventory")}
                 for h in pool["hosts"]]
        ready = sum(1 for h in hosts if h["status"] == "ready")
        return {
            **{k: pool[k] for k in ("id", "name", "region", "ssh_user", "ssh_port", "proxy_jump", "labels",
                                    "shared_storage_path", "install_packages")},
            "ssh_public_key": "ssh-ed25519 AAAAC3Nza gpucloud-host-pool", "ssh_key_fingerprint": fingerprint,
            "status": "ready" if ready else "probing", "ready_hosts": ready, "free_hosts": ready,
            "hosts": hosts, "created_at": "2026-12-03T18:00:00Z", "updated_at": "2026-12-03T18:00:00Z",
        }


def problem(status: int, code: str, detail: str, **extra: Any) -> httpx.Response:
    body = {"title": "x", "status": status, "code": code, "detail": detail, **extra}
    return httpx.Response(status, json=body, headers={"content-type": "application/problem+json"})


@pytest.fixture
def api() -> FakeHostPools:
    return FakeHostPools()


@pytest.fixture
def server(api: FakeHostPools) -> ProviderServer:
    server = ProviderServer(GpuCloudProvider(transport=httpx.MockTransport(api)))
    provider_config = {
        "endpoint": "http://api.test", "api_key": "k", "request_timeout": None, "max_retries": 0,
    }
    configured = server.configure_provider(pb.ConfigureProvider.Request(
        config=pb.DynamicValue(msgpack=encode_msgpack(provider_config, GpuCloudProvider.schema.cty_type))))
    assert not configured.diagnostics
    return server


def dv(value: Any, t: Any = T) -> pb.DynamicValue:
    return pb.DynamicValue(msgpack=encode_msgpack(value, t))


def decoded(value: pb.DynamicValue, t: Any = T) -> Any:
    return decode_msgpack(value.msgpack, t) if value.msgpack else None


def config(**values: Any) -> dict[str, Any]:
    base = dict.fromkeys(HostPoolResource.schema.attributes)
    base.update(name="lab", region="on-prem-berlin", hosts=[host("127.0.0.1", 1), host("127.0.0.1", 9)],
                ssh_private_key_wo=KEY_TEXT, ssh_private_key_wo_version="1")
    base.update(values)
    return base


def host(address: str, port: int | None = None, host_key: str | None = None) -> dict[str, Any]:
    return {"address": address, "port": port, "host_key": host_key}


def errors(response: Any) -> list[Any]:
    return [d for d in response.diagnostics if d.severity == pb.Diagnostic.ERROR]


def plan(server: ProviderServer, prior: Any, cfg: dict[str, Any], private: bytes = b"") -> Any:
    """PlanResourceChange as Terraform sends it: the proposal is the configuration over the prior state
    (computed values kept), write-only value included."""
    proposed = dict(cfg)
    if prior is not None:
        for name, attribute in HostPoolResource.schema.attributes.items():
            if attribute.computed and cfg.get(name) is None:
                proposed[name] = prior[name]
    response = server.plan_resource_change(pb.PlanResourceChange.Request(
        type_name="gpucloud_host_pool", prior_state=dv(prior), proposed_new_state=dv(proposed),
        config=dv(cfg), prior_private=private))
    assert not errors(response), response.diagnostics
    return response


def apply(server: ProviderServer, prior: Any, cfg: dict[str, Any], private: bytes = b"") -> tuple[Any, bytes]:
    planned = plan(server, prior, cfg, private)
    response = server.apply_resource_change(pb.ApplyResourceChange.Request(
        type_name="gpucloud_host_pool", prior_state=dv(prior), planned_state=planned.planned_state,
        config=dv(cfg), planned_private=planned.planned_private))
    assert not errors(response), response.diagnostics
    return decoded(response.new_state), response.private


def read(server: ProviderServer, state: Any, private: bytes) -> Any:
    response = server.read_resource(pb.ReadResource.Request(
        type_name="gpucloud_host_pool", current_state=dv(state), private=private))
    assert not errors(response), response.diagnostics
    return decoded(response.new_state)


# ---- schema and validation --------------------------------------------------------------------------


def test_host_pool_schema_marks_only_the_wo_key_write_only(server: ProviderServer) -> None:
    schema = server.get_provider_schema(pb.GetProviderSchema.Request()).resource_schemas["gpucloud_host_pool"]
    flags = {a.name: (a.write_only, a.sensitive) for a in schema.block.attributes}
    assert flags["ssh_private_key_wo"] == (True, True)
    assert flags["ssh_private_key"] == (False, True)
    assert [name for name, (write_only, _) in flags.items() if write_only] == ["ssh_private_key_wo"]


def validate(server: ProviderServer, cfg: dict[str, Any], *, write_only_allowed: bool = True) -> list[Any]:
    return errors(server.validate_resource_config(pb.ValidateResourceConfig.Request(
        type_name="gpucloud_host_pool", config=dv(cfg),
        client_capabilities=pb.ClientCapabilities(write_only_attributes_allowed=write_only_allowed))))


def test_host_pool_needs_exactly_one_of_the_two_key_attributes(server: ProviderServer) -> None:
    assert validate(server, config()) == []
    assert validate(server, config(ssh_private_key_wo=None, ssh_private_key_wo_version=None,
                                   ssh_private_key=KEY_TEXT)) == []
    for cfg in (config(ssh_private_key_wo=None, ssh_private_key_wo_version=None),
                config(ssh_private_key=KEY_TEXT, ssh_private_key_wo_version=None)):
        (error,) = validate(server, cfg)
        assert "ssh_private_key, ssh_private_key_wo" in error.detail


def test_host_pool_wo_version_without_the_wo_key_is_refused(server: ProviderServer) -> None:
    (error,) = validate(server, config(ssh_private_key_wo=None, ssh_private_key=KEY_TEXT))
    assert [s.attribute_name for s in error.attribute.steps] == ["ssh_private_key_wo_version"]
    assert "ssh_private_key_wo" in error.detail


def test_host_pool_wo_key_on_a_terraform_without_write_only_names_the_alternative(
    server: ProviderServer,
) -> None:
    (error,) = validate(server, config(), write_only_allowed=False)
    assert error.summary == "Write-Only Attribute Not Supported"
    assert "`ssh_private_key`" in error.detail and "Terraform 1.11" in error.detail
    assert [s.attribute_name for s in error.attribute.steps] == ["ssh_private_key_wo"]
    assert KEY_TEXT not in error.detail
    legacy = config(ssh_private_key_wo=None, ssh_private_key_wo_version=None, ssh_private_key=KEY_TEXT)
    assert validate(server, legacy, write_only_allowed=False) == []


def test_host_pool_plan_time_checks_come_from_the_api_contract(server: ProviderServer) -> None:
    bad = config(region="Berlin", ssh_port=70000, hosts=[host("10.0.0.5", 0)] * 65)
    found = {
        tuple(s.attribute_name or s.element_key_int for s in e.attribute.steps) for e in validate(server, bad)
    }
    assert {("region",), ("ssh_port",), ("hosts",), ("hosts", 0, "port")} <= found


def test_host_pool_key_length_is_checked_without_showing_the_key(server: ProviderServer) -> None:
    for attribute in ("ssh_private_key_wo", "ssh_private_key"):
        others = {"ssh_private_key_wo": None, "ssh_private_key_wo_version": None}
        (error,) = validate(server, config(**{**others, attribute: KEY_TEXT * 100}))
        assert [s.attribute_name for s in error.attribute.steps] == [attribute]
        assert "16384" in error.detail and not any(line in error.detail for line in secret_lines(KEY_TEXT))


# ---- write-only key: plan, apply, state -------------------------------------------------------------


def test_host_pool_create_sends_the_wo_key_and_keeps_it_out_of_plan_and_state(
    server: ProviderServer, api: FakeHostPools
) -> None:
    planned = decoded(plan(server, None, config()).planned_state)
    assert planned["ssh_private_key_wo"] is None and planned["ssh_private_key_wo_version"] == "1"
    assert is_unknown(planned["id"]) and is_unknown(planned["host_status"])

    state, _ = apply(server, None, config())
    (create,) = [body for method, _, body in api.requests if method == "POST"]
    assert create["ssh_private_key"] == KEY_TEXT
    assert create["hosts"] == [host("127.0.0.1", 1), host("127.0.0.1", 9)]
    assert create["ssh_user"] == "root" and create["ssh_port"] == 22 and create["install_packages"] is False
    assert state["ssh_private_key_wo"] is None and state["ssh_private_key"] is None
    text = json.dumps(state)
    assert not any(line in text for line in secret_lines(KEY_TEXT))
    assert state["status"] == "probing" and [h["status"] for h in state["host_status"]] == ["pending"] * 2


def test_host_pool_unchanged_config_plans_no_change_though_the_wo_key_is_set(server: ProviderServer) -> None:
    state, private = apply(server, None, config())
    planned = decoded(plan(server, state, config(), private).planned_state)
    assert planned == state  # nothing unknown: an empty plan


def test_host_pool_wo_key_is_sent_again_only_when_its_version_changes(
    server: ProviderServer, api: FakeHostPools
) -> None:
    state, private = apply(server, None, config())
    api.requests.clear()
    state, private = apply(server, state, config(name="lab-2", ssh_private_key_wo=OTHER_KEY_TEXT), private)
    (patch,) = [body for method, _, body in api.requests if method == "PATCH"]
    assert patch == {"name": "lab-2"}  # a new key without a new version is not seen

    api.requests.clear()
    planned = decoded(plan(server, state, config(ssh_private_key_wo=OTHER_KEY_TEXT,
                                                 ssh_private_key_wo_version="2", name="lab-2"), private)
                      .planned_state)
    assert is_unknown(planned["ssh_key_fingerprint"])  # a new key, a new fingerprint
    state, _ = apply(server, state, config(name="lab-2", ssh_private_key_wo=OTHER_KEY_TEXT,
                                           ssh_private_key_wo_version="2"), private)
    (patch,) = [body for method, _, body in api.requests if method == "PATCH"]
    assert patch == {"ssh_private_key": OTHER_KEY_TEXT}
    assert state["ssh_private_key_wo"] is None and state["ssh_private_key_wo_version"] == "2"


def test_host_pool_update_with_nothing_to_send_reads_the_pool_back(
    server: ProviderServer, api: FakeHostPools
) -> None:
    state, private = apply(server, None, config(labels={}))
    api.requests.clear()
    state, _ = apply(server, state, config(labels=None), private)  # no labels either way, for the API
    assert [method for method, _, _ in api.requests] == ["GET"]
    assert state["labels"] is None and state["status"] == "probing"


def test_host_pool_switching_to_the_stored_key_sends_it(server: ProviderServer, api: FakeHostPools) -> None:
    state, private = apply(server, None, config())
    api.requests.clear()
    legacy = config(ssh_private_key_wo=None, ssh_private_key_wo_version=None, ssh_private_key=OTHER_KEY_TEXT)
    state, _ = apply(server, state, legacy, private)
    (patch,) = [body for method, _, body in api.requests if method == "PATCH"]
    assert patch == {"ssh_private_key": OTHER_KEY_TEXT}
    assert state["ssh_private_key"] == OTHER_KEY_TEXT  # kept in state, as that attribute says


def test_host_pool_key_refused_by_the_api_points_at_the_wo_attribute(server: ProviderServer) -> None:
    cfg = config(ssh_private_key_wo="ssh-ed25519 AAAA a public key by mistake")
    planned = plan(server, None, cfg)
    response = server.apply_resource_change(pb.ApplyResourceChange.Request(
        type_name="gpucloud_host_pool", prior_state=dv(None), planned_state=planned.planned_state,
        config=dv(cfg), planned_private=planned.planned_private))
    (error,) = errors(response)
    assert [s.attribute_name for s in error.attribute.steps] == ["ssh_private_key_wo"]
    assert "not a private key" in error.detail and "AAAA a public key" not in error.detail


# ---- hosts, drift, import ---------------------------------------------------------------------------


def test_host_pool_recorded_host_keys_stay_out_of_hosts(server: ProviderServer, api: FakeHostPools) -> None:
    pinned = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPinned root@gpu-b"
    cfg = config(hosts=[host("gpu-a"), host("gpu-b", 2222, pinned)])
    state, private = apply(server, None, cfg)
    pool = api.pools[state["id"]]
    pool["hosts"][0].update(host_key=RECORDED, status="unreachable", reason_code="unreachable",
                            reason="Nothing answers on gpu-a port 22: check sshd and the firewall.")
    refreshed = read(server, state, private)
    assert refreshed["hosts"] == cfg["hosts"]  # null port and key, the pin with its comment: as written
    first = refreshed["host_status"][0]
    assert (first["host_key"], first["port"], first["reason_code"]) == (RECORDED, 22, "unreachable")
    assert refreshed["host_status"][1]["host_key"] == " ".join(pinned.split()[:2])
    assert refreshed["status"] == "probing"
    assert decoded(plan(server, refreshed, cfg, private).planned_state) == refreshed


def test_host_pool_host_status_names_the_cluster_node_on_each_host_without_a_diff(
    server: ProviderServer, api: FakeHostPools
) -> None:
    cfg = config(hosts=[host("gpu-a"), host("gpu-b")])
    state, private = apply(server, None, cfg)
    api.pools[state["id"]]["hosts"][0].update(status="ready", cluster_id="cls_7", node="own-0")
    refreshed = read(server, state, private)
    held, free = refreshed["host_status"]
    assert (held["cluster_id"], held["node"]) == ("cls_7", "own-0")
    assert (free["cluster_id"], free["node"]) == (None, None)
    assert decoded(plan(server, refreshed, cfg, private).planned_state) == refreshed  # computed: no diff


def test_host_pool_hosts_and_name_changed_outside_show_as_a_diff(
    server: ProviderServer, api: FakeHostPools
) -> None:
    state, private = apply(server, None, config())
    pool = api.pools[state["id"]]
    pool["name"] = "renamed-by-hand"
    pool["hosts"].append({"address": "10.0.0.7", "port": None, "host_key": None, "status": "pending"})
    refreshed = read(server, state, private)
    assert refreshed["name"] == "renamed-by-hand"
    assert refreshed["hosts"][-1] == host("10.0.0.7")
    api.requests.clear()
    state, _ = apply(server, refreshed, config(), private)
    (patch,) = [body for method, _, body in api.requests if method == "PATCH"]
    assert patch == {"name": "lab", "hosts": [host("127.0.0.1", 1), host("127.0.0.1", 9)]}
    assert state["hosts"] == config()["hosts"]


def test_host_pool_deleted_outside_is_dropped_from_state(server: ProviderServer, api: FakeHostPools) -> None:
    state, private = apply(server, None, config())
    api.pools.clear()
    response = server.read_resource(pb.ReadResource.Request(
        type_name="gpucloud_host_pool", current_state=dv(state), private=private))
    assert not errors(response) and decoded(response.new_state) is None


def test_host_pool_import_reads_everything_but_the_key(server: ProviderServer, api: FakeHostPools) -> None:
    state, _ = apply(server, None, config(labels={"team": "nlp"}, proxy_jump="jump@bastion"))
    response = server.import_resource_state(pb.ImportResourceState.Request(
        type_name="gpucloud_host_pool", id=state["id"]))
    (imported,) = response.imported_resources
    found = read(server, decoded(imported.state), imported.private)
    same = {k: v for k, v in state.items() if k not in ("ssh_private_key_wo_version",)}
    assert {k: found[k] for k in same} == same
    assert found["ssh_private_key_wo_version"] is None  # so the first apply sends the configured key again


def test_host_pool_destroy_while_a_cluster_uses_it_names_the_cluster(
    server: ProviderServer, api: FakeHostPools
) -> None:
    state, private = apply(server, None, config())
    api.delete_refusal = problem(409, "host_pool_in_use", "in use", cluster_id="cls_7")
    response = server.apply_resource_change(pb.ApplyResourceChange.Request(
        type_name="gpucloud_host_pool", prior_state=dv(state), planned_state=dv(None), config=dv(None),
        planned_private=private))
    (error,) = errors(response)
    assert error.summary == "Host Pool In Use" and "cls_7" in error.detail


# ---- data source ------------------------------------------------------------------------------------


def test_host_pool_data_source_finds_a_pool_by_name_without_key_attributes(
    server: ProviderServer, api: FakeHostPools
) -> None:
    state, _ = apply(server, None, config())
    api.pools[state["id"]]["hosts"][0]["host_key"] = RECORDED
    t = HostPoolDataSource.schema.cty_type
    cfg = {**dict.fromkeys(HostPoolDataSource.schema.attributes), "name": "lab"}
    response = server.read_data_source(pb.ReadDataSource.Request(
        type_name="gpucloud_host_pool", config=dv(cfg, t)))
    assert not errors(response), response.diagnostics
    found = decoded(response.state, t)
    assert found["id"] == state["id"] and not any(re.match("ssh_private", k) for k in found)
    assert found["hosts"] == [host("127.0.0.1", 1), host("127.0.0.1", 9)]
    assert [h["host_key"] for h in found["host_status"]] == [RECORDED, None]
    assert [h["status"] for h in found["host_status"]] == ["pending", "pending"]
    assert found["ssh_public_key"] == state["ssh_public_key"] and found["status"] == "probing"


def test_host_pool_unconfirmed_create_with_a_wo_key_is_dropped_with_a_warning(
    server: ProviderServer, api: FakeHostPools
) -> None:
    # The create's outcome was unknown; its write-only key was not kept, so it cannot be replayed.
    state = {**decoded(dv(config())), "ssh_private_key_wo": None, "id": "unconfirmed-create:key-1"}
    api.requests.clear()  # the provider's credentials check
    response = server.apply_resource_change(pb.ApplyResourceChange.Request(
        type_name="gpucloud_host_pool", prior_state=dv(state), planned_state=dv(None), config=dv(None)))
    assert not errors(response) and decoded(response.new_state) is None
    (warning,) = response.diagnostics
    assert warning.summary == "Host Pool Create Never Confirmed" and '"lab"' in warning.detail
    assert [method for method, _, _ in api.requests] == []


def test_host_pool_addresses_are_checked_at_plan_time_as_the_api_does(server: ProviderServer) -> None:
    good = config(hosts=[host("10.0.0.5"), host("fd00::5"), host("gpu-a.lab.example")])
    assert validate(server, good) == []
    (error,) = validate(server, config(hosts=[host("10.0.0.5"), host("-oProxyCommand=evil")]))
    assert [s.attribute_name or s.element_key_int for s in error.attribute.steps] == ["hosts", 1, "address"]
    assert "IP address or a DNS name" in error.detail
