"""`gpucloud ssh`: exec the system ssh to a cluster's login host, or to one node (workers of a
multi-node cluster are reached with -J through the jumphost, which is the login host)."""

from __future__ import annotations

import os
import shlex
import shutil
from typing import Any

import click

from provider.cli.app import App, pass_app
from provider.client import GpuCloudClient

DEFAULT_SSH_PORT = 22


def _login(cluster: dict[str, Any]) -> tuple[str, str, int]:
    login = cluster.get("login")
    if not login or not login.get("public_ip"):
        raise click.UsageError(
            f"cluster {cluster['id']} has no login host yet (status {cluster['status']}); "
            f"wait with `gpucloud cluster info {cluster['id']} --wait`"
        )
    return str(login["user"]), str(login["public_ip"]), int(login.get("port") or DEFAULT_SSH_PORT)


def ssh_argv_for_cluster(cluster: dict[str, Any]) -> list[str]:
    user, host, port = _login(cluster)
    return ["ssh", "-p", str(port), f"{user}@{host}"]


def ssh_argv_for_node(cluster: dict[str, Any], node: dict[str, Any]) -> list[str]:
    if node.get("role") != "worker":  # a single-node cluster: the node is the login host
        return ssh_argv_for_cluster(cluster)
    user, host, port = _login(cluster)
    if not node.get("private_ip"):
        raise click.UsageError(f"node {node['name']} has no address yet (status {node['status']})")
    return ["ssh", "-J", f"{user}@{host}:{port}", "-p", str(DEFAULT_SSH_PORT), f"{user}@{node['private_ip']}"]


def resolve_target(client: GpuCloudClient, ref: str) -> list[str]:
    """ssh's argv for a cluster (id or name) or a node (name or instance id)."""
    if ref.startswith("cls_"):
        return ssh_argv_for_cluster(client.get_cluster(ref))
    clusters = client.list_clusters()
    named = [c for c in clusters if c["name"] == ref]
    if len(named) == 1:
        return ssh_argv_for_cluster(named[0])
    if len(named) > 1:
        ids = ", ".join(c["id"] for c in named)
        raise click.UsageError(f"{len(named)} clusters are named {ref!r} ({ids}): use the id")
    for c in clusters:
        for node in c.get("nodes") or []:
            if ref in (node.get("name"), node.get("instance_id")):
                return ssh_argv_for_node(c, node)
    raise click.UsageError(f"no cluster or node named {ref!r}; see `gpucloud cluster list`")


@click.command("ssh", context_settings={"ignore_unknown_options": True})
@click.argument("target", metavar="CLUSTER_OR_NODE")
@click.argument("ssh_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--dry-run", is_flag=True, help="Print the ssh command instead of running it.")
@pass_app
def ssh(app: App, target: str, ssh_args: tuple[str, ...], dry_run: bool) -> None:
    """Open an SSH session on a cluster's login host or on one node.

    Arguments after CLUSTER_OR_NODE go to ssh (a remote command, or options such as -i).

    \b
    Examples:
      gpucloud ssh train            # the login host (jumphost or single node)
      gpucloud ssh train-1          # a worker, through the jumphost
      gpucloud ssh train -- nvidia-smi
    """
    argv = resolve_target(app.client, target)
    destination = argv.pop()
    options = list(ssh_args[1:]) if ssh_args[:1] == ("--",) else list(ssh_args)
    argv = [*argv, destination, *options]
    if dry_run:
        click.echo(shlex.join(argv))
        return
    program = shutil.which("ssh")
    if program is None:
        raise click.UsageError("ssh is not installed (the OpenSSH client); `--dry-run` prints the command")
    app.close()
    os.execv(program, argv)
