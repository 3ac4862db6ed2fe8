"""The metering loop runs passes in a background thread until stopped and survives a failing pass."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

import backend.billing.worker as worker_module
from backend.billing.service import MeteringResult
from backend.billing.settings import BillingSettings
from backend.billing.worker import MeteringLoop, start_embedded
from tests.backend.billing.conftest import BillingWorld


def test_embedded_loop_meters_until_stopped(world: BillingWorld) -> None:
    project = world.project()
    cluster = world.cluster(project, instance_type="8xH100", region="us-east-1", node_count=1)
    world.transition(cluster, "n0", "RUNNING", datetime.now(UTC) - timedelta(hours=2))
    loop = start_embedded(world.sessions, BillingSettings(interval_seconds=0.05))
    try:
        for _ in range(200):
            if world.records(project):
                break
            threading.Event().wait(0.05)
    finally:
        loop.stop()
    assert world.records(project), "the loop never charged"


def test_a_failing_pass_is_logged_and_the_loop_goes_on(
    world: BillingWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    done = threading.Event()

    def flaky(**_kwargs: object) -> MeteringResult:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("database went away")
        done.set()
        return MeteringResult()

    monkeypatch.setattr(worker_module, "run_metering", flaky)
    loop = MeteringLoop(sessions=world.sessions, settings=BillingSettings(interval_seconds=0.01)).start()
    try:
        assert done.wait(5.0)
    finally:
        loop.stop()
    assert len(calls) >= 2
