"""Polling until a long-running operation settles (creates return at once; the caller polls)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

from provider.client.errors import WaitCancelled, WaitFailed, WaitTimeout

T = TypeVar("T")


def wait_for(
    get: Callable[[], T],
    predicate: Callable[[T], bool],
    *,
    timeout: float,
    interval: float = 5.0,
    cancelled: threading.Event | None = None,
    on_progress: Callable[[T, float], None] | None = None,
    failure: Callable[[T], str | None] | None = None,
    max_interval: float | None = None,
    description: str = "the operation",
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] | None = None,
) -> T:
    """Call `get` until `predicate(value)` holds and return that value.

    `on_progress(value, elapsed_seconds)` sees every poll (log it). `failure(value)` returns a reason when
    the value is in a terminal failure state (raises WaitFailed). Raises WaitTimeout after `timeout`
    seconds and WaitCancelled as soon as `cancelled` is set (checked before each poll and during each
    pause); each carries the last value seen in `.last` so the caller can still record partial state.
    The pause starts at `interval` and grows by half up to `max_interval` when one is given.
    """
    started = clock()
    deadline = started + timeout
    delay = interval
    last: T | None = None
    while True:
        if cancelled is not None and cancelled.is_set():
            raise WaitCancelled(f"cancelled while waiting for {description}", last)
        last = get()
        elapsed = clock() - started
        if on_progress is not None:
            on_progress(last, elapsed)
        if predicate(last):
            return last
        if failure is not None:
            reason = failure(last)
            if reason:
                raise WaitFailed(reason, last)
        remaining = deadline - clock()
        if remaining <= 0:
            raise WaitTimeout(f"timed out after {_duration(timeout)} waiting for {description}", last)
        pause = min(delay, remaining)
        if sleep is not None:
            sleep(pause)
        elif cancelled is not None:
            if cancelled.wait(pause):
                raise WaitCancelled(f"cancelled while waiting for {description}", last)
        else:
            time.sleep(pause)
        if max_interval is not None:
            delay = min(delay * 1.5, max_interval)


def _duration(seconds: float) -> str:
    total = round(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [
        f"{hours}h" if hours else "",
        f"{minutes}m" if minutes else "",
        f"{secs}s" if secs or not total else "",
    ]
    return "".join(parts)
