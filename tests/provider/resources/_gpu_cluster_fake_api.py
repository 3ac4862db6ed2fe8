"""An in-memory stand-in for the cluster part of the backend API, for the provider's unit tests.

Clusters advance one status per GET (PENDING -> PROVISIONING -> RUNNING) so waits are exercised; a
cluster created while `fail_next_create` is set rolls back to FAILED instead, one created while
`degrade_next_create` is set loses its first node to a hardware fault (FAILED, phase Degraded) as it comes
up. `on_get` runs before each GET of a cluster (e.g. to send StopProvider in the middle of a wait).
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import httpx

CATALOG_TYPES = [
    {
        "name": "1xH100", "gpu_model": "H100 SXM 80GB", "gpu_count": 1, "fabric_capable": False,
        "interconnects": ["ethernet"], "on_demand_usd_per_gpu_hour": "4.29", "spot_usd_per_gpu_hour": "1.716",
        "rules": {"default_interconnect": "ethernet"},
        "reserved": [{"min_duration_days": 1, "discount": "0.10"},
                     {"min_duration_days": 30, "discount": "0.25"}],
        "availability": [
            {"region": "us-east-1", "fabric": "eth-east-a", "interconnect": "ethernet",
             "capacity_nodes": 64, "available_nodes": 64},
        ],
    },
    {
        "name": "8xH100", "gpu_model": "H100 SXM 80GB", "gpu_count": 8, "fabric_capable": True,
        "interconnects": ["infiniband"], "on_demand_usd_per_gpu_hour": "3.99",
        "spot_usd_per_gpu_hour": "1.596",
        "rules": {"default_interconnect": "infiniband"},
        "reserved": [{"min_duration_days": 1, "discount": "0.10"},
                     {"min_duration_days": 7, "discount": "0.15"},
                     {"min_duration_days": 30, "discount": "0.25"}],
        "availability": [
            {"region": "us-east-1", "fabric": "ib-east-a", "interconnect": "infiniband",
             "capacity_nodes": 256, "available_nodes": 4},
        ],
    },
    {
        "name": "8xH100-EFA", "gpu_model": "H100 SXM 80GB", "gpu_count": 8, "fabric_capable": True,
        "interconnects": ["efa"], "on_demand_usd_per_gpu_hour": "6.88",
        "rules": {"default_interconnect": "efa"}, "reserved": [],
        "availability": [
            {"region": "us-east-1", "fabric": "efa-east-a", "interconnect": "efa",
             "capacity_nodes": 64, "available_nodes": 64},
        ],
    },
    {
        "name": "8xB200", "gpu_model": "B200 180GB", "gpu_count": 8, "fabric_capable": True,
        "interconnects": ["infiniband"], "on_demand_usd_per_gpu_hour": "8.50",
        "rules": {"default_interconnect": "infiniband"}, "reserved": [],
        "availability": [
            {"region": "us-west-2", "fabric": "ib-west-a", "interconnect": "infiniband",
             "capacity_nodes": 32, "available_nodes": 32},
        ],
    },
]
REGIONS = [{"name": "us-east-1"}, {"name": "us-west-2"}]
STEPS = ["PENDING", "PROVISIONING", "RUNNING"]
LOGIN_HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILogin"  # the API's OpenSSH line (shape only)


@dataclass
class FakeClusterApi:
    clusters: dict[str, dict[str, Any]] = field(default_factory=dict)
    volumes: dict[str, dict[str, Any]] = field(default_factory=lambda: {
        "vol_east": {"id": "vol_east", "region": "us-east-1"},
        "vol_west": {"id": "vol_west", "region": "us-west-2"},
        "vol_two": {"id": "vol_two", "region": "us-east-1"},
    })
    ssh_keys: dict[str, dict[str, Any]] = field(default_factory=lambda: {"key_a": {"id": "key_a"}})
    reserved_ips: dict[str, dict[str, Any]] = field(default_factory=lambda: {
        "rip_west": {"id": "rip_west", "region": "us-west-2", "address": "198.18.64.7"},
    })
    host_pools: dict[str, dict[str, Any]] = field(default_factory=lambda: {"hpl_lab": host_pool()})
    requests: list[tuple[str, str, Any]] = field(default_factory=list)
    idempotency: dict[str, str] = field(default_factory=dict)
    fail_next_create: bool = False
    degrade_next_create: bool = False
    on_get: Callable[[], None] | None = None
    reject_create: list[dict[str, str]] | None = None  # field errors of a 422 for the next create
    unreachable_posts: int = 0  # the next N cluster POSTs fail as if the backend were down
    lost_create_answers: int = 0  # the next N cluster creates happen, but answer 500 (the answer is lost)
    credentials_expire_at: str = "2099-01-01T00:00:00Z"  # the kubeconfig token's lease
    credentials_lapsed: bool = False  # renewals answer 409 credentials_expired
    credential_reads: int = 0
    credential_renewals: int = 0
    scope_labels: dict[str, str] = field(default_factory=dict)  # what a team-scoped key's creates get
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _clock: itertools.count[int] = field(default_factory=lambda: itertools.count(0))

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def _now(self) -> str:
        return f"2026-11-26T01:00:{next(self._clock) % 60:02d}Z"

    def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        path, method = request.url.path, request.method
        self.requests.append((method, path, json.loads(request.content) if request.content else None))
        parts = path.strip("/").split("/")[1:]  # drop "v1"
        if parts == ["regions"]:
            return httpx.Response(200, json={"items": REGIONS})
        if parts == ["instance-types"]:
            return httpx.Response(200, json={"items": CATALOG_TYPES})
        if parts == ["ssh-keys"]:
            return httpx.Response(200, json={"items": []})
        if parts == ["billing", "usage"]:
            return httpx.Response(200, json={"items": []})
        if parts == ["quotas"]:  # a project without quotas
            return httpx.Response(200, json={"max_clusters": None, "clusters_in_use": 0, "max_gpus": None,
                                             "gpus_in_use": 0, "max_hourly_usd": None,
                                             "hourly_usd_in_use": "0", "updated_at": None})
        if parts[0] == "ssh-keys" and len(parts) == 2:
            return self._found(self.ssh_keys.get(parts[1]))
        if parts[0] == "volumes" and len(parts) == 2:
            return self._found(self.volumes.get(parts[1]))
        if parts[0] == "reserved-ips" and len(parts) == 2:
            return self._found(self.reserved_ips.get(parts[1]))
        if parts[0] == "host-pools" and len(parts) == 2:
            return self._found(self.host_pools.get(parts[1]))
        if parts == ["clusters"] and method == "POST":
            return self._create(request, body)
        if parts == ["clusters"]:
            name = request.url.params.get("name")
            items = [c for c in self.clusters.values() if name is None or c["name"] == name]
            return httpx.Response(200, json={"items": items})
        cluster = self.clusters.get(parts[1])
        if cluster is None:
            return self._problem(404, "not_found", "no such cluster")
        if len(parts) == 4 and parts[2] == "volumes":
            if method == "POST":
                cluster["volume_ids"].append(parts[3])
            else:
                cluster["volume_ids"].remove(parts[3])
            cluster["status"] = "PROVISIONING"  # the engine reconfigures the nodes
            return self._changed(cluster)
        if len(parts) == 3 and parts[2] == "nodes" and method == "GET":
            return httpx.Response(200, json={"items": [
                {"name": n["name"], "instance_id": n["instance_id"], "status": n["status"],
                 "health": _health(n)}
                for n in cluster["nodes"]
            ]})
        if len(parts) == 3 and parts[2] == "credentials":
            self.credential_reads += 1
            return httpx.Response(200, json={"kubeconfig": "apiVersion: v1\n", "api_endpoint": "https://k",
                                             "expires_at": self.credentials_expire_at})
        if parts[2:] == ["credentials", "renew"] and method == "POST":
            if self.credentials_lapsed:
                body = {"title": "Conflict", "status": 409, "code": "credentials_expired",
                        "detail": f"the credentials of cluster {parts[1]} lapsed; read them again"}
                return httpx.Response(409, json=body, headers={"content-type": "application/problem+json"})
            self.credential_renewals += 1
            return httpx.Response(200, json={"expires_at": self.credentials_expire_at})
        if method == "GET":
            if self.on_get is not None:
                self.on_get()
            self._advance(cluster)
            for node in cluster["nodes"]:  # as the backend: each node's health from its status
                node["health"] = _health(node)
            return httpx.Response(200, json=cluster, headers={"ETag": f'"{cluster["updated_at"]}"'})
        if method == "PATCH":
            billing = body.pop("billing", None)
            cluster.update(body)
            if "ttl" in body or "expires_at" in body:
                cluster.update(_lifetime(body, cluster["created_at"]))
            if billing:
                cluster["billing"].update(billing)
            return self._changed(cluster)
        if method == "DELETE":
            del self.clusters[parts[1]]
            return httpx.Response(202, json=cluster)
        return self._problem(405, "method_not_allowed", method)

    def _create(self, request: httpx.Request, spec: dict[str, Any]) -> httpx.Response:
        if self.unreachable_posts:
            self.unreachable_posts -= 1
            raise httpx.ConnectError("connection refused", request=request)
        if self.reject_create:
            errors, self.reject_create = self.reject_create, None
            return httpx.Response(422, json={"status": 422, "code": "validation_failed", "detail": "invalid",
                                             "errors": errors},
                                  headers={"content-type": "application/problem+json"})
        key = request.headers.get("idempotency-key", "")
        if key in self.idempotency:
            return httpx.Response(201, json=self.clusters[self.idempotency[key]])
        cluster_id = f"cls_{next(self._ids)}"
        if spec.get("host_pool_id") in self.host_pools:  # left out: the pool's region, its servers' type
            pool = self.host_pools[spec["host_pool_id"]]
            spec = {**spec, "region": spec.get("region") or pool["region"],
                    "instance_type": spec.get("instance_type") or "8xH100"}
        itype = next(t for t in CATALOG_TYPES if t["name"] == spec["instance_type"])
        nodes = spec.get("node_count", 1)
        billing = {"type": "on_demand", "duration_days": None, "on_expiry": "decommission",
                   **spec.get("billing", {})}
        cluster = {
            "id": cluster_id, "name": spec["name"], "region": spec["region"],
            "instance_type": spec["instance_type"], "node_count": nodes,
            "orchestrator": spec.get("orchestrator") or ("slurm" if nodes > 1 else "none"),
            "interconnect": spec.get("interconnect") or itype["interconnects"][0],
            "container": spec.get("container"), "ssh_key_ids": spec.get("ssh_key_ids", []),
            "volume_ids": spec.get("volume_ids", []), "billing": billing,
            "labels": {**spec.get("labels", {}), **self.scope_labels},
            "deletion_protection": spec.get("deletion_protection", False),
            "max_hourly_cost_usd": spec.get("max_hourly_cost_usd"),
            "status": "PENDING", "phase": "Admitted", "status_reason": None,
            "num_gpus": nodes * itype["gpu_count"], "gpu_type": itype["gpu_model"],
            "host_pool_id": spec.get("host_pool_id"),
            "estimated_hourly_cost_usd": 0.0 if spec.get("host_pool_id") else float(
                Decimal(itype["on_demand_usd_per_gpu_hour"]) * itype["gpu_count"] * nodes
            ),
            "deletion_requested_at": None, "created_at": "2026-11-26T01:00:00Z", "updated_at": self._now(),
            "nodes": [], "login": None, "slurm": None, "kubernetes": None, "nccl_env": {},
            "phase_history": [], "_fail": self.fail_next_create, "_degrade": self.degrade_next_create,
            "idle_teardown_minutes": spec.get("idle_teardown_minutes"), "warnings": [],
            **_lifetime(spec, "2026-11-26T01:00:00Z"),
        }
        self.fail_next_create = self.degrade_next_create = False
        self.clusters[cluster_id] = cluster
        self.idempotency[key] = cluster_id
        if self.lost_create_answers:
            self.lost_create_answers -= 1
            return self._problem(500, "internal", "the answer was lost")
        return httpx.Response(201, json=cluster)

    def _advance(self, cluster: dict[str, Any]) -> None:
        """One step towards RUNNING (or FAILED) per read, converging any node count change."""
        if cluster["_fail"]:
            cluster.update(status="FAILED", phase="Failed", status_reason="node boot failed 3 times")
            return
        if cluster["_degrade"] and cluster["status"] != "PENDING":  # stays Degraded: no repair here
            nodes = [self._node(cluster, i) for i in range(cluster["node_count"])]
            fault = "hardware fault: XID 79: GPU 3 has fallen off the bus"
            nodes[0].update(status="FAILED", status_reason=fault)
            cluster.update(status="FAILED", phase="Degraded", nodes=nodes,
                           status_reason=f"node {nodes[0]['name']}: {fault}")
            return
        index = STEPS.index(cluster["status"]) if cluster["status"] in STEPS else 2
        wanted = cluster["node_count"]
        if cluster["status"] != "RUNNING" or len(cluster["nodes"]) != wanted:
            cluster["status"] = STEPS[min(index + 1, 2)]
            cluster["nodes"] = [self._node(cluster, i) for i in range(wanted)]
            cluster["phase"] = "Ready" if cluster["status"] == "RUNNING" else "ProvisioningNodes"
            cluster["phase_history"].append({"phase": cluster["phase"], "at": self._now()})
            if cluster["status"] == "RUNNING":
                self._runtime(cluster)

    def _node(self, cluster: dict[str, Any], index: int) -> dict[str, Any]:
        network: dict[str, Any] = {"fabric": "ib-east-a", "scalable_unit": 0, "position": index,
                                   "leaves": [f"ib-east-a-su00-leaf{r}" for r in range(2)]}
        if cluster["interconnect"] == "infiniband":
            network["partition_key"] = "0x8001"
            network["hcas"] = [{"device": f"mlx5_{r}", "role": "compute"} for r in range(8)] + [
                {"device": "mlx5_8", "role": "storage"}]
        if cluster["interconnect"] == "efa":
            network["efa_interfaces"] = [{"device": f"rdmap{i}s0"} for i in range(4)]
        return {"name": f"{cluster['name']}-{index}", "index": index, "instance_id": f"nod_{index}",
                "status": cluster["status"],
                "private_ip": f"10.0.0.{index + 10}", "public_ip": None, "network": network,
                "host_key": f"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINode{index}"}

    def _runtime(self, cluster: dict[str, Any]) -> None:
        cluster["login"] = {"host": f"{cluster['name']}-jumphost", "public_ip": "198.18.0.7",
                            "user": "ubuntu", "ssh_command": "ssh ubuntu@198.18.0.7",
                            "host_key": LOGIN_HOST_KEY}
        if cluster["orchestrator"] == "slurm":
            cluster["slurm"] = {"controller": f"{cluster['name']}-jumphost", "partition": "gpu"}
        if cluster["orchestrator"] == "kubernetes":
            cluster["kubernetes"] = {"api_endpoint": "https://198.18.0.7:6443", "ca_certificate": "PEM"}
        cluster["nccl_env"] = {"NCCL_SOCKET_IFNAME": "=eth0"}

    def _changed(self, cluster: dict[str, Any]) -> httpx.Response:
        cluster["updated_at"] = self._now()
        return httpx.Response(200, json=cluster, headers={"ETag": f'"{cluster["updated_at"]}"'})

    @staticmethod
    def _found(obj: dict[str, Any] | None) -> httpx.Response:
        if obj is None:
            return FakeClusterApi._problem(404, "not_found", "not found")
        return httpx.Response(200, json=obj)

    @staticmethod
    def _problem(status: int, code: str, detail: str) -> httpx.Response:
        return httpx.Response(status, json={"status": status, "code": code, "detail": detail},
                              headers={"content-type": "application/problem+json"})


def host_pool(hosts: int = 3, *, free: int = 3, pending: int = 0, **values: Any) -> dict[str, Any]:
    """A host pool as `GET /v1/host-pools/{id}` answers: `hosts` servers with 8 H100s, the first `free`
    ready and held by no cluster, the last `pending` not checked yet, the others held by cluster cls_9."""
    listed = []
    for index in range(hosts):
        status = "pending" if index >= hosts - pending else "ready"
        held = status == "ready" and index >= free
        listed.append({"address": f"10.0.0.{index + 5}", "port": 22, "status": status,
                       "cluster_id": "cls_9" if held else None, "node": f"other-{index}" if held else None,
                       "inventory": {"gpu_count": 8, "gpu_model": "NVIDIA H100 80GB HBM3"}})
    ready = sum(1 for h in listed if h["status"] == "ready")
    return {"id": "hpl_lab", "name": "lab", "region": "us-east-1", "proxy_jump": None,
            "shared_storage_path": None, "status": "ready" if ready else "probing", "ready_hosts": ready,
            "free_hosts": min(free, ready), "hosts": listed, **values}


def _lifetime(spec: dict[str, Any], created_at: str) -> dict[str, Any]:
    """ttl and expires_at as the API stores them: a ttl counts from created_at (whole hours here)."""
    ttl = spec.get("ttl")
    if ttl is not None:
        created = dt.datetime.fromisoformat(created_at.replace("Z", "+00:00"))
        moment = created + dt.timedelta(hours=int(ttl.removesuffix("h")))
        return {"ttl": ttl, "expires_at": moment.isoformat().replace("+00:00", "Z")}
    expires_at = spec.get("expires_at")
    if expires_at is not None:  # the API answers in UTC
        moment = dt.datetime.fromisoformat(expires_at.replace("Z", "+00:00")).astimezone(dt.UTC)
        return {"ttl": None, "expires_at": moment.isoformat().replace("+00:00", "Z")}
    return {"ttl": None, "expires_at": None}


def _health(node: dict[str, Any]) -> str:
    return {"RUNNING": "healthy", "FAILED": "failed"}.get(node["status"], "repairing")
