"""Clusters on a host pool from the CLI (issue 32): `cluster create --host-pool` sends the pool's id, its
region and Slurm (the shape may be left to the API), refusing what a pool cannot have before anything is
sent; `cluster info` names the pool and no compute charge; `host-pool show` names the cluster node on each
host."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from provider.cli import app as app_module
from provider.cli.clusters import show_cluster
from provider.cli.main import main
from tests.provider.cli.test_cli_host_pools import POOL, READY_HOST, rows
from tests.provider.client.fakes import ScriptedApi, make_client

KEY = {"id": "ssh_1", "name": "laptop"}
LAB = {**POOL, "region": "us-east-1"}
CREATED = {"id": "cls_1", "name": "own", "region": "us-east-1", "status": "PENDING", "node_count": 2,
           "instance_type": "8xH200", "host_pool_id": "hpl_1", "estimated_hourly_cost_usd": 0}


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ScriptedApi:
    scripted = ScriptedApi()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("GPUCLOUD_ENDPOINT", raising=False)
    monkeypatch.setenv("GPUCLOUD_API_KEY", "gpc_test")
    monkeypatch.setattr(app_module, "GpuCloudClient", lambda *args, **kwargs: make_client(scripted))
    return scripted


def page(*items: Any) -> httpx.Response:
    return httpx.Response(200, json={"items": list(items), "next_page_token": None})


def test_cli_create_on_a_host_pool_by_name_sends_its_id_region_and_slurm(
    api: ScriptedApi, capsys: pytest.CaptureFixture[str]
) -> None:
    api.script = [page(LAB), page(KEY), httpx.Response(201, json=CREATED)]
    assert main(["cluster", "create", "8xH200", "-n", "2", "--host-pool", "lab", "--name", "own",
                 "--no-wait"]) == 0
    (body,) = [b for r, b in zip(api.requests, api.bodies, strict=True) if r.url.path == "/v1/clusters"]
    assert isinstance(body, dict)
    assert (body["host_pool_id"], body["region"], body["orchestrator"], body["node_count"]) == (
        "hpl_1", "us-east-1", "slurm", 2)
    assert dict(api.requests[0].url.params) == {"name": "lab", "page_size": "100"}
    assert "/v1/instance-types" not in [r.url.path for r in api.requests]  # the region is the pool's
    assert "2 x 8xH200 in us-east-1, 0 USD/hour" in capsys.readouterr().err


def test_cli_create_on_a_host_pool_without_a_shape_leaves_the_type_to_the_api(
    api: ScriptedApi, capsys: pytest.CaptureFixture[str]
) -> None:
    api.script = [page(LAB), page(KEY), httpx.Response(201, json=CREATED)]
    assert main(["cluster", "create", "-n", "2", "--host-pool", "lab", "--name", "own", "--no-wait"]) == 0
    (body,) = [b for r, b in zip(api.requests, api.bodies, strict=True) if r.url.path == "/v1/clusters"]
    assert isinstance(body, dict) and "instance_type" not in body
    assert (body["host_pool_id"], body["region"], body["orchestrator"]) == ("hpl_1", "us-east-1", "slurm")
    assert "2 x 8xH200 in us-east-1, 0 USD/hour" in capsys.readouterr().err  # the type the API chose


def test_cli_create_without_a_shape_or_a_host_pool_is_refused_before_any_request(
    api: ScriptedApi, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cluster", "create", "-n", "2", "--name", "train"]) == 1
    err = capsys.readouterr().err
    assert "Missing argument 'INSTANCE_TYPE'" in err and "only with --host-pool" in err
    assert api.requests == []


def test_cli_create_on_a_host_pool_by_id_reads_it(api: ScriptedApi) -> None:
    api.script = [httpx.Response(200, json=LAB), page(KEY), httpx.Response(201, json=CREATED)]
    assert main(["cluster", "create", "8xH200", "--host-pool", "hpl_1", "--region", "us-east-1",
                 "--no-wait", "--json"]) == 0
    assert api.requests[0].url.path == "/v1/host-pools/hpl_1"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--spot"], "--host-pool: --spot cannot be used on a host pool"),
        (["--reservation", "q1", "--reserved", "7"], "--reservation, --reserved cannot be used"),
        (["--min-nodes", "1", "--max-nodes", "2"], "--min-nodes/--max-nodes cannot be used"),
        (["--reserved-ip", "edge", "--container", "pytorch"], "--reserved-ip, --container cannot be used"),
        (["--image", "t=nvcr.io/nvidia/pytorch:24.05-py3", "--orchestrator", "slurm"], "--image cannot be"),
        (["--orchestrator", "kubernetes"], "clusters on a host pool run Slurm, not kubernetes"),
    ],
)
def test_cli_create_on_a_host_pool_refuses_what_a_pool_cannot_have_before_any_request(
    api: ScriptedApi, capsys: pytest.CaptureFixture[str], args: list[str], expected: str
) -> None:
    assert main(["cluster", "create", "8xH200", "--host-pool", "lab", *args]) == 1
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1
    assert api.requests == []


def test_cli_create_on_a_host_pool_in_another_region_says_which(
    api: ScriptedApi, capsys: pytest.CaptureFixture[str]
) -> None:
    api.script = [page(LAB)]
    assert main(["cluster", "create", "8xH200", "--host-pool", "lab", "--region", "eu-north-1"]) == 1
    assert "host pool lab (hpl_1) is in region us-east-1, not eu-north-1; drop --region" in (
        capsys.readouterr().err)
    assert [r.url.path for r in api.requests] == ["/v1/host-pools"]


def test_cli_create_on_an_unknown_host_pool_says_where_to_look(
    api: ScriptedApi, capsys: pytest.CaptureFixture[str]
) -> None:
    api.script = [page()]
    assert main(["cluster", "create", "8xH200", "--host-pool", "nope"]) == 1
    assert "no host pool named 'nope'; see `gpucloud host-pool list`" in capsys.readouterr().err


def test_cli_cluster_info_names_the_host_pool_and_no_compute_charge(
    capsys: pytest.CaptureFixture[str],
) -> None:
    show_cluster({**CREATED, "status": "RUNNING", "billing": {"type": "on_demand"}})
    fields = dict(line.split(":", 1) for line in capsys.readouterr().out.splitlines() if ":" in line)
    assert fields["Host pool"].strip() == "hpl_1"
    assert fields["Billing"].strip() == "your own servers (no compute charge)"


def test_cli_host_pool_show_names_the_node_a_cluster_has_on_each_host(
    api: ScriptedApi, capsys: pytest.CaptureFixture[str]
) -> None:
    held = {**READY_HOST, "cluster_id": "cls_1", "node": "own-0"}
    free = {**READY_HOST, "address": "10.0.0.6"}
    api.script = [httpx.Response(200, json={**LAB, "hosts": [held, free], "free_hosts": 1})]
    assert main(["host-pool", "show", "hpl_1"]) == 0
    _, hosts = capsys.readouterr().out.split("\n\n")
    table = rows(hosts)
    assert table[0][-2:] == ["CLUSTER", "NODE"]
    assert table[1][-2:] == ["cls_1", "own-0"] and table[2][-2:] == ["-", "-"]
