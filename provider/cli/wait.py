"""Watching a cluster until it settles, with a live status line (phase, nodes running / total, elapsed).

Ctrl-C stops the watching only: the operation goes on in the cloud, and the message says how to resume.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable
from typing import Any

import click
from rich.text import Text

from provider.cli.output import STATUS_STYLES, stderr_console
from provider.client import GpuCloudClient, NotFound, WaitFailed, wait_for

WAIT_TIMEOUT_SECONDS = 6 * 3600  # a very large cluster; Ctrl-C ends a wait sooner
INTERRUPTED = 130


class Interrupted(click.exceptions.Exit):
    """Ctrl-C during a wait: the message was printed, exit 130."""

    def __init__(self) -> None:
        super().__init__(INTERRUPTED)


def progress_line(cluster: dict[str, Any], elapsed: float) -> str:
    nodes = cluster.get("nodes") or []
    running = sum(1 for n in nodes if n.get("status") == "RUNNING")
    phase = cluster.get("phase") or "-"
    minutes, seconds = divmod(int(elapsed), 60)
    return (
        f"{cluster['name']} {cluster['status']} · {phase} · nodes {running}/{cluster['node_count']} running"
        f" · {minutes}m{seconds:02d}s"
    )


class LiveLine:
    """The status line's text, rendered at each refresh so the elapsed time ticks between polls."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.started = clock()
        self.cluster: dict[str, Any] | None = None

    def __rich__(self) -> Text:
        if self.cluster is None:
            return Text("waiting for the first answer")
        line = progress_line(self.cluster, self.clock() - self.started)
        return Text(line, style=STATUS_STYLES.get(self.cluster["status"], ""))


def watch_cluster(
    client: GpuCloudClient,
    cluster_id: str,
    done: Callable[[dict[str, Any]], bool],
    *,
    what: str,
) -> dict[str, Any] | None:
    """Poll until `done(cluster)`; None when the cluster is gone (404 after a destroy)."""
    console = stderr_console()
    last_line = ""
    live_line = LiveLine()

    def get() -> dict[str, Any] | None:
        try:
            return client.get_cluster(cluster_id)
        except NotFound:
            return None

    def failure(cluster: dict[str, Any] | None) -> str | None:
        if cluster is not None and cluster["status"] == "FAILED":
            return f"cluster {cluster_id} FAILED: {cluster.get('status_reason') or 'no reason given'}"
        return None

    try:
        live = console.status(live_line) if console.is_terminal else contextlib.nullcontext()
        with live as status:

            def on_progress(cluster: dict[str, Any] | None, elapsed: float) -> None:
                nonlocal last_line
                if cluster is None:
                    return
                line = progress_line(cluster, elapsed)
                live_line.cluster = cluster
                if status is None and line.rsplit(" · ", 1)[0] != last_line.rsplit(" · ", 1)[0]:
                    print(line, file=sys.stderr, flush=True)  # a log line per change, not per poll
                last_line = line

            return wait_for(
                get,
                lambda c: c is None or done(c),
                timeout=WAIT_TIMEOUT_SECONDS,
                interval=1.0,
                max_interval=5.0,
                on_progress=on_progress,
                failure=failure,
                description=what,
            )
    except KeyboardInterrupt:
        console.print(
            f"Stopped watching; {what} goes on. Resume with: gpucloud cluster info {cluster_id} --wait",
            highlight=False,
        )
        raise Interrupted() from None
    except WaitFailed as error:
        raise click.ClickException(str(error)) from None


def is_running(cluster: dict[str, Any]) -> bool:
    """RUNNING with every declared node running (a scale is done once the node count matches)."""
    nodes = [n for n in cluster.get("nodes") or [] if n.get("status") == "RUNNING"]
    return bool(cluster["status"] == "RUNNING" and len(nodes) == cluster["node_count"])


def is_gone(cluster: dict[str, Any]) -> bool:
    return bool(cluster["status"] == "DESTROYED")
