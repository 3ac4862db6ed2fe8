"""`gpucloud host-pool` against a scripted API (httpx.MockTransport): what each command sends (the private
key read from its file, hosts as ADDR[:PORT], the whole hosts list under If-Match), how pools and hosts
render, `--json`, `probe --wait`, and the API's refusals as one error line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from provider.cli import app as app_module
from provider.cli import host_pools as host_pools_cli
from provider.cli.main import main
from tests.provider.client.fakes import FakeClock, ScriptedApi, make_client, problem

PRIVATE_KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "-----END OPENSSH PRIVATE KEY-----\n"
)
PUBLIC_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOv5e1Fq gpucloud-host-pool"
INVENTORY = {
    "hostname": "gpu-a", "os": "Debian GNU/Linux 12 (bookworm)", "kernel": "6.1.0-18-amd64",
    "arch": "x86_64", "cpu_count": 128, "memory_mib": 2063000, "gpu_count": 8, "gpu_model": "NVIDIA H200",
    "gpus": [{"index": 0, "name": "NVIDIA H200", "uuid": "GPU-1", "memory_total_mib": 143771}],
    "interconnect": "infiniband", "interconnect_devices": ["mlx5_0"], "init": "systemd",
    "packages": {"slurmd": True, "slurmctld": True, "munge": True, "python3": True, "slurmdbd": True,
                 "mariadbd": True},
    "mariadb_in_use": False, "accounting": True, "clock_skew_seconds": 0.4,
}
READY_HOST = {
    "address": "10.0.0.5", "port": 22, "status": "ready", "reason_code": None, "reason": None,
    "host_key": "ssh-ed25519 AAAAhostA", "checked_at": "2026-12-03T18:00:00Z", "cluster_id": None,
    "inventory": INVENTORY,
}
REFUSED_HOST = {
    "address": "gpu-b.lab", "port": 2222, "status": "unreachable", "reason_code": "auth_refused",
    "reason": "gpu-b.lab refused the pool's key for root: append the pool's public key to "
              "/root/.ssh/authorized_keys",
    "host_key": "ssh-ed25519 AAAAhostB", "checked_at": "2026-12-03T18:00:00Z", "cluster_id": None,
    "inventory": None,
}
POOL = {
    "id": "hpl_1", "name": "lab", "region": "on-prem-berlin", "ssh_user": "root", "ssh_port": 22,
    "proxy_jump": None, "labels": {"team": "nlp"}, "shared_storage_path": "/mnt/shared",
    "install_packages": False, "ssh_public_key": PUBLIC_KEY, "ssh_key_fingerprint": "SHA256:abc",
    "status": "ready", "ready_hosts": 1, "free_hosts": 1, "hosts": [READY_HOST, REFUSED_HOST],
    "created_at": "2026-12-03T17:59:00Z", "updated_at": "2026-12-03T18:00:00Z",
}


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ScriptedApi:
    scripted = ScriptedApi()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("GPUCLOUD_API_KEY", "gpc_test")
    monkeypatch.setattr(app_module, "GpuCloudClient", lambda *args, **kwargs: make_client(scripted))
    return scripted


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "pool_key"
    path.write_text(PRIVATE_KEY)
    return path


def ok(body: Any, status: int = 200, etag: str | None = None) -> httpx.Response:
    return httpx.Response(status, json=body, headers={"ETag": etag} if etag else {})


def page(*items: Any) -> httpx.Response:
    return ok({"items": list(items), "next_page_token": None})


def sent(api: ScriptedApi) -> list[tuple[str, str]]:
    return [(r.method, r.url.path) for r in api.requests]


def rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines()]


def pending(pool: dict[str, Any], *hosts: dict[str, Any]) -> dict[str, Any]:
    checking = [{**h, "status": "pending", "reason_code": None, "reason": None} for h in hosts]
    return {**pool, "status": "probing", "ready_hosts": 0, "free_hosts": 0, "hosts": checking}


# ---- create -------------------------------------------------------------------------------------------


def test_cli_host_pool_create_sends_the_key_from_its_file_and_prints_the_public_key_only(
    api: ScriptedApi, key_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    created = pending(POOL, READY_HOST, REFUSED_HOST)
    api.script.append(ok(created, 201))
    assert main(["host-pool", "create", "lab", "--region", "on-prem-berlin", "--key-file", str(key_file),
                 "--host", "10.0.0.5", "--host", "gpu-b.lab:2222", "--host", "[fd00::7]:2200",
                 "--host", "fd00::8", "--ssh-user", "ubuntu", "--ssh-port", "22", "--label", "team=nlp",
                 "--proxy-jump", "jump@bastion.lab:2200", "--shared-storage-path", "/mnt/shared",
                 "--install-packages"]) == 0
    assert sent(api) == [("POST", "/v1/host-pools")]
    assert api.requests[0].headers["Idempotency-Key"]
    assert api.bodies[0] == {
        "name": "lab", "region": "on-prem-berlin", "ssh_private_key": PRIVATE_KEY,
        "hosts": [{"address": "10.0.0.5", "port": None, "host_key": None},
                  {"address": "gpu-b.lab", "port": 2222, "host_key": None},
                  {"address": "fd00::7", "port": 2200, "host_key": None},
                  {"address": "fd00::8", "port": None, "host_key": None}],
        "labels": {"team": "nlp"}, "install_packages": True, "ssh_user": "ubuntu", "ssh_port": 22,
        "proxy_jump": "jump@bastion.lab:2200", "shared_storage_path": "/mnt/shared",
    }
    captured = capsys.readouterr()
    assert "PRIVATE KEY" not in captured.out + captured.err
    assert "Status:            probing" in captured.out
    assert "append the pool's public key to ~root/.ssh/authorized_keys:" in captured.err
    assert f"  {PUBLIC_KEY}\n" in captured.err
    assert "gpucloud host-pool probe lab --wait" in captured.err


def test_cli_host_pool_create_defaults_and_json(
    api: ScriptedApi, key_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api.script.append(ok(POOL, 201))
    assert main(["host-pool", "create", "lab", "--region", "r1", "--key-file", str(key_file),
                 "--host", "10.0.0.5", "--json"]) == 0
    assert api.bodies[0] == {"name": "lab", "region": "r1", "ssh_private_key": PRIVATE_KEY,
                             "hosts": [{"address": "10.0.0.5", "port": None, "host_key": None}],
                             "labels": {}, "install_packages": False}
    captured = capsys.readouterr()
    assert json.loads(captured.out) == POOL and captured.err == ""


def test_cli_host_pool_create_refuses_a_public_key_and_bad_hosts_before_sending(
    api: ScriptedApi, key_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    public = tmp_path / "pool_key.pub"
    public.write_text(PUBLIC_KEY + "\n")
    base = ["host-pool", "create", "lab", "--region", "r1"]
    assert main([*base, "--key-file", str(public), "--host", "10.0.0.5"]) == 1
    err = capsys.readouterr().err
    assert "--key-file" in err and "looks like a public key: give the file without .pub" in err
    assert main([*base, "--key-file", str(key_file), "--host", "10.0.0.5:ssh"]) == 1
    assert "port 'ssh' in '10.0.0.5:ssh' is not 1..65535" in capsys.readouterr().err
    assert main([*base, "--key-file", str(key_file), "--host", ":22"]) == 1
    assert "':22' names no host" in capsys.readouterr().err
    assert main([*base, "--key-file", str(key_file)]) == 1
    assert "--host" in capsys.readouterr().err
    assert api.requests == []


def test_cli_host_pool_create_refusal_is_the_apis_one_error_line(
    api: ScriptedApi, key_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api.script.append(problem(422, "validation_error", "the key is encrypted: give an unencrypted key",
                              field="ssh_private_key"))
    assert main(["host-pool", "create", "lab", "--region", "r1", "--key-file", str(key_file),
                 "--host", "10.0.0.5"]) == 1
    assert capsys.readouterr().err == (
        "error: the key is encrypted: give an unencrypted key (validation_error, HTTP 422); "
        "field ssh_private_key; request id req-1\n"
    )


# ---- list and show ------------------------------------------------------------------------------------


def test_cli_host_pool_list_and_show_render_hosts_with_inventory_and_reasons(
    api: ScriptedApi, capsys: pytest.CaptureFixture[str]
) -> None:
    api.script.append(page(POOL))
    assert main(["host-pool", "list"]) == 0
    assert rows(capsys.readouterr().out) == [
        ["ID", "NAME", "REGION", "STATUS", "READY/HOSTS", "FREE", "USER", "LABELS"],
        ["hpl_1", "lab", "on-prem-berlin", "ready", "1/2", "1", "root", "team=nlp"],
    ]

    api.script.append(page(POOL))
    assert main(["host-pool", "show", "lab"]) == 0
    assert dict(api.requests[-1].url.params) == {"name": "lab", "page_size": "100"}
    out = capsys.readouterr().out
    fields, hosts, reasons = out.split("\n\n")
    assert "Hosts:             1/2 ready, 1 free" in fields
    assert f"Public key:        {PUBLIC_KEY}" in fields
    assert "PRIVATE" not in out
    assert rows(hosts) == [
        ["ADDRESS", "PORT", "STATUS", "REASON", "GPUS", "CPUS", "MEMORY", "INTERCONNECT", "ACCOUNTING",
         "INIT", "CLUSTER", "NODE"],
        ["10.0.0.5", "22", "ready", "-", "8xNVIDIA-H200", "128", "2015GiB", "infiniband", "yes", "systemd",
         "-", "-"],
        ["gpu-b.lab", "2222", "unreachable", "auth_refused", "-", "-", "-", "-", "-", "-", "-", "-"],
    ]
    assert reasons == f"gpu-b.lab:2222: {REFUSED_HOST['reason']}\n"

    api.script.append(ok(POOL))
    assert main(["host-pool", "show", "hpl_1", "--json"]) == 0
    assert sent(api)[-1] == ("GET", "/v1/host-pools/hpl_1")
    assert json.loads(capsys.readouterr().out) == POOL


def test_cli_host_pool_names_that_match_none_or_several_say_what_to_do(
    api: ScriptedApi, capsys: pytest.CaptureFixture[str]
) -> None:
    api.script.append(page())
    assert main(["host-pool", "show", "nope"]) == 1
    assert "no host pool named 'nope'; see `gpucloud host-pool list`" in capsys.readouterr().err
    api.script.append(page(POOL, {**POOL, "id": "hpl_2"}))
    assert main(["host-pool", "delete", "lab", "--yes"]) == 1
    assert "2 host pools are named 'lab' (hpl_1, hpl_2): use the id" in capsys.readouterr().err
    api.script.append(page())
    assert main(["host-pool", "list"]) == 0
    assert capsys.readouterr().err == "No host pools: gpucloud host-pool create --help\n"


# ---- hosts: add and remove ------------------------------------------------------------------------------


def test_cli_host_pool_add_host_patches_the_whole_list_under_if_match(
    api: ScriptedApi, capsys: pytest.CaptureFixture[str]
) -> None:
    grown = {**POOL, "hosts": [*POOL["hosts"], {**READY_HOST, "address": "10.0.0.7", "status": "pending"}]}
    api.script += [page(POOL), ok(POOL, etag='"v3"'), ok(grown)]
    assert main(["host-pool", "add-host", "lab", "10.0.0.7", "--host-key", "ssh-ed25519 AAAApin"]) == 0
    assert sent(api) == [("GET", "/v1/host-pools"), ("GET", "/v1/host-pools/hpl_1"),
                         ("PATCH", "/v1/host-pools/hpl_1")]
    assert api.requests[-1].headers["If-Match"] == '"v3"'
    assert api.bodies[-1] == {"hosts": [
        # the host on the pool's port follows the pool's default; each recorded key stays required
        {"address": "10.0.0.5", "port": None, "host_key": "ssh-ed25519 AAAAhostA"},
        {"address": "gpu-b.lab", "port": 2222, "host_key": "ssh-ed25519 AAAAhostB"},
        {"address": "10.0.0.7", "port": None, "host_key": "ssh-ed25519 AAAApin"},
    ]}
    assert capsys.readouterr().err == (
        "Added 10.0.0.7:22 to lab (hpl_1); see `gpucloud host-pool show lab`.\n"
    )

    api.script += [ok(POOL, etag='"v3"')]
    assert main(["host-pool", "add-host", "hpl_1", "GPU-B.lab:2222"]) == 1
    assert "host pool lab already has GPU-B.lab:2222" in capsys.readouterr().err
    assert sent(api)[-1] == ("GET", "/v1/host-pools/hpl_1")  # nothing patched


def test_cli_host_pool_remove_host_by_address_or_address_and_port(
    api: ScriptedApi, capsys: pytest.CaptureFixture[str]
) -> None:
    shrunk = {**POOL, "hosts": [READY_HOST]}
    api.script += [ok(POOL, etag='"v4"'), ok(shrunk)]
    assert main(["host-pool", "remove-host", "hpl_1", "gpu-b.lab", "--json"]) == 0
    assert api.requests[-1].headers["If-Match"] == '"v4"'
    assert api.bodies[-1] == {"hosts": [{"address": "10.0.0.5", "port": None,
                                         "host_key": "ssh-ed25519 AAAAhostA"}]}
    assert json.loads(capsys.readouterr().out) == shrunk

    api.script += [ok(POOL, etag='"v4"')]
    assert main(["host-pool", "remove-host", "hpl_1", "gpu-b.lab:22"]) == 1
    assert capsys.readouterr().err == (
        "error: host pool lab has no host gpu-b.lab:22 (its hosts: 10.0.0.5:22, gpu-b.lab:2222)"
        " (see `gpucloud host-pool remove-host --help`)\n"
    )

    two_ports = {**POOL, "hosts": [READY_HOST, {**READY_HOST, "port": 2222}]}
    api.script += [ok(two_ports)]
    assert main(["host-pool", "remove-host", "hpl_1", "10.0.0.5"]) == 1
    assert "10.0.0.5 is in lab on several ports (10.0.0.5:22, 10.0.0.5:2222): give ADDR:PORT" in (
        capsys.readouterr().err
    )

    api.script += [ok(shrunk)]
    assert main(["host-pool", "remove-host", "hpl_1", "10.0.0.5:22"]) == 1
    assert capsys.readouterr().err == (
        "error: 10.0.0.5:22 is the last host of lab: delete the pool instead "
        "(`gpucloud host-pool delete lab`)\n"
    )
    assert [m for m, _ in sent(api)].count("PATCH") == 1


def test_cli_host_pool_concurrent_change_is_the_apis_412(
    api: ScriptedApi, capsys: pytest.CaptureFixture[str]
) -> None:
    api.script += [ok(POOL, etag='"v4"'), problem(412, "precondition_failed", "the host pool changed")]
    assert main(["host-pool", "remove-host", "hpl_1", "gpu-b.lab:2222"]) == 1
    assert "the host pool changed (precondition_failed, HTTP 412)" in capsys.readouterr().err


# ---- update ---------------------------------------------------------------------------------------------


def test_cli_host_pool_update_sends_only_what_changes(
    api: ScriptedApi, key_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api.script += [page(POOL), ok(POOL, etag='"v5"'), ok(POOL)]
    assert main(["host-pool", "update", "lab", "--key-file", str(key_file), "--ssh-user", "ubuntu",
                 "--proxy-jump", "", "--no-install-packages", "--label", "team=cv", "--json"]) == 0
    assert api.requests[-1].headers["If-Match"] == '"v5"'
    assert api.bodies[-1] == {"ssh_user": "ubuntu", "install_packages": False, "proxy_jump": None,
                              "labels": {"team": "cv"}, "ssh_private_key": PRIVATE_KEY}
    assert "PRIVATE" not in capsys.readouterr().out

    assert main(["host-pool", "update", "lab"]) == 1
    assert "nothing to change" in capsys.readouterr().err
    assert len(api.requests) == 3


# ---- probe ------------------------------------------------------------------------------------------------


def test_cli_host_pool_probe_posts_and_says_what_goes_on(
    api: ScriptedApi, capsys: pytest.CaptureFixture[str]
) -> None:
    api.script += [ok(POOL), ok(pending(POOL, READY_HOST, REFUSED_HOST), 202)]
    assert main(["host-pool", "probe", "hpl_1"]) == 0
    assert sent(api)[-1] == ("POST", "/v1/host-pools/hpl_1/probe")
    assert capsys.readouterr().err == "Checking 2 hosts of lab; see `gpucloud host-pool show lab`.\n"


def test_cli_host_pool_probe_wait_polls_until_no_host_is_pending(
    api: ScriptedApi, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = FakeClock()
    monkeypatch.setattr(host_pools_cli, "wait_clock", clock)
    monkeypatch.setattr(host_pools_cli, "wait_sleep", clock.sleep)
    half = {**pending(POOL, REFUSED_HOST), "hosts": [READY_HOST, {**REFUSED_HOST, "status": "pending"}],
            "status": "ready", "ready_hosts": 1}
    all_pending = pending(POOL, READY_HOST, REFUSED_HOST)
    api.script += [page(POOL), ok(all_pending, 202), ok(all_pending), ok(half), ok(half), ok(POOL)]
    assert main(["host-pool", "probe", "lab", "--wait"]) == 0
    polls = [("GET", "/v1/host-pools/hpl_1")] * 4
    assert sent(api)[1:] == [("POST", "/v1/host-pools/hpl_1/probe"), *polls]
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        "lab: 0 ready, 2 pending of 2 hosts", "lab: 1 ready, 1 pending of 2 hosts",
        "lab: 1 ready, 0 pending of 2 hosts",
    ]
    assert "gpu-b.lab:2222: gpu-b.lab refused the pool's key" in captured.out
    assert clock.sleeps and all(pause <= 10.0 for pause in clock.sleeps)


def test_cli_host_pool_probe_wait_is_bounded(
    api: ScriptedApi, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = FakeClock()
    monkeypatch.setattr(host_pools_cli, "wait_clock", clock)
    monkeypatch.setattr(host_pools_cli, "wait_sleep", clock.sleep)
    stuck = pending(POOL, READY_HOST)
    api.script += [ok(POOL), ok(stuck, 202)] + [ok(stuck)] * 20
    assert main(["host-pool", "probe", "hpl_1", "--wait", "--timeout", "30", "--json"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "timed out after 30s waiting for the checks of host pool lab" in captured.err
    assert "see `gpucloud host-pool show lab` later" in captured.err
    assert sum(clock.sleeps) == 30


# ---- delete -----------------------------------------------------------------------------------------------


def test_cli_host_pool_delete_and_in_use(api: ScriptedApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.script += [page(POOL), httpx.Response(204)]
    assert main(["host-pool", "delete", "lab", "--yes"]) == 0
    assert sent(api)[-1] == ("DELETE", "/v1/host-pools/hpl_1")
    assert capsys.readouterr().err == "Deleted host pool hpl_1 (lab).\n"

    api.script += [ok(POOL), problem(409, "host_pool_in_use", "cluster cls_1 uses host pool lab")]
    assert main(["host-pool", "delete", "hpl_1", "--yes", "--json"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "error: cluster cls_1 uses host pool lab (host_pool_in_use, HTTP 409); request id req-1\n"
    )

    api.script += [ok(POOL)]
    assert main(["host-pool", "delete", "hpl_1"]) == 1  # no terminal to ask on
    assert "pass --yes" in capsys.readouterr().err
    assert sent(api)[-1] == ("GET", "/v1/host-pools/hpl_1")
