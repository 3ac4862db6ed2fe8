"""`gpucloud host-pool list|show|create|update|add-host|remove-host|probe|delete`: the project's own Linux
servers, reached by the backend over SSH with the pool's key, checked and inventoried per host.

The private key is read from `--key-file` and sent once; it is never printed (the API never returns it).
Host lists are changed with PATCH of the whole list under If-Match, so two people editing one pool at
once get the API's 412 instead of one silently undoing the other.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from provider.cli.app import (
    App,
    confirm,
    json_option,
    name_completer,
    one_named,
    parse_labels,
    pass_app,
    yes_option,
)
from provider.cli.output import emit, note, print_fields, print_json, print_table, table_view
from provider.client import GpuCloudClient, WaitTimeout, new_idempotency_key, wait_for
from provider.client.collections import Collection
from provider.client.http import ApiResponse

POOL_ID_PREFIX = "hpl_"
PROBE_WAIT_SECONDS = 300  # a check gives up on an unanswering host well within this
PROBE_POLL_SECONDS = 2.0
# The waiting's clock and pause, looked up at each call (tests replace them).
wait_clock = time.monotonic
wait_sleep = time.sleep


def host_pools(client: GpuCloudClient) -> Collection:
    return Collection(client, "/v1/host-pools")


def body_of(response: ApiResponse) -> dict[str, Any]:
    if not isinstance(response.body, dict):
        raise click.ClickException("the API answered without the expected host pool object")
    return response.body


def find_host_pool(client: GpuCloudClient, ref: str) -> dict[str, Any]:
    """A host pool by id (hpl_...) or by name."""
    if ref.startswith(POOL_ID_PREFIX):
        return body_of(host_pools(client).get(ref))
    found = list(host_pools(client).items(name=ref))
    return one_named(found, "host pool", ref, "host-pool list")


def read_host_pool(client: GpuCloudClient, ref: str) -> tuple[dict[str, Any], str | None]:
    """The pool and its ETag (for If-Match): found by name first when `ref` is not an id."""
    pool_id = ref if ref.startswith(POOL_ID_PREFIX) else str(find_host_pool(client, ref)["id"])
    response = host_pools(client).get(pool_id)
    return body_of(response), response.etag


complete_host_pool = name_completer(lambda client, _: (str(p["name"]) for p in host_pools(client).items()))


# ---- hosts as typed: ADDR[:PORT] ----------------------------------------------------------------------


def parse_host(text: str, option: str) -> tuple[str, int | None]:
    """`10.0.0.5`, `gpu-a:2222`, `[fd00::5]:2222` or a bare IPv6 address -> (address, port or None)."""
    address, port = _split_host(text.strip())
    if not address:
        raise click.BadParameter(f"{text!r} names no host: give ADDR or ADDR:PORT", param_hint=option)
    if port is None:
        return address, None
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise click.BadParameter(f"port {port!r} in {text!r} is not 1..65535", param_hint=option)
    return address, int(port)


def _split_host(text: str) -> tuple[str, str | None]:
    if text.startswith("["):  # [IPv6]:PORT
        address, _, rest = text[1:].partition("]")
        return address, rest[1:] if rest.startswith(":") else None
    if text.count(":") > 1:  # a bare IPv6 address has no port
        return text, None
    address, sep, port = text.partition(":")
    return address, port if sep else None


def host_label(address: str, port: int | None) -> str:
    """How a host is named in messages: `10.0.0.5:22`, `[fd00::5]:22`."""
    if port is None:
        return address
    try:
        is_v6 = ipaddress.ip_address(address).version == 6
    except ValueError:
        is_v6 = False
    return f"[{address}]:{port}" if is_v6 else f"{address}:{port}"


def kept_host(pool: Mapping[str, Any], host: Mapping[str, Any]) -> dict[str, Any]:
    """A host of the pool as the PATCH list carries it: a port equal to the pool's default is sent as null
    (the host follows the pool's `ssh_port`), and its recorded key stays required."""
    port = host.get("port")
    return {
        "address": host["address"],
        "port": None if port == pool.get("ssh_port") else port,
        "host_key": host.get("host_key"),
    }


def matching_hosts(pool: Mapping[str, Any], address: str, port: int | None) -> list[dict[str, Any]]:
    """The pool's hosts at `address` (and `port`, the effective one, when given)."""
    hosts: list[dict[str, Any]] = pool.get("hosts") or []
    same = address.lower()  # DNS names are case-insensitive, as the API compares them
    return [h for h in hosts if h["address"].lower() == same and (port is None or h.get("port") == port)]


def effective_port(pool: Mapping[str, Any], port: int | None) -> int | None:
    return port if port is not None else pool.get("ssh_port")


# ---- the private key --------------------------------------------------------------------------------


def read_private_key(path: str, option: str = "--key-file") -> str:
    """The private key file's text; never echoed. A public key (`.pub`) is refused with the fix."""
    text = Path(path).expanduser().read_text(encoding="utf-8", errors="replace")
    if "PRIVATE KEY-----" not in text:
        public = text.startswith(("ssh-", "ecdsa-"))
        hint = " (this looks like a public key: give the file without .pub)" if public else ""
        message = f"{path} is not an OpenSSH or PEM private key{hint}; the backend logs in with it"
        raise click.BadParameter(message, param_hint=option)
    return text if text.endswith("\n") else text + "\n"


# ---- how pools are shown ----------------------------------------------------------------------------


def hosts_summary(pool: Mapping[str, Any]) -> str:
    total = len(pool.get("hosts") or [])
    return f"{pool.get('ready_hosts', 0)}/{total}"


def labels_text(labels: Mapping[str, str] | None) -> str:
    return ",".join(f"{k}={v}" for k, v in (labels or {}).items())


POOL_COLUMNS = [
    ("ID", lambda p: p["id"]),
    ("NAME", lambda p: p.get("name")),
    ("REGION", lambda p: p.get("region")),
    ("STATUS", lambda p: p.get("status")),
    ("READY/HOSTS", hosts_summary),
    ("FREE", lambda p: p.get("free_hosts")),
    ("USER", lambda p: p.get("ssh_user")),
    ("LABELS", lambda p: labels_text(p.get("labels"))),
]


def gpus_text(inventory: Mapping[str, Any] | None) -> str | None:
    """`8xNVIDIA-H200` (one word, so plain output stays one column per field), `0` without GPUs."""
    if not inventory:
        return None
    count = inventory.get("gpu_count") or 0
    model = inventory.get("gpu_model")
    return f"{count}x{model.replace(' ', '-')}" if count and model else str(count)


def memory_text(inventory: Mapping[str, Any] | None) -> str | None:
    mib = (inventory or {}).get("memory_mib")
    return None if mib is None else f"{mib / 1024:.0f}GiB"


HOST_COLUMNS = [
    ("ADDRESS", lambda h: h["address"]),
    ("PORT", lambda h: h.get("port")),
    ("STATUS", lambda h: h.get("status")),
    ("REASON", lambda h: h.get("reason_code")),
    ("GPUS", lambda h: gpus_text(h.get("inventory"))),
    ("CPUS", lambda h: (h.get("inventory") or {}).get("cpu_count")),
    ("MEMORY", lambda h: memory_text(h.get("inventory"))),
    ("INTERCONNECT", lambda h: (h.get("inventory") or {}).get("interconnect")),
    ("ACCOUNTING", lambda h: None if not h.get("inventory") else ("yes" if h["inventory"].get("accounting")
                                                                   else "no")),
    # How a cluster's daemons run there: systemd units (`systemd`) or detached processes (`none`).
    ("INIT", lambda h: (h.get("inventory") or {}).get("init")),
    ("CLUSTER", lambda h: h.get("cluster_id")),
    ("NODE", lambda h: h.get("node")),
]


def show_pool(pool: Mapping[str, Any]) -> None:
    """The pool's fields, its hosts as a table, then each host's reason sentence (cause and fix)."""
    ssh = f"{pool.get('ssh_user')}@HOST port {pool.get('ssh_port')}"
    print_fields([
        ("ID", pool["id"]), ("Name", pool.get("name")), ("Status", pool.get("status")),
        ("Region", pool.get("region")),
        ("Hosts", f"{hosts_summary(pool)} ready, {pool.get('free_hosts', 0)} free"),
        ("SSH", ssh), ("Proxy jump", pool.get("proxy_jump")),
        ("Key", pool.get("ssh_key_fingerprint")), ("Public key", pool.get("ssh_public_key")),
        ("Shared storage", pool.get("shared_storage_path")),
        ("Install packages", pool.get("install_packages")),
        ("Labels", labels_text(pool.get("labels"))), ("Created", pool.get("created_at")),
    ])
    hosts = pool.get("hosts") or []
    click.echo()
    print_table(HOST_COLUMNS, hosts, empty="No hosts.")
    reasons = [(h, h["reason"]) for h in hosts if h.get("reason")]
    if reasons:
        click.echo()
        for host, reason in reasons:
            click.echo(f"{host_label(host['address'], host.get('port'))}: {reason}")


def say_authorized_key(pool: Mapping[str, Any]) -> None:
    """What the person does next: put the pool's public key on every host."""
    user = pool.get("ssh_user") or "root"
    note(f"On every host, append the pool's public key to ~{user}/.ssh/authorized_keys:")
    note(f"  {pool.get('ssh_public_key')}")
    note(f"then run: gpucloud host-pool probe {pool.get('name') or pool['id']} --wait")


# ---- commands -----------------------------------------------------------------------------------------


label_option = click.option("--label", "labels", multiple=True, metavar="KEY=VALUE",
                            help="A label (repeatable; replaces all labels on update).")
pool_argument = click.argument("pool_ref", metavar="POOL", shell_complete=complete_host_pool)


@click.group("host-pool")
def host_pool() -> None:
    """Manage host pools: your own Linux servers, reached by the backend over SSH, each checked
    (login, sudo, OS, packages, clock) and inventoried (GPUs, CPUs, memory, interconnect).

    \b
    Example:
      gpucloud host-pool create lab --region on-prem-berlin --key-file ~/.ssh/gpucloud_pool \\
          --host 10.0.0.5 --host 10.0.0.6:2222
      gpucloud host-pool probe lab --wait
    """


@host_pool.command("list")
@json_option
@pass_app
def list_pools(app: App, as_json: bool) -> None:
    """List the project's host pools with how many hosts are ready.

    \b
    Example:
      gpucloud host-pool list
    """
    empty = "No host pools: gpucloud host-pool create --help"
    emit(list(host_pools(app.client).items()), as_json, table_view(POOL_COLUMNS, empty=empty))


@host_pool.command("show")
@pool_argument
@json_option
@pass_app
def show(app: App, pool_ref: str, as_json: bool) -> None:
    """Show POOL (id or name): its settings, a table of hosts (status, reason, GPUs, CPUs, memory) and
    each host's reason in full.

    \b
    Example:
      gpucloud host-pool show lab
    """
    emit(find_host_pool(app.client, pool_ref), as_json, show_pool)


@host_pool.command("create")
@click.argument("name")
@click.option("--region", required=True, help="Where the servers are: a name of yours, e.g. on-prem-berlin.")
@click.option("--key-file", required=True, type=click.Path(exists=True, dir_okay=False),
              help="The unencrypted private key (ed25519, ecdsa or rsa>=2048) the backend logs in with; "
              "read from the file, never printed.")
@click.option("--host", "hosts", multiple=True, required=True, metavar="ADDR[:PORT]",
              help="A server: IP address or DNS name, optional port (repeatable, 1 to 64).")
@click.option("--ssh-user", help="The login user (default root; another user needs passwordless sudo).")
@click.option("--ssh-port", type=click.IntRange(1, 65535), help="The SSH port of hosts that name none "
              "(default 22).")
@click.option("--proxy-jump", metavar="[USER@]HOST[:PORT]", help="A bastion reached with the same key.")
@label_option
@click.option("--shared-storage-path", metavar="PATH",
              help="An absolute path mounted on every host (NFS, Lustre): volumes live there.")
@click.option("--install-packages", is_flag=True,
              help="Install missing Slurm and munge packages (slurmdbd and mariadb-server for accounting) "
                   "with the hosts' apt-get or dnf.")
@json_option
@pass_app
def create(
    app: App, name: str, region: str, key_file: str, hosts: tuple[str, ...], ssh_user: str | None,
    ssh_port: int | None, proxy_jump: str | None, labels: tuple[str, ...], shared_storage_path: str | None,
    install_packages: bool, as_json: bool,
) -> None:
    """Create a host pool NAME of your servers, then print the public key to put in each host's
    authorized_keys. Hosts are checked within seconds and every 5 minutes.

    \b
    Example:
      gpucloud host-pool create lab --region on-prem-berlin --key-file ~/.ssh/gpucloud_pool \\
          --host 10.0.0.5 --host gpu-b.lab:2222 --ssh-user ubuntu --label team=nlp
    """
    body: dict[str, Any] = {
        "name": name, "region": region, "ssh_private_key": read_private_key(key_file),
        "hosts": [new_host(text, "--host") for text in hosts],
        "labels": parse_labels(labels, "--label"), "install_packages": install_packages,
    }
    optional = {"ssh_user": ssh_user, "ssh_port": ssh_port, "proxy_jump": proxy_jump,
                "shared_storage_path": shared_storage_path}
    body.update({key: value for key, value in optional.items() if value is not None})
    pool = body_of(host_pools(app.client).create(body, idempotency_key=new_idempotency_key()))
    if as_json:
        print_json(pool)
        return
    show_pool(pool)
    say_authorized_key(pool)


def new_host(text: str, option: str, host_key: str | None = None) -> dict[str, Any]:
    address, port = parse_host(text, option)
    return {"address": address, "port": port, "host_key": host_key}


@host_pool.command("update")
@pool_argument
@click.option("--name", help="New display name.")
@label_option
@click.option("--ssh-user", help="New login user (re-checks every host).")
@click.option("--ssh-port", type=click.IntRange(1, 65535),
              help="New default SSH port (re-checks every host).")
@click.option("--key-file", type=click.Path(exists=True, dir_okay=False),
              help="A new private key (re-checks every host; put its public half on the hosts first).")
@click.option("--proxy-jump", metavar="[USER@]HOST[:PORT]", help="New bastion; '' for none.")
@click.option("--shared-storage-path", metavar="PATH", help="New shared path; '' for none.")
@click.option("--install-packages/--no-install-packages", default=None,
              help="Whether missing Slurm, munge and accounting packages are installed.")
@json_option
@pass_app
def update(
    app: App, pool_ref: str, name: str | None, labels: tuple[str, ...], ssh_user: str | None,
    ssh_port: int | None, key_file: str | None, proxy_jump: str | None, shared_storage_path: str | None,
    install_packages: bool | None, as_json: bool,
) -> None:
    """Change POOL's settings; a change of how to connect (user, port, key, proxy jump, package
    installs) checks every host again.

    \b
    Example:
      gpucloud host-pool update lab --key-file ~/.ssh/gpucloud_pool_2026 --ssh-user ubuntu
    """
    changes: dict[str, Any] = {
        key: value for key, value in {
            "name": name, "ssh_user": ssh_user, "ssh_port": ssh_port, "install_packages": install_packages,
        }.items() if value is not None
    }
    for key, value in (("proxy_jump", proxy_jump), ("shared_storage_path", shared_storage_path)):
        if value is not None:
            changes[key] = value or None  # '' clears it
    if labels:
        changes["labels"] = parse_labels(labels, "--label")
    if key_file is not None:
        changes["ssh_private_key"] = read_private_key(key_file)
    if not changes:
        raise click.UsageError("nothing to change: give an option (see --help)")
    pool, etag = read_host_pool(app.client, pool_ref)
    emit(patch_pool(app.client, pool, changes, etag), as_json, show_pool)


def patch_pool(
    client: GpuCloudClient, pool: Mapping[str, Any], changes: Mapping[str, Any], etag: str | None
) -> dict[str, Any]:
    return body_of(host_pools(client).update(str(pool["id"]), changes, if_match=etag))


@host_pool.command("add-host")
@pool_argument
@click.argument("host", metavar="ADDR[:PORT]")
@click.option("--host-key", metavar="KEY", help="Pin the host's key ('ssh-ed25519 AAAA...'); default: the "
              "first key seen is recorded and required after.")
@json_option
@pass_app
def add_host(app: App, pool_ref: str, host: str, host_key: str | None, as_json: bool) -> None:
    """Add a server to POOL; it is checked within seconds (its hosts list is replaced under If-Match).

    \b
    Example:
      gpucloud host-pool add-host lab 10.0.0.7
    """
    pool, etag = read_host_pool(app.client, pool_ref)
    added = new_host(host, "ADDR[:PORT]", host_key)
    port = effective_port(pool, added["port"])
    if matching_hosts(pool, added["address"], port):
        raise click.UsageError(f"host pool {pool['name']} already has {host_label(added['address'], port)}")
    hosts = [kept_host(pool, h) for h in pool.get("hosts") or []] + [added]
    changed = patch_pool(app.client, pool, {"hosts": hosts}, etag)
    emit(changed, as_json, lambda _: note(f"Added {host_label(added['address'], port)} to {pool['name']} "
                                          f"({pool['id']}); see `gpucloud host-pool show {pool['name']}`."))


@host_pool.command("remove-host")
@pool_argument
@click.argument("host", metavar="ADDR[:PORT]")
@json_option
@pass_app
def remove_host(app: App, pool_ref: str, host: str, as_json: bool) -> None:
    """Take a server out of POOL (refused while a cluster uses it; a pool keeps at least one host).

    \b
    Example:
      gpucloud host-pool remove-host lab 10.0.0.6:2222
    """
    pool, etag = read_host_pool(app.client, pool_ref)
    removed = one_host(pool, *parse_host(host, "ADDR[:PORT]"))
    hosts = [kept_host(pool, h) for h in pool.get("hosts") or [] if h is not removed]
    if not hosts:
        raise click.UsageError(f"{host} is the last host of {pool['name']}: delete the pool instead "
                               f"(`gpucloud host-pool delete {pool['name']}`)")
    changed = patch_pool(app.client, pool, {"hosts": hosts}, etag)
    label = host_label(removed["address"], removed.get("port"))
    emit(changed, as_json, lambda _: note(f"Removed {label} from {pool['name']} ({pool['id']})."))


def one_host(pool: Mapping[str, Any], address: str, port: int | None) -> dict[str, Any]:
    """The one host of the pool that ADDR[:PORT] names; a usage error listing the hosts otherwise."""
    found = matching_hosts(pool, address, port)
    if len(found) == 1:
        return found[0]
    listed = ", ".join(host_label(h["address"], h.get("port")) for h in pool.get("hosts") or [])
    if not found:
        raise click.UsageError(f"host pool {pool['name']} has no host {host_label(address, port)} "
                               f"(its hosts: {listed})")
    raise click.UsageError(f"{address} is in {pool['name']} on several ports ({listed}): give ADDR:PORT")


@host_pool.command("probe")
@pool_argument
@click.option("--wait", is_flag=True, help="Wait until no host is pending, then show the pool.")
@click.option("--timeout", type=click.IntRange(1), default=PROBE_WAIT_SECONDS, show_default=True,
              help="Seconds --wait waits at most.")
@json_option
@pass_app
def probe(app: App, pool_ref: str, wait: bool, timeout: int, as_json: bool) -> None:
    """Check every host of POOL again now (they turn pending until checked).

    \b
    Example:
      gpucloud host-pool probe lab --wait
    """
    pool = find_host_pool(app.client, pool_ref)
    probe_path = f"{host_pools(app.client).item_path(str(pool['id']))}/probe"
    probed = body_of(app.client.request("POST", probe_path, idempotency_key=new_idempotency_key()))
    if wait:
        probed = wait_for_checks(app.client, probed, timeout)
        emit(probed, as_json, show_pool)
        return
    checking = (f"Checking {len(probed.get('hosts') or [])} hosts of {pool['name']}; "
                f"see `gpucloud host-pool show {pool['name']}`.")
    emit(probed, as_json, lambda _: note(checking))


def pending_count(pool: Mapping[str, Any]) -> int:
    return sum(1 for h in pool.get("hosts") or [] if h.get("status") == "pending")


def wait_for_checks(client: GpuCloudClient, pool: Mapping[str, Any], timeout: int) -> dict[str, Any]:
    """Poll the pool until none of its hosts is pending; a line on stderr each time that count changes."""
    said: list[int] = []

    def progress(current: dict[str, Any], _elapsed: float) -> None:
        pending = pending_count(current)
        if not said or said[-1] != pending:
            note(f"{current['name']}: {current.get('ready_hosts', 0)} ready, {pending} pending "
                 f"of {len(current.get('hosts') or [])} hosts")
            said.append(pending)

    try:
        return wait_for(
            lambda: find_host_pool(client, str(pool["id"])),
            lambda current: pending_count(current) == 0,
            timeout=timeout, interval=PROBE_POLL_SECONDS, max_interval=10.0, on_progress=progress,
            description=f"the checks of host pool {pool['name']}",
            clock=lambda: wait_clock(), sleep=lambda seconds: wait_sleep(seconds),
        )
    except WaitTimeout as error:
        raise click.ClickException(
            f"{error}; the checks go on: see `gpucloud host-pool show {pool['name']}` later"
        ) from None


@host_pool.command("delete")
@pool_argument
@yes_option
@json_option
@pass_app
def delete(app: App, pool_ref: str, yes: bool, as_json: bool) -> None:
    """Delete POOL (refused while a cluster uses it); the servers themselves are left as they are.
    `--json` prints the pool as it was.

    \b
    Example:
      gpucloud host-pool delete lab --yes
    """
    pool = find_host_pool(app.client, pool_ref)
    confirm(yes, f"Delete host pool {pool['name']} ({pool['id']})?", refused="not deleted")
    host_pools(app.client).delete(str(pool["id"]))
    emit(pool, as_json, lambda _: note(f"Deleted host pool {pool['id']} ({pool['name']})."))
