"""Operations of the drivers that act on real machines (`local`, `ssh_hosts`), run in background threads.

`submit` starts an operation's work in a thread and answers "not ready, look again in a moment" until it is
done; the engine polls with the same client token and gets the outcome. Nothing but this in-memory table is
kept, and it need not be: each driver's steps are idempotent against the machines, so a backend killed at
any point is asked for the same tokens after its restart and repeats them. Operations of one cluster run
one at a time (they share its files and controller); clusters run in parallel.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from backend.domain.clock import Clock
from backend.provisioning.driver import ImageOutcome, Operation, OpKind

POLL = dt.timedelta(milliseconds=300)  # how soon the engine asks again about a running operation
FORGET_AFTER = dt.timedelta(minutes=10)


@dataclass(frozen=True)
class Result:
    host_key: str | None = None  # a boot's: the host key the machine presents, for the API to publish
    images: tuple[ImageOutcome, ...] = ()  # an image import's, one per image


@dataclass
class BackgroundJob:
    token: str
    kind: OpKind
    submitted_at: dt.datetime
    finished_at: dt.datetime | None = None
    succeeded: bool = True
    reason: str | None = None
    result: Result = Result()
    done: threading.Event = field(default_factory=threading.Event)

    def operation(self, now: dt.datetime) -> Operation:
        if not self.done.is_set():
            return Operation(self.token, self.kind, self.submitted_at, now + POLL, True)
        return Operation(
            self.token,
            self.kind,
            self.submitted_at,
            now,
            self.succeeded,
            self.reason,
            self.result.host_key if self.succeeded else None,
            self.result.images,
        )


class BackgroundOperations:
    """The table of running and finished operations, by client token."""

    def __init__(self, clock: Clock, thread_prefix: str) -> None:
        self.clock = clock
        self.thread_prefix = thread_prefix
        self._jobs: dict[str, BackgroundJob] = {}
        self._lock = threading.Lock()
        self._cluster_locks: dict[str, threading.Lock] = {}

    def find(self, token: str) -> BackgroundJob | None:
        with self._lock:
            return self._jobs.get(token)

    def start(
        self, token: str, kind: OpKind, cluster_id: str, work: Callable[[], Result], now: dt.datetime
    ) -> BackgroundJob:
        """The operation `token`, started now unless it exists."""
        job = BackgroundJob(token, kind, now)
        with self._lock:
            # Finished operations are kept a while for the engine to read, then forgotten (it records
            # outcomes in its own steps; a token asked for again is simply run again, idempotently).
            for old in [
                t
                for t, j in self._jobs.items()
                if j.finished_at is not None and now - j.finished_at > FORGET_AFTER
            ]:
                del self._jobs[old]
            existing = self._jobs.setdefault(token, job)
        if existing is job:
            lock = self._cluster_locks.setdefault(cluster_id, threading.Lock())
            threading.Thread(
                target=self._run, args=(job, work, lock), name=f"{self.thread_prefix}-{kind}", daemon=True
            ).start()
        return existing

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """Wait for the operations running in the background; False if some still run at the timeout."""
        deadline = time.monotonic() + timeout
        with self._lock:
            running = [job for job in self._jobs.values() if not job.done.is_set()]
        return all(job.done.wait(max(0.0, deadline - time.monotonic())) for job in running)

    def _run(self, job: BackgroundJob, work: Callable[[], Result], lock: threading.Lock) -> None:
        try:
            with lock:
                job.result = work()
        except Exception as exc:  # an operation's failure is its outcome, reported to the engine
            job.succeeded, job.reason = False, f"{type(exc).__name__}: {exc}"[:1000]
        failed_images = [image.error for image in job.result.images if image.error]
        if failed_images:
            job.succeeded, job.reason = False, "; ".join(failed_images)
        job.finished_at = self.clock.now()
        job.done.set()
