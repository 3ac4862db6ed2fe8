"""Waiting for the backend, the engine or Terraform without betting on how fast the machine is.

The suite runs on two pytest-xdist workers on a 2-core machine, next to Terraform, providers and
backends: anything can take several times as long as on an idle machine. So a test waits for a
condition, not for a time, and the ceiling (`WAIT_CEILING_S`) only ends a wait that is truly stuck.
"""

from __future__ import annotations

import time
from collections.abc import Callable

# Generous on purpose: reaching it means something is stuck, never that the machine was busy.
WAIT_CEILING_S = 180.0


def eventually(check: Callable[[], bool], seconds: float = WAIT_CEILING_S, interval: float = 0.2) -> bool:
    """Whether `check` holds within `seconds`, polling every `interval` (the engine works asynchronously)."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


def wait_until(
    check: Callable[[], bool], describe: Callable[[], str], seconds: float = WAIT_CEILING_S,
    interval: float = 0.2,
) -> None:
    """Poll `check` until it holds; past `seconds`, fail with `describe()` (what was seen instead)."""
    if not eventually(check, seconds, interval):
        raise AssertionError(f"not reached within {seconds:g}s: {describe()}")
