"""`gpucloud ssh-key add/list/delete` (`rm`: a hidden alias kept for scripts), and turning `-i PUBKEY_FILE`
into a registered key id."""

from __future__ import annotations

from pathlib import Path

import click

from provider.cli.app import App, complete_ssh_key, find_ssh_key, json_option, pass_app
from provider.cli.output import emit, note, table_view
from provider.client import Conflict, GpuCloudClient, new_idempotency_key


def read_public_key(path: str) -> str:
    """The key line of an OpenSSH public key file; the API checks what it is."""
    try:
        text = Path(path).expanduser().read_text()
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise click.UsageError(f"cannot read the public key file {path}: {reason}") from None
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    if not lines:
        raise click.UsageError(f"the public key file {path} is empty")
    return lines[0]


def register_key_file(client: GpuCloudClient, path: str, name: str | None = None) -> str:
    """The id of the key in `path`: registered now, or the one the API says already holds it."""
    public_key = read_public_key(path)
    try:
        key = client.create_ssh_key(
            name=name or Path(path).name, public_key=public_key, idempotency_key=new_idempotency_key()
        )
    except Conflict as error:
        existing = error.extra.get("existing_id")
        if error.code == "duplicate_ssh_key" and isinstance(existing, str):
            return existing
        raise
    return str(key["id"])


@click.group("ssh-key")
def ssh_key() -> None:
    """Manage the project's SSH public keys (installed on the nodes of new clusters).

    \b
    Example:
      gpucloud ssh-key add ~/.ssh/id_ed25519.pub
    """


KEY_COLUMNS = [
    ("ID", lambda k: k["id"]),
    ("NAME", lambda k: k["name"]),
    ("TYPE", lambda k: k.get("key_type")),
    ("FINGERPRINT", lambda k: k.get("fingerprint")),
]


@ssh_key.command("add")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--name", help="Display name (default: the file name).")
@json_option
@pass_app
def add_key(app: App, file: str, name: str | None, as_json: bool) -> None:
    """Register the public key in FILE.

    \b
    Example:
      gpucloud ssh-key add ~/.ssh/id_ed25519.pub --name laptop
    """
    public_key = read_public_key(file)
    key = app.client.create_ssh_key(
        name=name or Path(file).name, public_key=public_key, idempotency_key=new_idempotency_key()
    )
    emit(key, as_json, table_view(KEY_COLUMNS))


@ssh_key.command("list")
@json_option
@pass_app
def list_keys(app: App, as_json: bool) -> None:
    """List the project's SSH keys.

    \b
    Example:
      gpucloud ssh-key list
    """
    empty = "No SSH keys yet: gpucloud ssh-key add ~/.ssh/id_ed25519.pub"
    emit(app.client.list_ssh_keys(), as_json, table_view(KEY_COLUMNS, empty=empty))


@ssh_key.command("delete")
@click.argument("key", shell_complete=complete_ssh_key)
@json_option
@pass_app
def delete_key(app: App, key: str, as_json: bool) -> None:
    """Delete the SSH key KEY (id or name). `--json` prints the key as it was.

    \b
    Example:
      gpucloud ssh-key delete laptop
    """
    found = find_ssh_key(app.client, key)
    app.client.delete_ssh_key(found["id"])
    emit(found, as_json, lambda _: note(f"Deleted SSH key {found['id']} ({found['name']})."))


# `ssh-key rm`, its name before every group said `delete`: works as before, left out of help and docs.
ssh_key.add_command(click.Command(
    "rm", callback=delete_key.callback, params=delete_key.params, help=delete_key.help, hidden=True
))
