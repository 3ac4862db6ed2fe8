"""Engine routes: catalog with live capacity, generated artifacts, admin-only audited credentials."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from kubernetes import client as kube_client
from kubernetes import config as kube_config

from backend.provisioning.worker import EngineWorker
from tests.backend.engine.conftest import create, drain, get


def test_catalog_lists_regions_and_instance_types_with_capacity(
    admin: TestClient, member: TestClient
) -> None:
    regions = member.get("/v1/regions").json()["items"]
    east = next(r for r in regions if r["name"] == "us-east-1")
    assert {"infiniband", "efa", "ethernet"} <= set(east["interconnects"])
    assert next(f for f in east["fabrics"] if f["name"] == "ib-east-a")["scalable_units"] == 10
    before = _available(member, "8xH100", "ib-east-a")
    create(admin, node_count=3)
    assert _available(member, "8xH100", "ib-east-a") == before - 3
    h100 = next(t for t in member.get("/v1/instance-types").json()["items"] if t["name"] == "8xH100")
    assert h100["gpu_count"] == 8 and h100["on_demand_usd_per_gpu_hour"] == "3.99"
    assert h100["rules"]["multi_node"] is True and h100["reserved"][0]["min_duration_days"] == 1


def _available(client: TestClient, itype: str, fabric: str) -> int:
    found = next(t for t in client.get("/v1/instance-types").json()["items"] if t["name"] == itype)
    count: int = next(a for a in found["availability"] if a["fabric"] == fabric)["available_nodes"]
    return count


def test_slurm_artifacts_are_served_and_parse_with_scontrol(
    admin: TestClient, member: TestClient, make_worker: Callable[..., EngineWorker], tmp_path: Path
) -> None:
    cluster = create(admin, node_count=3)
    drain(make_worker())
    body = get(admin, cluster["id"])
    assert body["slurm"]["controller"] == "train-jumphost" and body["kubernetes"] is None
    assert body["nccl_env"]["NCCL_IB_HCA"].startswith("=mlx5_0,")
    assert body["login"]["host"] == "train-jumphost" and body["login"]["public_ip"]
    hcas = body["nodes"][0]["network"]["hcas"]
    assert [h["device"] for h in hcas[:8]] == [f"mlx5_{i}" for i in range(8)]
    assert body["nodes"][0]["network"]["partition_key"] == body["fabric"]["partition_key"]
    for name in ("slurm.conf", "gres.conf", "cgroup.conf", "topology.conf"):
        response = member.get(f"/v1/clusters/{cluster['id']}/artifacts/{name}")
        assert response.status_code == 200, response.text
        (tmp_path / name).write_text(response.text)
    env = {**os.environ, "SLURM_CONF": str(tmp_path / "slurm.conf")}
    done = subprocess.run(
        ["scontrol", "show", "hostnames", "train-[0-2]"], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0 and done.stdout.split() == ["train-0", "train-1", "train-2"], done.stderr
    assert member.get(f"/v1/clusters/{cluster['id']}/artifacts/kubernetes-nodes.json").status_code == 404
    assert member.get(f"/v1/clusters/{cluster['id']}/artifacts/passwd").status_code == 422


def test_kubernetes_credentials_are_admin_only_audited_and_load(
    admin: TestClient, member: TestClient, make_worker: Callable[..., EngineWorker], tmp_path: Path
) -> None:
    cluster = create(admin, orchestrator="kubernetes")
    drain(make_worker())
    body = get(admin, cluster["id"])
    assert body["kubernetes"]["api_endpoint"].startswith("https://")
    assert "token" not in str(body["kubernetes"]) and "kubeconfig" not in str(body)
    assert member.get(f"/v1/clusters/{cluster['id']}/credentials").status_code == 403
    response = admin.get(f"/v1/clusters/{cluster['id']}/credentials")
    assert response.status_code == 200 and response.headers["cache-control"] == "no-store"
    path = tmp_path / "kubeconfig"
    path.write_text(response.json()["kubeconfig"])
    configuration = kube_client.Configuration()
    kube_config.load_kube_config(config_file=str(path), client_configuration=configuration)  # type: ignore[no-untyped-call]
    assert configuration.host == body["kubernetes"]["api_endpoint"]
    events = admin.get("/v1/audit-events", params={"action": "cluster.credentials_read"}).json()["items"]
    assert [e["resource_id"] for e in events] == [cluster["id"]]
    nodes = member.get(f"/v1/clusters/{cluster['id']}/artifacts/kubernetes-nodes.json").json()["items"]
    assert nodes[0]["metadata"]["labels"]["gpucloud.io/fabric"] == "ib-east-a"
    slurm_cluster = create(admin, name="other")
    assert admin.get(f"/v1/clusters/{slurm_cluster['id']}/credentials").status_code == 404


def test_kubernetes_credentials_are_a_lease_renewed_until_they_lapse(
    admin: TestClient, member: TestClient, make_worker: Callable[..., EngineWorker],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from backend.api import cluster_artifacts

    cluster = create(admin, orchestrator="kubernetes")
    drain(make_worker())
    now = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    monkeypatch.setattr(cluster_artifacts, "utcnow", lambda: now)
    credentials = f"/v1/clusters/{cluster['id']}/credentials"
    first = admin.get(credentials).json()
    assert first["expires_at"] == "2030-01-01T01:00:00Z"  # the default lease, one hour
    assert member.post(credentials + "/renew").status_code == 403

    now += dt.timedelta(minutes=50)
    renewed = admin.post(credentials + "/renew")
    assert renewed.status_code == 200 and renewed.json() == {"expires_at": "2030-01-01T01:50:00Z"}
    again = admin.get(credentials).json()  # still valid: the same token, no new lease
    assert again["kubeconfig"] == first["kubeconfig"] and again["expires_at"] == "2030-01-01T01:50:00Z"

    now += dt.timedelta(hours=2)
    lapsed = admin.post(credentials + "/renew")
    assert lapsed.status_code == 409 and lapsed.json()["code"] == "credentials_expired"
    fresh = admin.get(credentials).json()
    assert fresh["kubeconfig"] != first["kubeconfig"] and fresh["expires_at"] == "2030-01-01T03:50:00Z"
    events = admin.get("/v1/audit-events", params={"action": "cluster.credentials_renewed"}).json()["items"]
    assert [e["resource_id"] for e in events] == [cluster["id"]]
    slurm_cluster = create(admin, name="other")
    assert admin.post(f"/v1/clusters/{slurm_cluster['id']}/credentials/renew").status_code == 404


def test_other_projects_cannot_read_artifacts(
    admin: TestClient, client: TestClient, settings: object, make_worker: Callable[..., EngineWorker]
) -> None:
    from tests.backend.conftest import make_tenant

    cluster = create(admin)
    drain(make_worker())
    other = make_tenant(settings, "globex")  # type: ignore[arg-type]
    intruder = TestClient(client.app, headers={"Authorization": f"Bearer {other.admin_key}"})
    assert intruder.get(f"/v1/clusters/{cluster['id']}/artifacts/slurm.conf").status_code == 404
    assert intruder.get(f"/v1/clusters/{cluster['id']}/credentials").status_code == 404


def test_efa_cluster_publishes_interfaces_and_libfabric_env(
    admin: TestClient, make_worker: Callable[..., EngineWorker]
) -> None:
    cluster = create(admin, instance_type="8xH100-EFA")
    drain(make_worker())
    body = get(admin, cluster["id"])
    assert body["status"] == "RUNNING" and body["interconnect"] == "efa"
    assert body["fabric"]["kind"] == "efa" and body["fabric"]["partition_key"] is None
    network = body["nodes"][0]["network"]
    assert len(network["efa_interfaces"]) == 32 and "hcas" not in network
    assert body["nccl_env"]["FI_PROVIDER"] == "efa" and body["nccl_env"]["RDMAV_FORK_SAFE"] == "1"


def test_artifacts_answers_conform_to_the_committed_contract(
    admin: TestClient, make_worker: Callable[..., EngineWorker]
) -> None:
    # schemathesis' checks on real files (its generated requests never reach a placed cluster).
    import schemathesis
    from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance

    from tests.backend.test_openapi import COMMITTED

    clusters = {
        "slurm.conf": create(admin),
        "kubernetes-nodes.json": create(admin, name="kube", orchestrator="kubernetes"),
    }
    drain(make_worker())
    operation = schemathesis.openapi.from_path(str(COMMITTED))["/v1/clusters/{cluster_id}/artifacts/{file}"][
        "GET"
    ]
    for name in ("slurm.conf", "gres.conf", "topology.conf", "hosts", "kubernetes-nodes.json"):
        cluster = clusters.get(name, clusters["slurm.conf"])
        case = operation.Case(
            path_parameters={"cluster_id": cluster["id"], "file": name},
            headers={"Authorization": admin.headers["Authorization"]},
        )
        response = case.call_and_validate(
            app=admin.app, checks=[content_type_conformance, response_schema_conformance]
        )
        assert response.status_code == 200, (name, response.text)
