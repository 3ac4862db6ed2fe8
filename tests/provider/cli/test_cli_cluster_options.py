"""`cluster create`'s options against a scripted API (httpx.MockTransport): what reaches the API, which
SSH keys a create installs when given none, the refusals as one error line; and the CLI's copies of the
backend's rules (ttl grammar, usage kinds) kept equal to the backend's."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import httpx
import pytest

from backend.api.billing import UsageKindName
from backend.domain.lifetime import TTL_PATTERN as BACKEND_TTL_PATTERN
from provider.cli import app as app_module
from provider.cli import config
from provider.cli.catalog import USAGE_KINDS
from provider.cli.clusters import TTL_PATTERN, budgets_of
from provider.cli.main import main
from tests.provider.client.fakes import ScriptedApi, make_client

KEY = {"id": "ssh_1", "name": "laptop"}
CREATED = {"id": "cls_1", "name": "a", "region": "us-east-1", "status": "PENDING", "node_count": 1,
           "instance_type": "8xH100", "estimated_hourly_cost_usd": 12.768}


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


def create_body(api: ScriptedApi) -> dict[str, Any]:
    (body,) = [b for r, b in zip(api.requests, api.bodies, strict=True) if r.url.path == "/v1/clusters"]
    assert isinstance(body, dict)
    return body


def test_cli_create_sends_each_option_as_the_apis_field(
    api: ScriptedApi, capsys: pytest.CaptureFixture[str]
) -> None:
    api.script = [
        page({"id": "sgr_1", "name": "web"}),                          # --security-group web
        page({"id": "rip_1", "name": "edge", "address": "198.18.0.7"}),  # --reserved-ip 198.18.0.7
        page({"id": "rsv_1", "name": "q1"}),                           # --reservation q1
        page(KEY),                                                     # the project's keys
        httpx.Response(201, json=CREATED),
    ]
    assert main(["cluster", "create", "8xH100", "--region", "us-east-1", "--min-nodes", "2", "--max-nodes",
                 "5", "--spot", "--ttl", "1d12h", "--security-group", "web", "--reserved-ip", "198.18.0.7",
                 "--reservation", "q1", "--max-hourly-cost", "99.50", "--container", "pytorch",
                 "--image", "torch=nvcr.io/nvidia/pytorch:24.05-py3", "--no-wait", "--json"]) == 0
    body = create_body(api)
    assert "node_count" not in body and body["autoscaling"] == {"min_nodes": 2, "max_nodes": 5}
    assert (body["capacity_type"], body["ttl"], body["max_hourly_cost_usd"], body["container"]) == (
        "spot", "1d12h", "99.50", "pytorch")
    assert (body["security_group_ids"], body["reserved_ip_id"], body["reservation_id"]) == (
        ["sgr_1"], "rip_1", "rsv_1")
    assert body["ssh_key_ids"] == ["ssh_1"]
    assert body["container_images"] == {"torch": "nvcr.io/nvidia/pytorch:24.05-py3"}
    assert "registry_credentials" not in body
    assert "Installing the SSH keys of the project: laptop (ssh_1)" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["-n", "2", "--min-nodes", "1", "--max-nodes", "3"], "the autoscaler sets the node count; drop -n"),
        (["--min-nodes", "2"], "needs both --min-nodes and --max-nodes"),
        (["--min-nodes", "4", "--max-nodes", "3"], "4 is above --max-nodes 3"),
        (["--ttl", "8 hours"], "is not a duration such as \"8h\""),
        (["--ttl", "30s"], "between 1 minute and 365 days"),
        (["--max-hourly-cost", "-1"], "not a positive amount in USD"),
        (["--image", "App=registry.io/x:1"], "is not an image name"),
        (["--image", "app=Registry.io/X:1"], 'write "Registry.io/x:1"'),
        (["--image", "app"], "is not NAME=REF"),
        (["--image", "container=pytorch"], "the single-node container is --container pytorch"),
        (["--registry-login", "registry.io/team=ci"], "write host[:port] only"),
        (["--image", "a=ubuntu:22.04"], "add --orchestrator slurm"),
    ],
)
def test_cli_create_refuses_contradictory_options_before_any_request(
    api: ScriptedApi, capsys: pytest.CaptureFixture[str], args: list[str], expected: str
) -> None:
    assert main(["cluster", "create", "8xH100", "--region", "us-east-1", *args]) == 1
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1
    assert api.requests == []


def test_cli_create_names_a_missing_or_ambiguous_reference(
    api: ScriptedApi, capsys: pytest.CaptureFixture[str]
) -> None:
    api.script = [page()]
    assert main(["cluster", "create", "8xH100", "--region", "us-east-1", "--reservation", "q9"]) == 1
    assert "no reservation named 'q9'; see `gpucloud reservation list`" in capsys.readouterr().err
    api.script = [page({"id": "sgr_1", "name": "web"}, {"id": "sgr_2", "name": "web"})]
    assert main(["cluster", "create", "8xH100", "--region", "us-east-1", "--security-group", "web"]) == 1
    assert "2 security groups are named 'web' (sgr_1, sgr_2): use the id" in capsys.readouterr().err


def test_cli_create_without_any_ssh_key_says_how_to_add_one(
    api: ScriptedApi, capsys: pytest.CaptureFixture[str]
) -> None:
    api.script = [page()]
    assert main(["cluster", "create", "8xH100", "--region", "us-east-1"]) == 1
    err = capsys.readouterr().err
    assert "no SSH key to install" in err and "-i ~/.ssh/id_ed25519.pub" in err and "ssh-key add" in err
    assert [r.method for r in api.requests] == ["GET"]  # nothing created


def test_cli_saved_login_keys_are_used_only_with_the_saved_api_key(
    api: ScriptedApi, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config.write_config("http://127.0.0.1:8080", "gpc_test", ssh_key_ids=["ssh_2"])
    assert config.read_ssh_key_ids() == ["ssh_2"]
    api.script = [page(KEY, {"id": "ssh_2", "name": "work"}), httpx.Response(201, json=CREATED)]
    assert main(["cluster", "create", "8xH100", "--region", "us-east-1", "--no-wait", "--json"]) == 0
    assert create_body(api)["ssh_key_ids"] == ["ssh_2"]
    assert "saved by `gpucloud login`: work (ssh_2)" in capsys.readouterr().err

    monkeypatch.setenv("GPUCLOUD_API_KEY", "gpc_another_project")
    assert config.default_ssh_key_ids() == []
    monkeypatch.setenv("GPUCLOUD_API_KEY", "gpc_test")
    api.requests, api.script = [], [page(KEY)]  # ssh_2 was deleted since
    assert main(["cluster", "create", "8xH100", "--region", "us-east-1"]) == 1
    assert "the SSH key ssh_2 saved by `gpucloud login` is gone" in capsys.readouterr().err


def test_cli_budgets_of_a_cluster_are_the_projects_and_its_labels() -> None:
    budgets: list[dict[str, Any]] = [
        {"name": "all", "label_filter": None},
        {"name": "nlp", "label_filter": {"key": "team", "value": "nlp"}},
        {"name": "cv", "label_filter": {"key": "team", "value": "cv"}},
    ]
    applying = budgets_of({"labels": {"team": "nlp", "env": "dev"}}, budgets)
    assert [b["name"] for b in applying] == ["all", "nlp"]


def test_cli_copies_of_backend_rules_match_the_backend() -> None:
    assert TTL_PATTERN == BACKEND_TTL_PATTERN
    assert list(typing.get_args(UsageKindName)) == USAGE_KINDS
