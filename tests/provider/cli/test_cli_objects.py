"""`security-group`, `reserved-ip`, `reservation`, `budget` and `quota` against a scripted API
(httpx.MockTransport): what each command sends, how it renders, `--json`, and the API's refusals as one
error line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from provider.cli import app as app_module
from provider.cli.main import main
from tests.provider.client.fakes import ScriptedApi, make_client, problem

SG = {
    "id": "sgr_1", "name": "lab", "description": "office", "is_default": False, "cluster_ids": ["cls_1"],
    "ingress": [
        {"protocol": "tcp", "from_port": 22, "to_port": None, "cidr_blocks": ["203.0.113.0/24"],
         "description": "ssh"},
        {"protocol": "tcp", "from_port": 8888, "to_port": 8890, "cidr_blocks": ["10.8.0.0/16", "::/0"],
         "description": None},
    ],
    "egress": [{"protocol": "all", "from_port": None, "to_port": None, "cidr_blocks": ["0.0.0.0/0"],
                "description": None}],
    "created_at": "2026-12-01T00:00:00Z", "updated_at": "2026-12-01T00:00:00Z",
}
IP = {
    "id": "rip_1", "name": "edge", "region": "us-east-1", "labels": {"team": "nlp"}, "address": "198.18.0.7",
    "cluster_id": None, "status": "reserved", "hourly_cost_usd": 0.005,
    "created_at": "2026-12-01T00:00:00Z", "updated_at": "2026-12-01T00:00:00Z",
}
CLUSTER = {"id": "cls_1", "name": "train", "status": "RUNNING"}
RSV = {
    "id": "rsv_1", "name": "q1", "region": "us-east-1", "instance_type": "8xH100", "node_count": 4,
    "duration_days": 30, "labels": {}, "starts_at": "2026-12-01T00:00:00Z", "ends_at": "2026-12-31T00:00:00Z",
    "fabric": "ib-east-a", "status": "active", "free_nodes": 1, "cluster_ids": ["cls_1"],
    "gpu_hour_usd": "1.80", "discount": "0.4", "upfront_usd": "41472.00", "charged_at": None,
    "created_at": "2026-12-01T00:00:00Z",
}
BUDGET = {
    "id": "bud_1", "name": "nlp", "amount_usd": "5000.000000",  # the API's micro-dollars
    "label_filter": {"key": "team", "value": "nlp"},
    "thresholds": [50, 80, 100], "action": "block_new", "period": "2026-12", "spent_usd": "2600.500000",
    "alerts": [{"period": "2026-12", "threshold_percent": 50, "spent_usd": "2510.123456",
                "raised_at": "2026-12-02T10:00:00Z"}],
    "created_at": "2026-12-01T00:00:00Z", "updated_at": "2026-12-01T00:00:00Z",
}
QUOTAS = {"max_clusters": 10, "clusters_in_use": 2, "max_gpus": None, "gpus_in_use": 32,
          "max_hourly_usd": "500.00", "hourly_usd_in_use": "123.45", "updated_at": None}


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ScriptedApi:
    scripted = ScriptedApi()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("GPUCLOUD_API_KEY", "gpc_test")
    monkeypatch.setattr(app_module, "GpuCloudClient", lambda *args, **kwargs: make_client(scripted))
    return scripted


def ok(body: Any, status: int = 200) -> httpx.Response:
    return httpx.Response(status, json=body)


def page(*items: Any) -> httpx.Response:
    return ok({"items": list(items), "next_page_token": None})


def sent(api: ScriptedApi) -> list[tuple[str, str]]:
    return [(r.method, r.url.path) for r in api.requests]


def rows(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines()]


# ---- security groups --------------------------------------------------------------------------------


def test_cli_security_group_create_parses_rules_and_shows_the_rules_table(
    api: ScriptedApi, capsys: pytest.CaptureFixture[str]
) -> None:
    api.script.append(ok(SG, 201))
    assert main(["security-group", "create", "lab", "--description", "office",
                 "--ingress", "tcp:22:203.0.113.0/24", "--ingress", "TCP:8888-8890:10.8.0.0/16,::/0",
                 "--egress", "all::0.0.0.0/0"]) == 0
    request = api.requests[0]
    assert (request.method, request.url.path) == ("POST", "/v1/security-groups")
    assert request.headers["Idempotency-Key"]
    assert api.bodies[0] == {
        "name": "lab", "description": "office",
        "ingress": [{"protocol": "tcp", "from_port": 22, "cidr_blocks": ["203.0.113.0/24"]},
                    {"protocol": "tcp", "from_port": 8888, "to_port": 8890,
                     "cidr_blocks": ["10.8.0.0/16", "::/0"]}],
        "egress": [{"protocol": "all", "cidr_blocks": ["0.0.0.0/0"]}],
    }
    out = capsys.readouterr().out
    assert "Clusters:     cls_1" in out
    table = rows(out.split("\n\n")[1])
    assert table[0] == ["DIRECTION", "PROTOCOL", "PORTS", "CIDRS", "DESCRIPTION"]
    assert table[1:] == [["ingress", "tcp", "22", "203.0.113.0/24", "ssh"],
                         ["ingress", "tcp", "8888-8890", "10.8.0.0/16,::/0", "-"],
                         ["egress", "all", "all", "0.0.0.0/0", "-"]]


def test_cli_security_group_rules_file_and_bad_rules(
    api: ScriptedApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = {"ingress": [{"protocol": "udp", "from_port": 53, "cidr_blocks": ["10.0.0.0/8"],
                          "description": "dns"}]}
    path = tmp_path / "rules.json"
    path.write_text(json.dumps(rules))
    api.script.append(ok(SG, 201))
    assert main(["security-group", "create", "dns", "--rules-file", str(path), "--json"]) == 0
    assert api.bodies[0] == {"name": "dns", **rules}
    assert json.loads(capsys.readouterr().out) == SG

    assert main(["security-group", "create", "x", "--ingress", "tcp:22"]) == 1
    assert "is not PROTO:PORTS:CIDRS" in capsys.readouterr().err
    assert main(["security-group", "create", "x", "--ingress", "tcp:ssh:0.0.0.0/0"]) == 1
    assert "'ssh' in 'tcp:ssh:0.0.0.0/0' is not PORT or FIRST-LAST" in capsys.readouterr().err
    both = ["--rules-file", str(path), "--ingress", "all::0.0.0.0/0"]
    assert main(["security-group", "create", "x", *both]) == 1
    assert "--ingress and the ingress list of --rules-file: give one" in capsys.readouterr().err
    assert len(api.requests) == 1  # nothing sent for the refused ones


def test_cli_security_group_list_show_update_delete(
    api: ScriptedApi, capsys: pytest.CaptureFixture[str]
) -> None:
    api.script += [page(SG)]
    assert main(["security-group", "list"]) == 0
    assert rows(capsys.readouterr().out) == [
        ["ID", "NAME", "DEFAULT", "INGRESS", "EGRESS", "CLUSTERS", "DESCRIPTION"],
        ["sgr_1", "lab", "no", "2", "1", "cls_1", "office"],
    ]

    api.script += [page(SG)]
    assert main(["security-group", "show", "lab", "--json"]) == 0
    assert dict(api.requests[-1].url.params) == {"name": "lab", "page_size": "100"}
    assert json.loads(capsys.readouterr().out) == SG

    api.script += [ok(SG), ok({**SG, "ingress": []})]
    assert main(["security-group", "update", "sgr_1", "--ingress", "icmp::10.0.0.0/8", "--name", "lab2"]) == 0
    assert sent(api)[-2:] == [("GET", "/v1/security-groups/sgr_1"), ("PATCH", "/v1/security-groups/sgr_1")]
    icmp = {"protocol": "icmp", "cidr_blocks": ["10.0.0.0/8"]}
    assert api.bodies[-1] == {"ingress": [icmp], "name": "lab2"}
    capsys.readouterr()
    assert main(["security-group", "update", "lab"]) == 1
    assert "nothing to change" in capsys.readouterr().err

    api.script += [ok(SG), httpx.Response(204)]
    assert main(["security-group", "delete", "sgr_1", "--yes"]) == 0
    assert sent(api)[-1] == ("DELETE", "/v1/security-groups/sgr_1")
    assert capsys.readouterr().err == "Deleted security group sgr_1 (lab).\n"


def test_cli_security_group_in_use_is_the_apis_one_error_line(
    api: ScriptedApi, capsys: pytest.CaptureFixture[str]
) -> None:
    api.script += [ok(SG), problem(409, "security_group_in_use", "used by cls_1", cluster_ids=["cls_1"])]
    assert main(["security-group", "delete", "sgr_1", "--yes", "--json"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "error: used by cls_1 (security_group_in_use, HTTP 409); request id req-1\n"


# ---- reserved IPs -----------------------------------------------------------------------------------


def test_cli_reserved_ip_create_list_show_update_delete(
    api: ScriptedApi, capsys: pytest.CaptureFixture[str]
) -> None:
    api.script += [ok(IP, 201)]
    assert main(["reserved-ip", "create", "--region", "us-east-1", "--name", "edge",
                 "--label", "team=nlp"]) == 0
    assert api.bodies[-1] == {"region": "us-east-1", "labels": {"team": "nlp"}, "name": "edge"}
    out = capsys.readouterr().out
    assert "Address:   198.18.0.7" in out and "Labels:    team=nlp" in out

    api.script += [page(IP)]
    assert main(["reserved-ip", "list"]) == 0
    assert rows(capsys.readouterr().out) == [
        ["ID", "NAME", "ADDRESS", "STATUS", "REGION", "CLUSTER", "USD/HOUR"],
        ["rip_1", "edge", "198.18.0.7", "reserved", "us-east-1", "-", "0.005"],
    ]

    api.script += [page(IP)]  # by address: the whole list, matched here
    assert main(["reserved-ip", "show", "198.18.0.7", "--json"]) == 0
    assert "name" not in api.requests[-1].url.params
    assert json.loads(capsys.readouterr().out) == IP

    api.script += [page(IP), ok({**IP, "name": "edge-1"})]
    assert main(["reserved-ip", "update", "edge", "--name", "edge-1", "--json"]) == 0
    assert sent(api)[-1] == ("PATCH", "/v1/reserved-ips/rip_1") and api.bodies[-1] == {"name": "edge-1"}
    assert json.loads(capsys.readouterr().out)["name"] == "edge-1"

    api.script += [ok(IP), httpx.Response(204)]
    assert main(["reserved-ip", "delete", "rip_1", "--yes", "--json"]) == 0
    assert sent(api)[-1] == ("DELETE", "/v1/reserved-ips/rip_1")
    assert json.loads(capsys.readouterr().out) == IP


def test_cli_reserved_ip_attach_and_detach_patch_the_cluster(
    api: ScriptedApi, capsys: pytest.CaptureFixture[str]
) -> None:
    attached = {**IP, "cluster_id": "cls_1", "status": "attached"}
    api.script += [page(IP), page(CLUSTER), ok(CLUSTER), ok(attached)]
    assert main(["reserved-ip", "attach", "edge", "train"]) == 0
    assert sent(api)[-2:] == [("PATCH", "/v1/clusters/cls_1"), ("GET", "/v1/reserved-ips/rip_1")]
    assert api.bodies[-2] == {"reserved_ip_id": "rip_1"}
    assert capsys.readouterr().err == "Attached 198.18.0.7 to train (cls_1).\n"

    api.script += [ok(attached), ok(CLUSTER), ok(IP)]
    assert main(["reserved-ip", "detach", "rip_1", "--json"]) == 0
    assert sent(api)[-2] == ("PATCH", "/v1/clusters/cls_1") and api.bodies[-2] == {"reserved_ip_id": None}
    assert json.loads(capsys.readouterr().out)["status"] == "reserved"

    api.script += [ok(IP)]
    assert main(["reserved-ip", "detach", "rip_1"]) == 1
    assert "is not attached to a cluster" in capsys.readouterr().err


def test_cli_reserved_ip_release_while_attached_is_one_error_line(
    api: ScriptedApi, capsys: pytest.CaptureFixture[str]
) -> None:
    api.script += [ok(IP), problem(409, "reserved_ip_attached", "held by cls_1", cluster_id="cls_1")]
    assert main(["reserved-ip", "delete", "rip_1", "--yes"]) == 1
    assert capsys.readouterr().err == (
        "error: held by cls_1 (reserved_ip_attached, HTTP 409); request id req-1\n"
    )


# ---- reservations -----------------------------------------------------------------------------------


def test_cli_reservation_create_sends_the_term_and_show_says_drawn_vs_reserved(
    api: ScriptedApi, capsys: pytest.CaptureFixture[str]
) -> None:
    api.script += [ok(RSV, 201)]
    assert main(["reservation", "create", "q1", "8xH100", "-n", "4", "--region", "us-east-1", "--days", "30",
                 "--start", "2026-12-01T00:00:00Z", "--label", "team=nlp"]) == 0
    assert sent(api) == [("POST", "/v1/reservations")]
    assert api.bodies[0] == {"name": "q1", "region": "us-east-1", "instance_type": "8xH100", "node_count": 4,
                             "duration_days": 30, "labels": {"team": "nlp"},
                             "starts_at": "2026-12-01T00:00:00Z"}
    out = capsys.readouterr().out
    assert "Nodes:          3 drawn / 4 reserved (1 free)" in out and "Term:           30 days" in out

    api.script += [page(RSV, {**RSV, "id": "rsv_2", "name": "old", "status": "ended", "free_nodes": 0})]
    assert main(["reservation", "list"]) == 0
    table = rows(capsys.readouterr().out)
    assert table[0][:6] == ["ID", "NAME", "STATUS", "TYPE", "DRAWN/NODES", "REGION"]
    assert [r[4] for r in table[1:]] == ["3/4", "0/4"]

    api.script += [page(RSV)]
    assert main(["reservation", "show", "q1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == RSV


def test_cli_reservation_update_delete_and_in_use(
    api: ScriptedApi, capsys: pytest.CaptureFixture[str]
) -> None:
    api.script += [ok(RSV), ok({**RSV, "labels": {"team": "cv"}})]
    assert main(["reservation", "update", "rsv_1", "--label", "team=cv", "--json"]) == 0
    assert sent(api)[-1] == ("PATCH", "/v1/reservations/rsv_1")
    assert api.bodies[-1] == {"labels": {"team": "cv"}}
    assert json.loads(capsys.readouterr().out)["labels"] == {"team": "cv"}

    in_use = problem(409, "reservation_in_use", "clusters draw from it", field="reservation_id")
    api.script += [ok(RSV), in_use]
    assert main(["reservation", "delete", "rsv_1", "--yes"]) == 1
    assert capsys.readouterr().err == (
        "error: clusters draw from it (reservation_in_use, HTTP 409); field reservation_id; "
        "request id req-1\n"
    )

    api.script += [ok(RSV), httpx.Response(204)]
    assert main(["reservation", "delete", "rsv_1", "--yes"]) == 0
    assert sent(api)[-1] == ("DELETE", "/v1/reservations/rsv_1")
    assert capsys.readouterr().err == "Deleted reservation rsv_1 (q1).\n"


# ---- budgets ----------------------------------------------------------------------------------------


def test_cli_budget_create_and_show_spend_against_amount_with_alerts(
    api: ScriptedApi, capsys: pytest.CaptureFixture[str]
) -> None:
    api.script += [ok(BUDGET, 201)]
    assert main(["budget", "create", "nlp", "--amount", "5000.00", "--label-filter", "team=nlp",
                 "--threshold", "50", "--threshold", "100", "--action", "block_new"]) == 0
    assert sent(api) == [("POST", "/v1/budgets")]
    assert api.bodies[0] == {"name": "nlp", "amount_usd": "5000.00",
                             "label_filter": {"key": "team", "value": "nlp"},
                             "thresholds": [50, 100], "action": "block_new"}
    fields, alerts = capsys.readouterr().out.split("\n\n")
    assert "Spent:       2600.50 of 5000.00 USD (52%)" in fields and "Applies to:  team=nlp" in fields
    assert rows(alerts) == [["PERIOD", "THRESHOLD", "SPENT", "USD", "RAISED", "AT"],
                            ["2026-12", "50%", "2510.123456", "2026-12-02T10:00:00Z"]]

    api.script += [page(BUDGET, {**BUDGET, "id": "bud_2", "name": "all", "label_filter": None})]
    assert main(["budget", "list"]) == 0
    table = rows(capsys.readouterr().out)
    assert table[1] == ["bud_1", "nlp", "team=nlp", "2026-12", "2600.50", "5000.00", "52%", "block_new"]
    assert table[2][2] == "project"

    api.script += [page(BUDGET)]
    assert main(["budget", "show", "nlp", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == BUDGET


def test_cli_budget_update_and_delete(api: ScriptedApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.script += [ok(BUDGET), ok({**BUDGET, "label_filter": None})]
    assert main(["budget", "update", "bud_1", "--amount", "8000", "--project-wide", "--json"]) == 0
    assert sent(api)[-1] == ("PATCH", "/v1/budgets/bud_1")
    assert api.bodies[-1] == {"amount_usd": "8000", "label_filter": None}
    assert json.loads(capsys.readouterr().out)["label_filter"] is None
    assert main(["budget", "update", "bud_1", "--project-wide", "--label-filter", "a=b"]) == 1
    assert "give one" in capsys.readouterr().err

    api.script += [page(BUDGET), httpx.Response(204)]
    assert main(["budget", "delete", "nlp", "--yes", "--json"]) == 0
    assert sent(api)[-1] == ("DELETE", "/v1/budgets/bud_1")
    assert json.loads(capsys.readouterr().out) == BUDGET


def test_cli_budget_out_of_scope_and_role_are_the_apis_one_error_line(
    api: ScriptedApi, capsys: pytest.CaptureFixture[str]
) -> None:
    api.script += [problem(403, "out_of_scope", "this key may only filter on team=nlp", field="label_filter")]
    assert main(["budget", "create", "cv", "--amount", "10", "--label-filter", "team=cv"]) == 1
    assert capsys.readouterr().err == (
        "error: this key may only filter on team=nlp (out_of_scope, HTTP 403); field label_filter; "
        "request id req-1\n"
    )
    api.script += [problem(403, "forbidden_role", "a viewer key cannot create budgets")]
    assert main(["budget", "create", "cv", "--amount", "10", "--json"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("error: a viewer key cannot create budgets (forbidden_role, HTTP 403)")


def test_cli_unknown_name_names_the_listing(api: ScriptedApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.script += [page(BUDGET)]
    assert main(["budget", "show", "nope"]) == 1
    assert capsys.readouterr().err == "error: no budget named 'nope'; see `gpucloud budget list`\n"


# ---- quotas -----------------------------------------------------------------------------------------


def test_cli_quota_list_and_show(api: ScriptedApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.script += [ok(QUOTAS)]
    assert main(["quota", "list"]) == 0
    assert sent(api) == [("GET", "/v1/quotas")]
    assert rows(capsys.readouterr().out) == [
        ["QUOTA", "IN", "USE", "LIMIT"], ["Clusters", "2", "10"], ["GPUs", "32", "no", "limit"],
        ["USD/hour", "123.45", "500.00"],
    ]
    api.script += [ok(QUOTAS)]
    assert main(["quota", "show"]) == 0
    out = capsys.readouterr().out
    assert "GPUs:      32 in use / no limit" in out and "Updated:   never" in out
    api.script += [ok(QUOTAS)]
    assert main(["quota", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == QUOTAS


# ---- verbs ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("verb", ["delete", "rm"])
def test_cli_ssh_key_delete_and_its_hidden_rm_alias(
    verb: str, api: ScriptedApi, capsys: pytest.CaptureFixture[str]
) -> None:
    key = {"id": "ssh_1", "name": "laptop"}
    api.script += [ok({"items": [key]}), httpx.Response(204)]
    assert main(["ssh-key", verb, "laptop"]) == 0
    assert sent(api)[-1] == ("DELETE", "/v1/ssh-keys/ssh_1")
    assert capsys.readouterr().err == "Deleted SSH key ssh_1 (laptop).\n"
    assert main(["ssh-key", "--help"]) == 0
    assert " rm " not in capsys.readouterr().out
