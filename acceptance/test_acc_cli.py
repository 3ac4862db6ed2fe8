"""The `gpucloud` command line as a user runs it: a subprocess against the real backend (simulated
datacenter at 600x, so a 2-node cluster is RUNNING in seconds). One backend for the module; the outage
test stops it and so runs last."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from acceptance.backend import Backend, _cli, running_backend
from acceptance.harness import WAIT_CEILING_S

REPO = Path(__file__).resolve().parents[1]
FAST_SIMULATION = {
    "GPUCLOUD_SIMULATION_SPEED": "600",
    "GPUCLOUD_SIMULATION_BOOT_FAILURE_RATE": "0",
    "GPUCLOUD_SIMULATION_ACCEPTANCE_FAILURE_RATE": "0",
    "GPUCLOUD_LOG_LEVEL": "warning",
}


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    with pytest.MonkeyPatch.context() as patch:
        for name, value in FAST_SIMULATION.items():
            patch.setenv(name, value)
        with running_backend(tmp_path_factory.mktemp("cli-backend")) as server:
            yield server


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cli-home")


def gpucloud(
    home: Path, *args: str, backend: Backend | None = None, stdin: str = "", **env: str
) -> subprocess.CompletedProcess[str]:
    """Run `gpucloud ARGS` with only the given credentials (no saved config unless a test logs in)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("GPUCLOUD_")}
    environment.update(PYTHONPATH=str(REPO), HOME=str(home), XDG_CONFIG_HOME=str(home / "config"))
    if backend is not None:
        environment.update(backend.provider_env)
    environment.update(env)
    return subprocess.run(
        [sys.executable, "-m", "provider.cli.main", *args],
        env=environment, input=stdin, capture_output=True, text=True, timeout=WAIT_CEILING_S, check=False,
    )


def ok_json(done: subprocess.CompletedProcess[str]) -> object:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


@pytest.fixture(scope="module")
def public_key(home: Path) -> Path:
    key = home / "key"
    command = ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "cli-test", "-f", str(key)]
    subprocess.run(command, check=True)
    return home / "key.pub"


def test_acc_cli_cluster_lifecycle(backend: Backend, home: Path, public_key: Path) -> None:
    run = lambda *args: gpucloud(home, *args, backend=backend)  # noqa: E731

    created = ok_json(run("cluster", "create", "8xH100", "-i", str(public_key), "-n", "2", "--name", "train",
                          "--json"))
    assert isinstance(created, dict)
    cluster_id = created["id"]
    assert created["status"] == "RUNNING" and created["node_count"] == 2
    assert [n["status"] for n in created["nodes"]] == ["RUNNING", "RUNNING"]
    keys = ok_json(run("ssh-key", "list", "--json"))
    assert isinstance(keys, list) and created["ssh_key_ids"] == [keys[0]["id"]]
    assert keys[0]["public_key"] == public_key.read_text().strip()

    listed = run("cluster", "list")
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()
    assert header.split()[:3] == ["ID", "NAME", "STATUS"]
    assert row.split()[:6] == [cluster_id, "train", "RUNNING", "8xH100", "2/2", "16"]
    assert [c["id"] for c in ok_json(run("cluster", "list", "--json"))] == [cluster_id]  # type: ignore[union-attr]

    info = run("cluster", "info", "train")
    assert info.returncode == 0 and "train-1" in info.stdout and "RUNNING" in info.stdout, info.stderr

    region = created["region"]
    volume = ok_json(run("volume", "create", "datasets", "--region", region, "--size", "1", "--json"))
    assert isinstance(volume, dict)
    attached = run("cluster", "attach", "train", "datasets")
    assert attached.returncode == 0, attached.stderr
    scaled = ok_json(run("cluster", "scale", cluster_id, "3", "--json"))
    assert isinstance(scaled, dict)
    assert scaled["volume_ids"] == [volume["id"]]
    assert scaled["node_count"] == 3 and [n["status"] for n in scaled["nodes"]] == ["RUNNING"] * 3

    login = scaled["login"]
    known_hosts = home / "config" / "gpucloud" / "known_hosts"
    checked = ["-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={known_hosts}"]
    to_cluster = run("ssh", "train", "--dry-run")
    assert shlex.split(to_cluster.stdout) == [
        "ssh", *checked, "-o", f"HostKeyAlias=gpucloud.{cluster_id}.login", "-p", "22",
        f"{login['user']}@{login['public_ip']}"], to_cluster.stderr
    worker = next(n for n in scaled["nodes"] if n["name"] == "train-2")
    to_worker = shlex.split(run("ssh", "train-2", "--dry-run", "--", "-i", "k").stdout)
    assert to_worker[:7] == ["ssh", *checked, "-o", f"HostKeyAlias=gpucloud.{cluster_id}.train-2"]
    assert to_worker[7] == "-o"
    assert to_worker[8].startswith("ProxyCommand=ssh -i k -o StrictHostKeyChecking=yes")
    assert to_worker[9:] == ["-p", "22", f"{login['user']}@{worker['private_ip']}", "-i", "k"]
    assert f"gpucloud.{cluster_id}.login {login['host_key']}\n" in known_hosts.read_text()
    assert f"gpucloud.{cluster_id}.train-2 {worker['host_key']}\n" in known_hosts.read_text()

    destroyed = run("cluster", "delete", "train", "--yes")
    assert destroyed.returncode == 0, destroyed.stderr
    assert "DESTROYED" in destroyed.stderr
    assert ok_json(run("cluster", "list", "--json")) == []


@pytest.fixture(scope="module")
def ops_cluster(backend: Backend, home: Path, public_key: Path) -> Iterator[str]:
    """A running 2-node Slurm cluster `ops` for the day-2 commands (deleted unless the backend is down)."""
    created = ok_json(gpucloud(home, "cluster", "create", "8xH100", "-n", "2", "--name", "ops", "--json",
                               "-i", str(public_key), backend=backend))
    assert isinstance(created, dict) and created["status"] == "RUNNING"
    yield created["id"]
    if backend.process.poll() is None:
        backend.client.delete_cluster(created["id"])


def test_acc_cli_jobs_and_nodes(backend: Backend, home: Path, ops_cluster: str) -> None:
    run = lambda *args: gpucloud(home, *args, backend=backend)  # noqa: E731

    jobs = ok_json(run("jobs", "ops", "--json"))
    assert isinstance(jobs, dict)
    assert list(jobs["counts"])[:6] == ["running", "pending", "completed", "failed", "cancelled", "timeout"]
    assert sum(jobs["counts"].values()) >= len(jobs["items"])
    assert [(p["name"], p["nodes"], p["gpus_total"]) for p in jobs["partitions"]] == [("gpu", 2, 16)]
    pending = ok_json(run("jobs", ops_cluster, "--state", "pending", "--json"))
    assert isinstance(pending, dict) and {j["state"] for j in pending["items"]} <= {"pending"}
    table = run("jobs", "ops")
    assert table.returncode == 0 and table.stdout.startswith("Jobs: "), table.stderr
    assert "PARTITION  NODES  GPU TYPE" in table.stdout

    nodes = ok_json(run("nodes", "ops", "--json"))
    assert isinstance(nodes, dict)
    assert [(n["name"], n["health"], len(n["gpus"])) for n in nodes["items"]] == [
        ("ops-0", "healthy", 8), ("ops-1", "healthy", 8)
    ]
    assert nodes["counts"]["healthy"] == 2
    failed = ok_json(run("nodes", "ops", "--health", "failed", "--json"))
    assert isinstance(failed, dict) and failed["items"] == [] and failed["counts"] == nodes["counts"]
    healthy = ok_json(run("nodes", "ops", "--health", "healthy", "--json"))
    assert isinstance(healthy, dict) and [n["name"] for n in healthy["items"]] == ["ops-0", "ops-1"]
    listed = run("nodes", "ops")
    assert listed.returncode == 0, listed.stderr
    summary, _, header, *rows = listed.stdout.splitlines()
    assert summary.startswith("Health: 2 healthy, 0 degraded")
    assert header.split()[:5] == ["NODE", "ROLE", "STATUS", "HEALTH", "SCHEDULER"]
    assert [row.split()[:4] for row in rows] == [["ops-0", "worker", "RUNNING", "healthy"],
                                                 ["ops-1", "worker", "RUNNING", "healthy"]]


def test_acc_cli_logs_tail_and_follow_until_ctrl_c(backend: Backend, home: Path, ops_cluster: str) -> None:
    tail = ok_json(gpucloud(home, "logs", "ops", "--tail", "2", "--json", backend=backend))
    assert isinstance(tail, dict) and tail["source"] == "controller" and len(tail["lines"]) == 2
    node_log = gpucloud(home, "logs", "ops", "--node", "ops-1", "--tail", "5", backend=backend)
    assert node_log.returncode == 0 and "slurmd" in node_log.stdout, node_log.stderr
    unknown = one_error_line(gpucloud(home, "logs", "ops", "--node", "ops-9", backend=backend))
    assert "no node 'ops-9'" in unknown and "request id req_" in unknown

    environment = {k: v for k, v in os.environ.items() if not k.startswith("GPUCLOUD_")}
    environment.update(backend.provider_env, PYTHONPATH=str(REPO), HOME=str(home))
    command = [sys.executable, "-m", "provider.cli.main", "logs", "ops", "-f", "--tail", "2", "--json"]
    # Started with SIGINT ignored, as a shell starts a background job: Ctrl-C must still end it.
    ignore_sigint = lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)  # noqa: E731
    with subprocess.Popen(command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, preexec_fn=ignore_sigint) as process:
        assert process.stdout is not None and process.stderr is not None
        first = [json.loads(process.stdout.readline()) for _ in range(2)]  # the tail, streamed
        process.send_signal(signal.SIGINT)
        try:
            _, rest = process.communicate(timeout=WAIT_CEILING_S)
        finally:
            process.kill()  # still running only when Ctrl-C failed: fail, do not hang
        assert process.returncode == 130, rest
    # The modelled workload writes on in real time: the streamed tail is two consecutive lines of the log,
    # no older than the tail read before (equal to it on an idle machine).
    later = ok_json(gpucloud(home, "logs", "ops", "--tail", "200", "--json", backend=backend))
    assert isinstance(later, dict)
    streamed = [line["line"] for line in first]
    at = later["lines"].index(streamed[0])
    assert later["lines"][at:at + 2] == streamed and later["lines"].index(tail["lines"][0]) <= at
    assert {line["source"] for line in first} == {"controller"}
    assert "interrupted" in rest and "Traceback" not in rest


def test_acc_cli_node_actions_and_repair_mode(backend: Backend, home: Path, ops_cluster: str) -> None:
    run = lambda *args: gpucloud(home, *args, backend=backend)  # noqa: E731

    drained = ok_json(run("node", "drain", "ops", "ops-1", "--json"))
    assert isinstance(drained, dict) and drained["action"] == "drain"
    assert drained["node"]["drained"] is True and drained["node"]["orchestrator_state"] == "DRAIN"
    resumed = ok_json(run("node", "resume", "ops", "ops-1", "--json"))
    assert isinstance(resumed, dict) and resumed["node"]["drained"] is False

    unconfirmed = one_error_line(run("node", "restart", "ops", "ops-1"))  # stdin is not a terminal
    assert "pass --yes" in unconfirmed
    restarted = ok_json(run("node", "restart", "ops", "ops-1", "--yes", "--json"))
    assert isinstance(restarted, dict) and restarted["node"]["name"] == "ops-1"
    unknown = one_error_line(run("node", "drain", "ops", "ops-9"))
    assert "ops-9" in unknown and "HTTP 404" in unknown and "request id req_" in unknown
    workers = ok_json(run("cluster", "restart-workers", "ops", "--yes", "--json"))
    assert workers == {"action": "restart_workers", "nodes": []}  # no worker reports XID errors

    manual = ok_json(run("cluster", "edit", "ops", "--repair", "manual", "--json"))
    assert isinstance(manual, dict) and manual["node_repair"] == "manual"
    assert backend.client.get_cluster(ops_cluster)["node_repair"] == "manual"


def test_acc_cli_login_saves_a_checked_key_privately(backend: Backend, home: Path) -> None:
    rejected = gpucloud(home, "login", "--endpoint", backend.url, stdin="gpc_not_a_key\n")
    assert "HTTP 401" in one_error_line(rejected)
    assert not (home / "config" / "gpucloud" / "config.toml").exists()

    done = gpucloud(home, "login", "--endpoint", backend.url, stdin=backend.api_key + "\n")
    assert done.returncode == 0, done.stderr
    config = home / "config" / "gpucloud" / "config.toml"
    assert config.stat().st_mode & 0o777 == 0o600
    assert backend.api_key not in done.stdout + done.stderr
    # No GPUCLOUD_* variables now: the saved endpoint and key are used.
    assert gpucloud(home, "regions", "--json").returncode == 0
    config.unlink()


@pytest.mark.parametrize(
    ("content", "expected"),
    [(None, "cannot read the public key file"), ("not a key\n", "public_key")],
    ids=["missing", "garbage"],
)
def test_acc_cli_bad_key_file_is_one_error_line(
    backend: Backend, home: Path, content: str | None, expected: str
) -> None:
    path = home / f"bad-{content is None}.pub"
    if content is not None:
        path.write_text(content)
    line = one_error_line(gpucloud(home, "cluster", "create", "8xH100", "-n", "2", "-i", str(path),
                                   backend=backend))
    assert expected in line


def test_acc_cli_unknown_instance_type_is_one_error_line(
    backend: Backend, home: Path, public_key: Path
) -> None:
    line = one_error_line(gpucloud(home, "cluster", "create", "9xZ900", "-n", "2", "-i", str(public_key),
                                   backend=backend))
    assert "unknown instance type '9xZ900'" in line and "request id req_" in line


@pytest.fixture
def slow_backend(tmp_path: Path) -> Iterator[Backend]:
    """A backend whose bring-ups take about 10 s (the module's take 2 s, which a busy machine can spend
    between the CLI's first status line and the Ctrl-C the test sends on reading it)."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in {**FAST_SIMULATION, "GPUCLOUD_SIMULATION_SPEED": "120"}.items():
            patch.setenv(name, value)
        data_dir = tmp_path / "slow-backend"
        data_dir.mkdir()
        with running_backend(data_dir) as server:
            yield server


def test_acc_cli_ctrl_c_stops_watching_but_not_the_create(
    slow_backend: Backend, home: Path, public_key: Path
) -> None:
    backend = slow_backend
    environment = {k: v for k, v in os.environ.items() if not k.startswith("GPUCLOUD_")}
    environment.update(backend.provider_env, PYTHONPATH=str(REPO), HOME=str(home))
    command = [sys.executable, "-m", "provider.cli.main", "cluster", "create", "8xH100", "--name", "watched",
               "-i", str(public_key)]
    with subprocess.Popen(command, env=environment, stderr=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True) as process:
        assert process.stderr is not None
        first = process.stderr.readline()  # "Creating watched (cls_...)": the API accepted it
        assert first.startswith("Creating watched"), first
        process.stderr.readline()  # the first status line: now watching
        process.send_signal(signal.SIGINT)
        try:
            _, rest = process.communicate(timeout=WAIT_CEILING_S)
        finally:
            process.kill()  # still running only when Ctrl-C failed: fail, do not hang
        assert process.returncode == 130, rest
    cluster_id = first.split("(")[1].split(")")[0]
    assert f"Resume with: gpucloud cluster info {cluster_id} --wait" in rest and "Traceback" not in rest
    resumed = ok_json(gpucloud(home, "cluster", "info", cluster_id, "--wait", "--json", backend=backend))
    assert isinstance(resumed, dict) and resumed["status"] == "RUNNING"  # not cancelled
    backend.client.delete_cluster(cluster_id)


def test_acc_cli_security_group_and_budget_lifecycle(backend: Backend, home: Path) -> None:
    run = lambda *args: gpucloud(home, *args, backend=backend)  # noqa: E731

    group = ok_json(run("security-group", "create", "lab", "--ingress", "tcp:22:203.0.113.0/24",
                        "--ingress", "tcp:8888-8890:10.8.0.0/16", "--egress", "all::0.0.0.0/0", "--json"))
    assert isinstance(group, dict) and [r["to_port"] for r in group["ingress"]] == [None, 8890]
    listed = ok_json(run("security-group", "list", "--json"))
    assert isinstance(listed, list) and group["id"] in [g["id"] for g in listed]
    shown = run("security-group", "show", "lab")
    assert shown.returncode == 0, shown.stderr
    assert "8888-8890" in shown.stdout and "203.0.113.0/24" in shown.stdout
    broken = one_error_line(run("security-group", "create", "bad", "--ingress", "tcp:22:10.0.0.1/8"))
    assert "invalid_security_rule" in broken and "request id req_" in broken
    assert ok_json(run("security-group", "delete", "lab", "--yes", "--json")) == group
    assert "no security group named 'lab'" in one_error_line(run("security-group", "show", "lab"))

    budget = ok_json(run("budget", "create", "nlp", "--amount", "5000.50", "--label-filter", "team=nlp",
                         "--action", "block_new", "--json"))
    assert isinstance(budget, dict) and Decimal(budget["amount_usd"]) == Decimal("5000.50")
    budgets = ok_json(run("budget", "list", "--json"))
    assert isinstance(budgets, list) and [b["id"] for b in budgets] == [budget["id"]]
    shown = run("budget", "show", budget["id"])
    assert shown.returncode == 0 and "0.00 of 5000.50 USD (0%)" in shown.stdout, shown.stderr
    assert "HTTP 422" in one_error_line(run("budget", "create", "zero", "--amount", "0"))
    assert ok_json(run("budget", "delete", "nlp", "--yes", "--json")) == budget
    assert ok_json(run("budget", "list", "--json")) == []


def info_fields(done: subprocess.CompletedProcess[str]) -> dict[str, list[str]]:
    """`cluster info`'s `Key:  value` lines (a key may repeat, as Budget does)."""
    assert done.returncode == 0, done.stderr
    fields: dict[str, list[str]] = {}
    for line in done.stdout.splitlines():
        key, sep, value = line.partition(":  ")
        if sep:
            fields.setdefault(key.rstrip(":").strip(), []).append(value.strip())
    return fields


def test_acc_cli_create_flags_show_in_info_and_list_filters(
    backend: Backend, home: Path, public_key: Path
) -> None:
    run = lambda *args: gpucloud(home, *args, backend=backend)  # noqa: E731
    group = ok_json(run("security-group", "create", "web", "--ingress", "tcp:443:0.0.0.0/0", "--json"))
    address = ok_json(run("reserved-ip", "create", "--region", "us-east-1", "--name", "edge", "--json"))
    budget = ok_json(run("budget", "create", "nlp", "--amount", "100", "--label-filter", "team=nlp",
                         "--action", "notify", "--json"))
    block = ok_json(run("reservation", "create", "q1", "8xH100", "-n", "1", "--region", "us-east-1",
                        "--days", "7", "--json"))
    assert isinstance(group, dict) and isinstance(address, dict) and isinstance(budget, dict)
    assert isinstance(block, dict)

    assert "no security group named 'nope'" in one_error_line(run(
        "cluster", "create", "8xH100", "--security-group", "nope", "-i", str(public_key)))
    assert "1 minute and 365 days" in one_error_line(run("cluster", "create", "8xH100", "--ttl", "400d"))
    refused = one_error_line(run("cluster", "create", "8xH100", "--image", "app=x:1"))
    assert "add --orchestrator slurm" in refused  # images run through Slurm: a lone node has none

    spot = ok_json(run(
        "cluster", "create", "8xH100", "--name", "flags", "--region", "us-east-1", "--orchestrator", "slurm",
        "--min-nodes", "1", "--max-nodes", "3", "--spot", "--ttl", "8h", "--security-group", "web",
        "--reserved-ip", address["address"], "--max-hourly-cost", "500", "--label", "team=nlp",
        "--label", "env=dev", "-i", str(public_key), "--json"))
    assert isinstance(spot, dict) and spot["status"] == "RUNNING"
    assert (spot["capacity_type"], spot["ttl"], spot["security_group_ids"], spot["reserved_ip_id"]) == (
        "spot", "8h", [group["id"]], address["id"])
    assert spot["autoscaling"]["min_nodes"] == 1 and spot["autoscaling"]["max_nodes"] == 3
    assert Decimal(str(spot["max_hourly_cost_usd"])) == 500 and spot["expires_at"]

    drawn = ok_json(run("cluster", "create", "8xH100", "--name", "drawn", "--region", "us-east-1",
                        "--reservation", "q1", "--container", "pytorch", "--label", "team=cv",
                        "-i", str(public_key), "--no-wait", "--json"))
    assert isinstance(drawn, dict)
    assert (drawn["reservation_id"], drawn["container"]) == (block["id"], "pytorch")

    shown = info_fields(run("cluster", "info", "flags"))
    assert shown["Billing"] == ["spot"] and shown["Expires"] == [f"{spot['expires_at']} (ttl 8h)"]
    assert shown["Scaling"] == ["autoscaling 1-3 nodes (idle nodes go after 10 min)"]
    assert (shown["Security groups"], shown["Reserved IP"], shown["Max USD/hour"]) == (
        [group["id"]], [address["id"]], ["500.00"])
    spend = f"0.00 of 100.00 USD (0%) in {budget['period']}"
    assert shown["Budget"] == [f"nlp (team=nlp): {spend}, at 100 %: notify"]
    other = info_fields(run("cluster", "info", "drawn"))
    assert other["Reservation"] == [block["id"]] and other["Budget"] == ["none applies"]
    as_json = run("cluster", "info", "flags", "--json")  # the API's object, numbers exact
    assert json.loads(as_json.stdout, parse_float=Decimal) == backend.client.get_cluster(spot["id"])

    def ids(*filters: str) -> list[str]:
        listed = ok_json(run("cluster", "list", *filters, "--json"))
        assert isinstance(listed, list)
        return [c["id"] for c in listed]

    assert ids("--label", "team=nlp") == [spot["id"]]
    assert ids("--label", "team=nlp", "--label", "env=prod") == []
    assert ids("--status", "running", "--label", "env=dev") == [spot["id"]]
    assert spot["id"] not in ids("--status", "FAILED")
    assert "No clusters match." in run("cluster", "list", "--label", "team=none").stderr

    assert run("cluster", "delete", "flags", "--yes").returncode == 0
    assert run("cluster", "destroy", "drawn", "--yes").returncode == 0  # the old verb, hidden
    for kind, ref in (("reservation", "q1"), ("reserved-ip", "edge"), ("security-group", "web"),
                      ("budget", "nlp")):
        assert run(kind, "delete", ref, "--yes").returncode == 0, kind


def test_acc_cli_reserved_ip_usage_lines_are_listed(backend: Backend, home: Path) -> None:
    address = ok_json(gpucloud(home, "reserved-ip", "create", "--region", "us-east-1", "--json",
                               backend=backend))
    assert isinstance(address, dict)
    time.sleep(1.5)  # the meter bills whole seconds
    backend.client.delete_reserved_ip(address["id"])  # its one hour slice ends: billed at the next run
    settled = {"GPUCLOUD_DATA_DIR": str(backend.data_dir), "GPUCLOUD_BILLING_SETTLE_SECONDS": "0"}
    _cli({**os.environ, **settled}, "billing-run", "--once")
    lines = ok_json(gpucloud(home, "usage", "--kind", "reserved_ip", "--json", backend=backend))
    assert isinstance(lines, list) and {u["kind"] for u in lines} == {"reserved_ip"}
    assert address["id"] in {u["resource_id"] for u in lines}


def complete(home: Path, words: str, **env: str) -> list[str]:
    """What bash completion offers for the last of `words` (click's bash_complete protocol)."""
    done = gpucloud(home, _GPUCLOUD_COMPLETE="bash_complete", COMP_WORDS=words,
                    COMP_CWORD=str(len(words.split(" ")) - 1), **env)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return [line.partition(",")[2] for line in done.stdout.splitlines() if line]  # none: one empty line


def test_acc_cli_default_ssh_keys_and_name_completion(
    backend: Backend, tmp_path: Path, public_key: Path
) -> None:
    """A project of its own: no keys, then the project's key, then the one `login --ssh-key` saved."""
    environment = {**os.environ, "GPUCLOUD_DATA_DIR": str(backend.data_dir)}
    _cli(environment, "create-project", "keys")
    api_key = _cli(environment, "create-api-key", "--project", "keys", "--role", "admin")
    project = {"GPUCLOUD_ENDPOINT": backend.url, "GPUCLOUD_API_KEY": api_key}
    run = lambda *args: gpucloud(tmp_path, *args, **project)  # noqa: E731

    refused = one_error_line(run("cluster", "create", "8xH100", "--name", "nokeys"))
    assert "no SSH key to install" in refused and "-i ~/.ssh/id_ed25519.pub" in refused
    assert "gpucloud ssh-key add" in refused

    laptop = ok_json(run("ssh-key", "add", str(public_key), "--name", "laptop", "--json"))
    assert isinstance(laptop, dict)
    from_project = run("cluster", "create", "8xH100", "--name", "from-project", "--json")
    assert f"Installing the SSH keys of the project: laptop ({laptop['id']})" in from_project.stderr
    assert ok_json(from_project)["ssh_key_ids"] == [laptop["id"]]  # type: ignore[index]

    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    login = gpucloud(tmp_path, "login", "--endpoint", backend.url, "--ssh-key", f"{other}.pub", "--json",
                     stdin=api_key + "\n")
    saved = ok_json(login)
    assert isinstance(saved, dict) and len(saved["ssh_key_ids"]) == 1
    from_login = gpucloud(tmp_path, "cluster", "create", "8xH100", "--name", "from-login", "--no-wait",
                          "--json")  # no GPUCLOUD_* variables: the saved login
    assert "saved by `gpucloud login`: other.pub" in from_login.stderr
    assert ok_json(from_login)["ssh_key_ids"] == saved["ssh_key_ids"]  # type: ignore[index]

    assert complete(tmp_path, "gpucloud cluster info from-") == ["from-login", "from-project"]
    assert complete(tmp_path, "gpucloud node drain from-project ") == ["from-project-0"]
    assert complete(tmp_path, "gpucloud ssh-key delete l") == ["laptop"]
    assert complete(tmp_path, "gpucloud ssh from-project") == ["from-project", "from-project-0"]
    assert complete(tmp_path, "gpucloud cluster info ", GPUCLOUD_ENDPOINT="http://127.0.0.1:9") == []
    assert complete(tmp_path / "nobody", "gpucloud cluster info ") == []  # no key configured
    for name in ("from-login", "from-project"):
        assert run("cluster", "delete", name, "--yes", "--no-wait").returncode == 0


def test_acc_cli_api_outage_is_one_error_line(backend: Backend, home: Path) -> None:
    """Runs last: it stops the module's backend."""
    os.killpg(backend.process.pid, signal.SIGTERM)
    backend.process.wait(timeout=WAIT_CEILING_S)
    line = one_error_line(gpucloud(home, "cluster", "list", backend=backend))
    assert f"could not reach the API at {backend.url}" in line
