"""`gpucloud`: the root command, `login`, `completion`, and the one place errors become exit codes.

Exit codes: 0 ok; 1 an API or usage error (one line on stderr with the API's message and request id);
130 when Ctrl-C ends a wait or a prompt (the operation itself goes on in the cloud).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import click

from provider.cli.app import CLI_MAX_RETRIES, App, cli_version, find_ssh_key, json_option, pass_app
from provider.cli.budgets import budget
from provider.cli.catalog import balance, estimate, instance_types, regions, usage, volume
from provider.cli.clusters import cluster
from provider.cli.config import ConfigError, config_path, read_config, ssh_key_ids_saved_for, write_config
from provider.cli.host_pools import host_pool
from provider.cli.keys import register_key_file, ssh_key
from provider.cli.nodes import node, nodes
from provider.cli.output import note, print_json
from provider.cli.quotas import quota
from provider.cli.reservations import reservation
from provider.cli.reserved_ips import reserved_ip
from provider.cli.security_groups import security_group
from provider.cli.ssh import ssh
from provider.cli.wait import INTERRUPTED
from provider.cli.workload import jobs, logs
from provider.client import DEFAULT_ENDPOINT, ApiError, ClientError, GpuCloudClient, TransportError

PROG = "gpucloud"
COMPLETE_VAR = "_GPUCLOUD_COMPLETE"


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(cli_version(), prog_name=PROG)
def cli() -> None:
    """gpucloud: GPU clusters from the command line, on the same API as the Terraform provider.

    Credentials come from GPUCLOUD_ENDPOINT and GPUCLOUD_API_KEY, else from `gpucloud login`.

    \b
    Example:
      gpucloud login
      gpucloud cluster create 8xH100 -n 2 -i ~/.ssh/id_ed25519.pub
      gpucloud cluster list
      gpucloud nodes CLUSTER
    """


@cli.command()
@click.option(
    "--endpoint", help=f"API URL (default: GPUCLOUD_ENDPOINT, the saved one, then {DEFAULT_ENDPOINT})."
)
@click.option(
    "--ssh-key", "ssh_keys", multiple=True, metavar="FILE_OR_KEY",
    help="The SSH key `cluster create` installs when given none: a public key file (registered if new) or "
    "a registered key's id or name (repeatable; default: keep the saved ones when the key is unchanged).",
)
@json_option
@pass_app
def login(app: App, endpoint: str | None, ssh_keys: tuple[str, ...], as_json: bool) -> None:
    """Check an API key against the API and save it with the endpoint (file mode 0600), and the SSH keys
    new clusters get by default.

    The key is read from GPUCLOUD_API_KEY, else asked for (hidden; read from stdin when piped).

    \b
    Example:
      gpucloud login --endpoint https://api.gpucloud.example --ssh-key ~/.ssh/id_ed25519.pub
    """
    try:
        saved = read_config()
    except ConfigError:
        saved = {}
    endpoint = (endpoint or os.environ.get("GPUCLOUD_ENDPOINT") or saved.get("endpoint") or DEFAULT_ENDPOINT)
    endpoint = endpoint.rstrip("/")
    api_key = os.environ.get("GPUCLOUD_API_KEY") or _read_api_key()
    try:
        client = GpuCloudClient(
            endpoint, api_key, max_retries=CLI_MAX_RETRIES, user_agent=f"gpucloud-cli/{cli_version()}"
        )
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--endpoint") from None
    with client:
        client.verify_credentials()
        key_ids = [_key_id(client, ref) for ref in ssh_keys] or _kept_key_ids(endpoint, api_key)
    path = write_config(endpoint, api_key, ssh_key_ids=key_ids)
    if as_json:
        print_json({"endpoint": endpoint, "config": str(path), "ssh_key_ids": key_ids})
    else:
        keys = f"; new clusters get the SSH keys {', '.join(key_ids)}" if key_ids else ""
        note(f"Logged in to {endpoint}; saved to {path} (mode 0600){keys}.")


def _key_id(client: GpuCloudClient, ref: str) -> str:
    """A public key file registers (or finds) its key; anything else names a registered key."""
    if Path(ref).expanduser().is_file():
        return register_key_file(client, ref)
    return str(find_ssh_key(client, ref)["id"])


def _kept_key_ids(endpoint: str, api_key: str) -> list[str]:
    """The saved default keys, kept by a login to the same endpoint with the same key (same project)."""
    try:
        return ssh_key_ids_saved_for(endpoint, api_key)
    except ConfigError:
        return []


def _read_api_key() -> str:
    """Asked for on a terminal (not echoed); the first line of stdin when piped (`... | gpucloud login`)."""
    if sys.stdin.isatty():
        key = str(click.prompt("API key", hide_input=True, err=True))
    else:
        key = sys.stdin.readline()
    if not key.strip():
        raise click.UsageError("no API key given: type it at the prompt, pipe it in or set GPUCLOUD_API_KEY")
    return key.strip()


@cli.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script for SHELL.

    \b
    Example:
      eval "$(gpucloud completion bash)"        # in ~/.bashrc
      gpucloud completion fish > ~/.config/fish/completions/gpucloud.fish
    """
    from click.shell_completion import get_completion_class

    completer = get_completion_class(shell)
    assert completer is not None  # the choice lists only shells Click supports
    click.echo(completer(cli, {}, PROG, COMPLETE_VAR).source())


COMMANDS = (cluster, ssh, jobs, nodes, node, logs, volume, ssh_key, security_group, reserved_ip, reservation,
            host_pool, budget, quota, usage, balance, regions, instance_types, estimate)
for command in COMMANDS:
    cli.add_command(command)


def error_line(error: ApiError) -> str:
    """One line: the API's message, the field to blame and the request id to quote to support."""
    if isinstance(error, TransportError):
        return f"{error.detail}; check GPUCLOUD_ENDPOINT or `gpucloud login` ({config_path()})"
    text = error.detail or error.title or error.code
    parts = [f"{text} ({error.code}, HTTP {error.status})"]
    if error.field:
        parts.append(f"field {error.field}")
    for item in error.errors[1:]:  # the first 422 field error is the detail already
        field = item.get("field") or item.get("loc") or "?"
        parts.append(f"{field}: {item.get('message') or item.get('msg')}")
    if error.request_id:
        parts.append(f"request id {error.request_id}")
    return "; ".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    # Ctrl-C (SIGINT) ends a command even when we were started with SIGINT ignored, as a shell does for
    # a background job: `logs -f` would otherwise wait for the server forever.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        result = cli.main(args=argv, prog_name=PROG, standalone_mode=False, complete_var=COMPLETE_VAR)
    except click.exceptions.Exit as done:
        return done.exit_code
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("\ninterrupted", err=True)
        return INTERRUPTED
    except click.UsageError as error:
        hint = error.ctx is not None and "`gpucloud" not in error.format_message()
        where = f" (see `{error.ctx.command_path} --help`)" if hint and error.ctx is not None else ""
        click.echo(f"error: {error.format_message()}{where}", err=True)
        return 1
    except click.ClickException as error:
        click.echo(f"error: {error.format_message()}", err=True)
        return 1
    except ApiError as error:
        click.echo(f"error: {error_line(error)}", err=True)
        return 1
    except ClientError as error:
        click.echo(f"error: {error}", err=True)
        return 1
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
