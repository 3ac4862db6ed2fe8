"""wait_for: polls until done, fails fast on terminal failure, times out, and observes cancellation."""

from __future__ import annotations

import threading
import time

import pytest

from provider.client import WaitCancelled, WaitFailed, WaitTimeout, wait_for
from tests.provider.client.fakes import FakeClock


class Statuses:
    def __init__(self, *statuses: str) -> None:
        self.statuses = list(statuses)
        self.calls = 0

    def __call__(self) -> dict[str, str]:
        self.calls += 1
        status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        return {"status": status}


def running(c: dict[str, str]) -> bool:
    return c["status"] == "RUNNING"


def test_wait_returns_the_value_that_satisfies_the_predicate() -> None:
    clock = FakeClock()
    progress: list[tuple[str, float]] = []
    result = wait_for(
        Statuses("PENDING", "PROVISIONING", "RUNNING"),
        running,
        timeout=600,
        interval=10,
        on_progress=lambda c, elapsed: progress.append((c["status"], elapsed)),
        clock=clock,
        sleep=clock.sleep,
    )
    assert result == {"status": "RUNNING"}
    assert progress == [("PENDING", 0), ("PROVISIONING", 10), ("RUNNING", 20)]


def test_wait_times_out_with_the_last_value() -> None:
    clock = FakeClock()
    with pytest.raises(WaitTimeout, match="timed out after 1m waiting for cluster clu_1") as error:
        wait_for(
            Statuses("PROVISIONING"),
            running,
            timeout=60,
            interval=25,
            description="cluster clu_1",
            clock=clock,
            sleep=clock.sleep,
        )
    assert error.value.last == {"status": "PROVISIONING"}
    assert clock.sleeps == [25, 25, 10]  # never sleeps past the deadline


def test_wait_stops_at_a_terminal_failure() -> None:
    clock = FakeClock()
    get = Statuses("PROVISIONING", "FAILED", "RUNNING")
    with pytest.raises(WaitFailed, match="node-1 failed its health check") as error:
        wait_for(
            get,
            running,
            timeout=600,
            interval=5,
            clock=clock,
            sleep=clock.sleep,
            failure=lambda c: "node-1 failed its health check" if c["status"] == "FAILED" else None,
        )
    assert error.value.last == {"status": "FAILED"}
    assert get.calls == 2


def test_wait_interval_grows_to_the_maximum() -> None:
    clock = FakeClock()
    with pytest.raises(WaitTimeout):
        wait_for(
            Statuses("PENDING"),
            running,
            timeout=30,
            interval=2,
            max_interval=5,
            clock=clock,
            sleep=clock.sleep,
        )
    assert clock.sleeps[:4] == [2, 3, 4.5, 5]


def test_wait_observes_cancellation_before_polling_again() -> None:
    clock = FakeClock()
    cancelled = threading.Event()
    get = Statuses("PROVISIONING")

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        cancelled.set()  # StopProvider arrives during the pause

    with pytest.raises(WaitCancelled) as error:
        wait_for(get, running, timeout=600, interval=5, cancelled=cancelled, clock=clock, sleep=sleep)
    assert get.calls == 1
    assert error.value.last == {"status": "PROVISIONING"}


def test_wait_cancellation_interrupts_a_long_pause() -> None:
    cancelled = threading.Event()
    threading.Timer(0.05, cancelled.set).start()
    started = time.monotonic()
    with pytest.raises(WaitCancelled):
        wait_for(Statuses("PROVISIONING"), running, timeout=6000, interval=600, cancelled=cancelled)
    assert time.monotonic() - started < 60  # cut short: not the 10-minute pause, however busy the machine


def test_wait_propagates_errors_from_get() -> None:
    def get() -> dict[str, str]:
        raise KeyError("gone")

    with pytest.raises(KeyError):
        wait_for(get, running, timeout=10, interval=1, sleep=lambda s: None)
