"""`gpucloud ssh`: the published host keys in the CLI's known_hosts file, strict checking against it, the
identity options reaching the jump to a worker (ProxyCommand), and `--print-config` for plain ssh, checked
with OpenSSH's own parser (`ssh -G`, `ssh-keygen -F`) where it is installed."""

from __future__ import annotations

import shlex
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import click
import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from provider.cli import app as app_module
from provider.cli import ssh
from provider.cli.main import main
from tests.provider.client.fakes import ScriptedApi, make_client


def _host_key() -> str:
    public = Ed25519PrivateKey.generate().public_key()
    return public.public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH).decode()


LOGIN_KEY, WORKER_KEY, OTHER_KEY = _host_key(), _host_key(), _host_key()
CLUSTER: dict[str, Any] = {
    "id": "cls_1", "name": "train", "status": "RUNNING",
    "login": {"host": "train-jumphost", "public_ip": "198.18.0.7", "user": "ubuntu", "host_key": LOGIN_KEY},
    "nodes": [
        {"name": "train-0", "role": "worker", "status": "RUNNING", "private_ip": "10.0.0.10",
         "host_key": WORKER_KEY, "instance_id": "nod_0"},
        {"name": "train-1", "role": "worker", "status": "PROVISIONING", "private_ip": "10.0.0.11",
         "host_key": None, "instance_id": "nod_1"},
    ],
}
SINGLE: dict[str, Any] = {
    "id": "cls_2", "name": "solo", "status": "RUNNING",
    "login": {"host": "solo-0", "public_ip": "198.18.0.8", "user": "ubuntu", "port": 2222,
              "host_key": OTHER_KEY},
    "nodes": [{"name": "solo-0", "role": "standalone", "status": "RUNNING", "private_ip": "10.0.1.10",
               "host_key": OTHER_KEY}],
}
STRICT = ["-o", "StrictHostKeyChecking=yes"]


def _option(argv: list[str], key: str) -> str:
    values = [argv[i + 1].split("=", 1)[1] for i, arg in enumerate(argv[:-1])
              if arg == "-o" and argv[i + 1].startswith(f"{key}=")]
    assert len(values) == 1, (key, argv)
    return values[0]


def test_cluster_argv_checks_the_login_key_strictly_against_our_file(tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    argv = ssh.connect_argv(SINGLE, None, ["hostname"], known)
    assert argv[:3] == ["ssh", *STRICT]
    assert _option(argv, "UserKnownHostsFile") == str(known)
    assert _option(argv, "HostKeyAlias") == "gpucloud.cls_2.login"
    assert argv[-4:] == ["-p", "2222", "ubuntu@198.18.0.8", "hostname"]
    assert known.read_text() == f"gpucloud.cls_2.login {OTHER_KEY}\n"


def test_worker_argv_takes_identity_options_through_the_jump(tmp_path: Path) -> None:
    known = tmp_path / "dir with space" / "known%hosts"
    options = ["-i", "/keys/my key", "-oIdentitiesOnly=yes", "-p", "22", "-tt", "-v", "exit", "-i", "3"]
    argv = ssh.connect_argv(CLUSTER, CLUSTER["nodes"][0], options, known)
    assert _option(argv, "HostKeyAlias") == "gpucloud.cls_1.train-0"
    assert _option(argv, "UserKnownHostsFile") == f'"{known}"'  # blanks: quoted for ssh's parser
    assert argv[-len(options) - 3:] == ["-p", "22", "ubuntu@10.0.0.10", *options]
    assert "-J" not in argv
    proxy = shlex.split(_option(argv, "ProxyCommand"))
    # The identity options (up to the remote command), then strict checking of the login host's key;
    # a literal % is doubled (ssh expands %-tokens in a ProxyCommand), the %h:%p tokens are kept.
    assert proxy == ["ssh", "-i", "/keys/my key", "-o", "IdentitiesOnly=yes", *STRICT,
                     "-o", f'UserKnownHostsFile="{str(known).replace("%", "%%")}"',
                     "-o", "HostKeyAlias=gpucloud.cls_1.login", "-p", "22", "-W", "%h:%p",
                     "ubuntu@198.18.0.7"]


@pytest.mark.parametrize(("options", "picked"), [
    (["-ikey"], ["-i", "key"]),
    (["-v", "-i", "a", "-o", "IdentityFile=b", "-o", "ForwardAgent=yes", "cmd"],
     ["-i", "a", "-o", "IdentityFile=b"]),
    (["-tvi", "a", "-o", "BatchMode yes"], ["-i", "a", "-o", "BatchMode yes"]),
    (["-p", "2200", "-L", "8080:x:80", "--", "-i", "x"], []),  # after `--`: the remote command
    (["uptime", "-i", "x"], []),
])
def test_jump_options_are_the_identity_options_before_the_command(options: list[str],
                                                                  picked: list[str]) -> None:
    assert ssh.jump_options(options) == picked


def test_known_hosts_keeps_other_clusters_and_is_private(tmp_path: Path) -> None:
    known = tmp_path / "gpucloud" / "known_hosts"
    known.parent.mkdir(mode=0o755)
    known.write_text(f"gpucloud.cls_9.login {OTHER_KEY}\ngpucloud.cls_1.train-5 {OTHER_KEY}\n")
    known.chmod(0o644)
    ssh.connect_argv(CLUSTER, CLUSTER["nodes"][0], [], known)
    assert known.read_text().splitlines() == [
        f"gpucloud.cls_9.login {OTHER_KEY}",  # another cluster's stays
        f"gpucloud.cls_1.login {LOGIN_KEY}",  # this cluster's are the API's now (train-5 is gone)
        f"gpucloud.cls_1.train-0 {WORKER_KEY}",
    ]
    assert stat.S_IMODE(known.stat().st_mode) == 0o600


def test_no_published_key_says_so_and_how_to_wait(tmp_path: Path) -> None:
    with pytest.raises(click.UsageError) as raised:
        ssh.connect_argv(CLUSTER, CLUSTER["nodes"][1], [], tmp_path / "known_hosts")
    assert raised.value.message == (
        "the API has not published node train-1's SSH host key yet (status PROVISIONING), so it cannot be "
        "verified; wait with `gpucloud cluster info cls_1 --wait`, then connect again")
    no_login_key = {**CLUSTER, "login": {**CLUSTER["login"], "host_key": None}}
    with pytest.raises(click.UsageError, match="login host train-jumphost's SSH host key"):
        ssh.connect_argv(no_login_key, None, [], tmp_path / "known_hosts")


def test_a_key_that_is_not_one_openssh_line_is_refused(tmp_path: Path) -> None:
    injected = {**SINGLE, "login": {**SINGLE["login"], "host_key": f"{OTHER_KEY}\n* {OTHER_KEY}"}}
    with pytest.raises(click.UsageError, match="not an OpenSSH public-key line"):
        ssh.connect_argv(injected, None, [], tmp_path / "known_hosts")
    assert not (tmp_path / "known_hosts").exists()


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ScriptedApi:
    scripted = ScriptedApi()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("GPUCLOUD_API_KEY", "gpc_test")
    monkeypatch.setattr(app_module, "GpuCloudClient", lambda *args, **kwargs: make_client(scripted))
    return scripted


def _clusters(*clusters: dict[str, Any]) -> httpx.Response:
    return httpx.Response(200, json={"items": list(clusters), "next_page_token": None})


def test_print_config_serves_plain_ssh(api: ScriptedApi, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    api.script.append(_clusters(CLUSTER))
    assert main(["ssh", "--print-config", "train", "--", "-i", "keys/id"]) == 0
    captured = capsys.readouterr()
    known = tmp_path / "gpucloud" / "known_hosts"
    key = Path("keys/id").absolute()
    assert "Host train-jumphost\n  HostName 198.18.0.7\n  Port 22\n  User ubuntu\n" in captured.out
    assert (f"Host train-0\n  HostName 10.0.0.10\n  Port 22\n  User ubuntu\n  ProxyJump train-jumphost\n"
            f"  HostKeyAlias gpucloud.cls_1.train-0\n  StrictHostKeyChecking yes\n"
            f"  UserKnownHostsFile {known}\n  IdentityFile {key}\n") in captured.out
    assert "Host train-1" not in captured.out and "# train-1 is left out: the API has not published" in (
        captured.out)
    assert "train-1 is left out" in captured.err
    assert known.read_text() == f"gpucloud.cls_1.login {LOGIN_KEY}\ngpucloud.cls_1.train-0 {WORKER_KEY}\n"
    if shutil.which("ssh") is None:
        return
    config = tmp_path / "config"
    config.write_text(captured.out)
    resolved = subprocess.run(["ssh", "-G", "-F", str(config), "train-0"], capture_output=True, text=True,
                              check=True).stdout.splitlines()
    for line in ("hostname 10.0.0.10", "user ubuntu", "port 22", "proxyjump train-jumphost",
                 "hostkeyalias gpucloud.cls_1.train-0", "stricthostkeychecking true",
                 f"userknownhostsfile {known}", f"identityfile {key}"):
        assert line in resolved
    found = subprocess.run(["ssh-keygen", "-F", "gpucloud.cls_1.train-0", "-f", str(known)],
                           capture_output=True, text=True, check=True).stdout
    assert WORKER_KEY in found


def test_dry_run_to_a_node_prints_the_verified_command(api: ScriptedApi, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    api.script.append(_clusters(CLUSTER))
    assert main(["ssh", "train-0", "--dry-run", "--", "-i", "k", "hostname"]) == 0
    argv = shlex.split(capsys.readouterr().out)
    assert argv[-4:] == ["ubuntu@10.0.0.10", "-i", "k", "hostname"]
    assert shlex.split(_option(argv, "ProxyCommand"))[1:3] == ["-i", "k"]
    assert (tmp_path / "gpucloud" / "known_hosts").exists()
