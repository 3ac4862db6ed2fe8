"""What every command shares: the API client (built on first use from the resolved credentials), the
`--json` option and references by id or name."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterable
from importlib.metadata import PackageNotFoundError, version
from typing import Any, TypeVar

import click
from click.shell_completion import CompletionItem

from provider.cli.config import ConfigError, resolve_credentials
from provider.client import GpuCloudClient

F = TypeVar("F", bound=Callable[..., Any])

# Connection failures are retried with backoff; a CLI answers within seconds when the API is down.
CLI_MAX_RETRIES = 2
# Shell completion runs on every Tab: one try, answered quickly or not at all.
COMPLETION_TIMEOUT_SECONDS = 3.0


def cli_version() -> str:
    try:
        return version("gpucloud")
    except PackageNotFoundError:
        return "0+unknown"


class App:
    """Per-invocation state, kept in Click's context object."""

    def __init__(self) -> None:
        self._client: GpuCloudClient | None = None

    @property
    def client(self) -> GpuCloudClient:
        if self._client is None:
            try:
                credentials = resolve_credentials()
            except ConfigError as error:
                raise click.UsageError(str(error)) from None
            if not credentials.api_key:
                raise click.UsageError("no API key: run `gpucloud login` or set GPUCLOUD_API_KEY")
            self._client = GpuCloudClient(
                credentials.endpoint,
                credentials.api_key,
                max_retries=CLI_MAX_RETRIES,
                user_agent=f"gpucloud-cli/{cli_version()}",
            )
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


def pass_app(function: F) -> F:
    """Inject the invocation's App as the first argument."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        app = ctx.find_object(App)
        if app is None:
            app = ctx.ensure_object(App)
            ctx.call_on_close(app.close)
        return function(app, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print the API's JSON (for scripts) instead of a table."
)


def with_example(summary: str, *examples: str) -> str:
    """Help text for a command built in code: the summary, then its examples, laid out as typed."""
    lines = "\n".join(f"  {example}" for example in examples)
    return f"{summary}\n\n\b\nExample:\n{lines}"


def parse_labels(pairs: tuple[str, ...], option: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint=option)
        labels[key] = value
    return labels


def confirm(yes: bool, question: str, *, refused: str) -> None:
    """A destructive command asks on a terminal; a script must say --yes (no prompt reads its stdin)."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise click.UsageError("no terminal to confirm on: pass --yes to proceed")
    if not click.confirm(question, err=True):
        raise click.ClickException(refused)


yes_option = click.option("--yes", is_flag=True, help="Do not ask for confirmation.")


def name_and_label_changes(name: str | None, labels: tuple[str, ...]) -> dict[str, Any]:
    """The PATCH body of an `update NAME|--name|--label` command; a usage error when it changes nothing."""
    changes: dict[str, Any] = {}
    if name is not None:
        changes["name"] = name
    if labels:
        changes["labels"] = parse_labels(labels, "--label")
    if not changes:
        raise click.UsageError("nothing to change: give --name or --label")
    return changes


def one_named(found: list[dict[str, Any]], kind: str, ref: str, listing: str) -> dict[str, Any]:
    """The one object of `kind` named `ref`, or a usage error pointing at `gpucloud LISTING`."""
    if len(found) == 1:
        return found[0]
    if not found:
        raise click.UsageError(f"no {kind} named {ref!r}; see `gpucloud {listing}`")
    ids = ", ".join(str(item["id"]) for item in found)
    raise click.UsageError(f"{len(found)} {kind}s are named {ref!r} ({ids}): use the id")


def find_cluster(client: GpuCloudClient, ref: str) -> dict[str, Any]:
    """A cluster by id (cls_...) or by name."""
    if ref.startswith("cls_"):
        return client.get_cluster(ref)
    return one_named(client.list_clusters(name=ref), "cluster", ref, "cluster list")


def find_volume(client: GpuCloudClient, ref: str) -> dict[str, Any]:
    if ref.startswith("vol_"):
        return client.get_volume(ref)
    return one_named(client.list_volumes(name=ref), "volume", ref, "volume list")


def find_ssh_key(client: GpuCloudClient, ref: str) -> dict[str, Any]:
    if ref.startswith("ssh_"):
        return client.get_ssh_key(ref)
    return one_named(client.list_ssh_keys(name=ref), "SSH key", ref, "ssh-key list")


Completer = Callable[[click.Context, click.Parameter, str], list[CompletionItem]]


def _completion_client() -> GpuCloudClient | None:
    """A client for shell completion; None when no endpoint or key is configured."""
    try:
        credentials = resolve_credentials()
    except ConfigError:
        return None
    if not credentials.api_key:
        return None
    return GpuCloudClient(
        credentials.endpoint, credentials.api_key, max_retries=0, timeout=COMPLETION_TIMEOUT_SECONDS,
        user_agent=f"gpucloud-cli/{cli_version()}",
    )


def name_completer(names: Callable[[GpuCloudClient, click.Context], Iterable[str]]) -> Completer:
    """A `shell_complete` callback offering the names `names` lists that start with what is typed."""

    def complete(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
        client = _completion_client()
        if client is None:
            return []
        try:
            with client:
                found = sorted({name for name in names(client, ctx) if name.startswith(incomplete)})
        except Exception:  # API down, key refused, no such cluster: the shell just offers nothing
            return []
        return [CompletionItem(name) for name in found]

    return complete


def _node_names(client: GpuCloudClient, ctx: click.Context) -> list[str]:
    """The nodes of the cluster given before the NODE argument."""
    ref = ctx.params.get("cluster_ref")
    if not isinstance(ref, str):
        return []
    return [str(n["name"]) for n in find_cluster(client, ref).get("nodes") or []]


complete_cluster = name_completer(lambda client, _: (str(c["name"]) for c in client.list_clusters()))
complete_volume = name_completer(lambda client, _: (str(v["name"]) for v in client.list_volumes()))
complete_ssh_key = name_completer(lambda client, _: (str(k["name"]) for k in client.list_ssh_keys()))
complete_node = name_completer(_node_names)


def _clusters_and_nodes(client: GpuCloudClient, _: click.Context) -> list[str]:
    """Every cluster name and every node name of the project (what `gpucloud ssh` takes)."""
    clusters = client.list_clusters()
    nodes = [str(n["name"]) for c in clusters for n in c.get("nodes") or []]
    return [str(c["name"]) for c in clusters] + nodes


complete_cluster_or_node = name_completer(_clusters_and_nodes)
