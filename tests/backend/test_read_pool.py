"""run_read: hot read routes run their database work on a bounded thread pool (Settings.read_threads),
except on SQLite, where it runs on the event loop (no thread hop)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
from anyio import CapacityLimiter

from backend.api.state import run_read
from backend.settings import Settings


def _request(limit: int, dialect: str = "postgresql") -> Any:
    engine = SimpleNamespace(dialect=SimpleNamespace(name=dialect))
    state = SimpleNamespace(read_limiter=CapacityLimiter(limit), engine=engine)
    return SimpleNamespace(app=SimpleNamespace(state=SimpleNamespace(gpucloud=state)))


@pytest.mark.parametrize("limit", [1, 2])
def test_reads_never_run_on_more_threads_than_the_limit(limit: int) -> None:
    lock, running, peak, threads = threading.Lock(), [0], [0], set()

    def work() -> str:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            threads.add(threading.get_ident())
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return "done"

    async def main() -> list[str]:
        request, results = _request(limit), []

        async def one() -> None:
            results.append(await run_read(request, work))

        async with anyio.create_task_group() as group:
            for _ in range(6):
                group.start_soon(one)
        return results

    assert anyio.run(main) == ["done"] * 6
    assert peak[0] == limit
    assert threading.get_ident() not in threads  # off the event loop's thread


def test_sqlite_reads_run_on_the_event_loop_thread() -> None:
    threads: list[int] = []

    def work() -> str:
        threads.append(threading.get_ident())
        return "done"

    async def main() -> tuple[str, int]:
        return await run_read(_request(1, dialect="sqlite"), work), threading.get_ident()

    result, loop_thread = anyio.run(main)
    assert result == "done"
    assert threads == [loop_thread]


def test_read_threads_defaults_to_a_small_pool_and_is_configurable(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().read_threads == 4
    monkeypatch.setenv("GPUCLOUD_READ_THREADS", "2")
    assert Settings().read_threads == 2
