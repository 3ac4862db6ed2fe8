"""`gpucloud ssh`: exec the system ssh to a cluster's login host, or to one node (workers of a
multi-node cluster are reached through the jumphost, which is the login host), verifying every host key.

The API publishes each machine's SSH host key (`login.host_key`, `nodes[*].host_key`). Before each
connect they are written to the CLI's own known_hosts file (next to its config, 0600), filed under a
`HostKeyAlias` naming the machine (`gpucloud.<cluster id>.<node name>`, `gpucloud.<cluster id>.login`):
private addresses repeat across clusters, an alias never does. ssh runs with StrictHostKeyChecking=yes
against that file only, so a machine that is not the one the API describes is refused.

A worker is reached with a ProxyCommand (not -J) so the identity options given after `--` (`-i KEY`)
authenticate on the jumphost too: with -J they would reach the worker only.
"""

from __future__ import annotations

import fcntl
import os
import re
import shlex
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from provider.cli.app import App, complete_cluster_or_node, pass_app
from provider.cli.config import config_path
from provider.client import GpuCloudClient

DEFAULT_SSH_PORT = 22
ALIAS_PREFIX = "gpucloud."
# An OpenSSH public-key line as the API publishes it: key type and base64 blob, nothing else (a comment
# or a second line would let a response add entries of its own to the known_hosts file).
_HOST_KEY = re.compile(r"[a-z0-9][a-z0-9@.-]* [A-Za-z0-9+/]+={0,3}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
# ssh options that take an argument (ssh(1) synopsis): how to walk the options given after `--`.
_OPTIONS_WITH_ARGUMENT = set("BbcDEeFIiJLlmOoPpQRSWw")
# The identity options given after `--` that the jump to a worker needs too (`-o Key=value` keys).
_JUMP_OPTION_KEYS = {"identityfile", "identitiesonly", "identityagent", "certificatefile",
                     "pkcs11provider", "securitykeyprovider", "batchmode", "connecttimeout"}


@dataclass(frozen=True)
class Endpoint:
    """One machine ssh connects to, and the alias its host key is filed under in the known_hosts file."""

    user: str
    address: str
    port: int
    alias: str
    host_key: str

    @property
    def destination(self) -> str:
        return f"{self.user}@{self.address}"


# ---- what the API says ----------------------------------------------------------------------------------

def known_hosts_path() -> Path:
    """The CLI's known_hosts file: beside its config ($XDG_CONFIG_HOME honoured)."""
    return config_path().parent / "known_hosts"


def _wait_hint(cluster: Mapping[str, Any]) -> str:
    return f"wait with `gpucloud cluster info {cluster['id']} --wait`"


def _checked_host_key(cluster: Mapping[str, Any], what: str, host_key: Any, status: Any) -> str:
    if not host_key:
        raise click.UsageError(
            f"the API has not published {what}'s SSH host key yet (status {status}), so it cannot be "
            f"verified; {_wait_hint(cluster)}, then connect again"
        )
    if not isinstance(host_key, str) or _HOST_KEY.fullmatch(host_key) is None:
        raise click.UsageError(
            f"{what}'s host_key from the API is not an OpenSSH public-key line: {host_key!r}"
        )
    return host_key


def _alias(cluster: Mapping[str, Any], machine: str) -> str:
    cluster_id = str(cluster["id"])
    if _NAME.fullmatch(cluster_id) is None or _NAME.fullmatch(machine) is None:
        raise click.UsageError(f"cannot file a host key for {machine!r} of cluster {cluster_id!r}: odd name")
    return f"{ALIAS_PREFIX}{cluster_id}.{machine}"


def login_endpoint(cluster: Mapping[str, Any]) -> Endpoint:
    """The login host: the jumphost of a multi-node cluster, else the node."""
    login = cluster.get("login")
    if not login or not login.get("public_ip"):
        raise click.UsageError(
            f"cluster {cluster['id']} has no login host yet (status {cluster['status']}); "
            f"{_wait_hint(cluster)}"
        )
    what = f"cluster {cluster['id']}'s login host {login.get('host') or login['public_ip']}"
    host_key = _checked_host_key(cluster, what, login.get("host_key"), cluster.get("status"))
    return Endpoint(str(login["user"]), str(login["public_ip"]), int(login.get("port") or DEFAULT_SSH_PORT),
                    _alias(cluster, "login"), host_key)


def is_worker(node: Mapping[str, Any]) -> bool:
    """A worker of a multi-node cluster (reached through the jumphost); a single node is the login host."""
    return node.get("role") == "worker"


def worker_endpoint(cluster: Mapping[str, Any], node: Mapping[str, Any]) -> Endpoint:
    login = cluster.get("login") or {}
    if not node.get("private_ip"):
        raise click.UsageError(f"node {node['name']} has no address yet (status {node['status']})")
    host_key = _checked_host_key(cluster, f"node {node['name']}", node.get("host_key"), node.get("status"))
    return Endpoint(str(login.get("user") or "ubuntu"), str(node["private_ip"]), DEFAULT_SSH_PORT,
                    _alias(cluster, str(node["name"])), host_key)


def published_endpoints(cluster: Mapping[str, Any]) -> tuple[Endpoint, dict[str, Endpoint], dict[str, str]]:
    """The login host, each worker by name whose key is published, and why the other workers are left out."""
    login = login_endpoint(cluster)
    workers: dict[str, Endpoint] = {}
    missing: dict[str, str] = {}
    for node in cluster.get("nodes") or []:
        if not is_worker(node):
            continue
        try:
            workers[str(node["name"])] = worker_endpoint(cluster, node)
        except click.UsageError as error:
            missing[str(node["name"])] = error.message
    return login, workers, missing


# ---- the known_hosts file -------------------------------------------------------------------------------

@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold the known_hosts lock: parallel `gpucloud ssh` runs (scripts) each rewrite the file."""
    lock = path.with_name(path.name + ".lock")
    descriptor = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)


def known_hosts_lines(existing: str, cluster_id: str, endpoints: Sequence[Endpoint]) -> str:
    """The file with this cluster's entries replaced by `endpoints` (other clusters' entries kept)."""
    prefix = f"{ALIAS_PREFIX}{cluster_id}."
    kept = [line for line in existing.splitlines() if line.strip() and not line.startswith(prefix)]
    ours = sorted({f"{e.alias} {e.host_key}" for e in endpoints})
    return "".join(f"{line}\n" for line in (*kept, *ours))


def refresh_known_hosts(path: Path, cluster_id: str, endpoints: Sequence[Endpoint]) -> Path:
    """Write the cluster's published host keys into `path` (0600 in a 0700 directory), atomically."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with _locked(path):
        existing = path.read_text() if path.exists() else ""
        content = known_hosts_lines(existing, cluster_id, endpoints)
        if content == existing and (path.stat().st_mode & 0o777) == 0o600:
            return path
        descriptor, temporary = tempfile.mkstemp(prefix=".known_hosts.", dir=path.parent)
        try:
            with os.fdopen(descriptor, "w") as handle:  # mkstemp makes it 0600
                handle.write(content)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    return path


# ---- ssh's command line ---------------------------------------------------------------------------------

def _config_value(value: str) -> str:
    """A value for `-o Key=value` / ssh_config: double-quoted when it has blanks (a path with spaces)."""
    return f'"{value}"' if any(c.isspace() for c in value) else value


def verify_options(known_hosts: Path, endpoint: Endpoint) -> list[str]:
    """Strict checking of the machine's key against the CLI's known_hosts file only."""
    return ["-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={_config_value(str(known_hosts))}",
            "-o", f"HostKeyAlias={endpoint.alias}"]


def jump_options(options: Sequence[str]) -> list[str]:
    """The identity options among the ssh options given after `--` (up to the remote command), which
    the jump to a worker needs too: -i, -I and `-o` of the identity, agent and batch keys."""
    picked: list[str] = []
    index = 0
    while index < len(options) and options[index].startswith("-") and options[index] != "--":
        token = options[index]
        index += 1
        for position, letter in enumerate(token[1:], start=1):
            if letter not in _OPTIONS_WITH_ARGUMENT:
                continue
            value = token[position + 1:]
            if not value and index < len(options):
                value, index = options[index], index + 1
            key = value.split("=", 1)[0].split()[0].lower() if letter == "o" and value.strip() else ""
            if letter in "iI" or key in _JUMP_OPTION_KEYS:
                picked += [f"-{letter}", value]
            break  # the rest of the token was the argument
    return picked


def _proxy_argument(value: str) -> str:
    """ssh expands %-tokens in a ProxyCommand: a literal % (in a key's path) is written %%."""
    return value.replace("%", "%%")


def proxy_command(known_hosts: Path, login: Endpoint, identity: Sequence[str]) -> str:
    """The command that carries the connection to a worker through the login host (shell-quoted)."""
    argv = ["ssh", *identity, *verify_options(known_hosts, login), "-p", str(login.port), "-W", "%h:%p",
            login.destination]
    return " ".join(arg if arg == "%h:%p" else shlex.quote(_proxy_argument(arg)) for arg in argv)


def ssh_argv_for_cluster(known_hosts: Path, login: Endpoint) -> list[str]:
    return ["ssh", *verify_options(known_hosts, login), "-p", str(login.port), login.destination]


def ssh_argv_for_worker(known_hosts: Path, login: Endpoint, worker: Endpoint,
                        options: Sequence[str]) -> list[str]:
    proxy = proxy_command(known_hosts, login, jump_options(options))
    return ["ssh", *verify_options(known_hosts, worker), "-o", f"ProxyCommand={proxy}",
            "-p", str(worker.port), worker.destination]


# ---- ssh_config for plain ssh, scp and rsync ------------------------------------------------------------

def identity_config(options: Sequence[str]) -> list[str]:
    """ssh_config lines for the identity options given after `--` (`-i KEY` is `IdentityFile KEY`)."""
    picked = jump_options(options)
    lines = []
    for flag, value in zip(picked[::2], picked[1::2], strict=True):
        if flag == "-i":
            lines.append(f"IdentityFile {_config_value(str(Path(value).expanduser().absolute()))}")
        elif flag == "-I":
            lines.append(f"PKCS11Provider {_config_value(value)}")
        else:
            key, _, rest = value.partition("=")
            lines.append(f"{key.strip()} {rest.strip()}" if rest else value)
    return lines


def ssh_config(cluster: Mapping[str, Any], known_hosts: Path, login: Endpoint,
               workers: Mapping[str, Endpoint], missing: Mapping[str, str],
               identity: Sequence[str] = ()) -> str:
    """An ssh_config block: a Host for the login host and one per worker (ProxyJump through it)."""
    login_name = str((cluster.get("login") or {}).get("host") or f"{cluster['name']}-login")
    common = ["StrictHostKeyChecking yes", f"UserKnownHostsFile {_config_value(str(known_hosts))}", *identity]
    out = [f"# gpucloud cluster {cluster['name']} ({cluster['id']}): `ssh -F THIS_FILE {login_name}`,",
           f"# scp/rsync -e 'ssh -F THIS_FILE'. Host keys as the API published them, in {known_hosts};",
           f"# `gpucloud ssh --print-config {cluster['id']}` again after nodes change.", ""]

    def host(name: str, endpoint: Endpoint, *extra: str) -> None:
        lines = [f"HostName {endpoint.address}", f"Port {endpoint.port}", f"User {endpoint.user}", *extra,
                 f"HostKeyAlias {endpoint.alias}", *common]
        out.extend([f"Host {name}", *(f"  {line}" for line in lines), ""])

    host(login_name, login)
    for name, worker in workers.items():
        host(name, worker, f"ProxyJump {login_name}")
    for name, why in missing.items():
        out.append(f"# {name} is left out: {why}")
    return "\n".join(out).rstrip("\n") + "\n"


# ---- the command ----------------------------------------------------------------------------------------

def find_target(client: GpuCloudClient, ref: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The cluster (id or name) or the node (name or instance id) `ref` names, with its cluster."""
    if ref.startswith("cls_"):
        return client.get_cluster(ref), None
    clusters = client.list_clusters()
    named = [c for c in clusters if c["name"] == ref]
    if len(named) == 1:
        return named[0], None
    if len(named) > 1:
        ids = ", ".join(c["id"] for c in named)
        raise click.UsageError(f"{len(named)} clusters are named {ref!r} ({ids}): use the id")
    for cluster in clusters:
        for node in cluster.get("nodes") or []:
            if ref in (node.get("name"), node.get("instance_id")):
                return cluster, node
    raise click.UsageError(f"no cluster or node named {ref!r}; see `gpucloud cluster list`")


def connect_argv(cluster: Mapping[str, Any], node: Mapping[str, Any] | None, options: Sequence[str],
                 known_hosts: Path) -> list[str]:
    """ssh's full argv for the target, after writing the cluster's published keys into `known_hosts`
    (all of them: a config printed by --print-config keeps working)."""
    login, workers, _ = published_endpoints(cluster)
    worker = worker_endpoint(cluster, node) if node is not None and is_worker(node) else None
    refresh_known_hosts(known_hosts, str(cluster["id"]), [login, *workers.values()])
    if worker is None:
        return [*ssh_argv_for_cluster(known_hosts, login), *options]
    return [*ssh_argv_for_worker(known_hosts, login, worker, options), *options]


@click.command("ssh", context_settings={"ignore_unknown_options": True})
@click.argument("target", metavar="CLUSTER_OR_NODE", shell_complete=complete_cluster_or_node)
@click.argument("ssh_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--dry-run", is_flag=True,
              help="Print the ssh command instead of running it (the known_hosts file it names is written).")
@click.option("--print-config", is_flag=True,
              help="Print an ssh_config block for the cluster (login host and every node) for plain "
              "ssh, scp and rsync (`ssh -F FILE NODE`), and refresh the known_hosts file it uses.")
@pass_app
def ssh(app: App, target: str, ssh_args: tuple[str, ...], dry_run: bool, print_config: bool) -> None:
    """Open an SSH session on a cluster's login host or on one node, verifying its host key.

    Arguments after CLUSTER_OR_NODE go to ssh (options such as -i KEY, then a remote command, whose exit
    status becomes gpucloud's). Identity options (-i, -o IdentityFile=...) apply to the jump through the
    login host as well. Host keys come from the API and are kept in known_hosts next to the config file
    ($XDG_CONFIG_HOME/gpucloud/known_hosts); ssh checks them strictly.

    \b
    Examples:
      gpucloud ssh train            # the login host (jumphost or single node)
      gpucloud ssh train-1          # a worker, through the jumphost
      gpucloud ssh train-1 -- -i ~/.ssh/id_ed25519 nvidia-smi
      gpucloud ssh --print-config train > train.ssh_config && scp -F train.ssh_config f train-1:
    """
    cluster, node = find_target(app.client, target)
    options = list(ssh_args[1:]) if ssh_args[:1] == ("--",) else list(ssh_args)
    known_hosts = known_hosts_path()
    if print_config:
        login, workers, missing = published_endpoints(cluster)
        refresh_known_hosts(known_hosts, str(cluster["id"]), [login, *workers.values()])
        config = ssh_config(cluster, known_hosts, login, workers, missing, identity_config(options))
        click.echo(config, nl=False)
        for name, why in missing.items():
            click.echo(f"{name} is left out: {why}", err=True)
        return
    argv = connect_argv(cluster, node, options, known_hosts)
    if dry_run:
        click.echo(shlex.join(argv))
        return
    program = shutil.which("ssh")
    if program is None:
        raise click.UsageError("ssh is not installed (the OpenSSH client); `--dry-run` prints the command")
    app.close()
    os.execv(program, argv)
