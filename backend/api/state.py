"""What one app instance holds: the runtime's API view (settings, database access, catalog) plus auth,
rate limiting and metrics. The first fields repeat the runtime's, by the names the routes use."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import anyio.to_thread
from anyio import CapacityLimiter
from fastapi import Request
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from backend.api.metrics import Metrics
from backend.api.read_cache import ClusterReads
from backend.domain.catalog import Catalog
from backend.runtime import Runtime
from backend.services.auth import Authenticator
from backend.services.provider_packages import ProviderPackages
from backend.services.rate_limit import AddressRateLimiter, RateLimiter
from backend.settings import Settings
from backend.store.change_stamps import ChangeStamps


@dataclass
class AppState:
    settings: Settings
    engine: Engine
    # Reads use plain transactions; writes take SQLite's write lock at BEGIN (no upgrade deadlocks).
    read_sessions: sessionmaker[Session]
    write_sessions: sessionmaker[Session]
    catalog: Catalog
    # The process's runtime (clock, driver, billing settings) for what the fields above do not cover.
    runtime: Runtime
    authenticator: Authenticator
    rate_limiter: RateLimiter
    # Requests without a valid key, per client address (in memory, per replica).
    address_limiter: AddressRateLimiter
    metrics: Metrics
    # Bounds the threads of run_read (the default threadpool allows 40).
    read_limiter: CapacityLimiter
    # What the provider registry and network mirror serve (none unless configured).
    provider_packages: ProviderPackages = field(default_factory=lambda: ProviderPackages(None))
    # GET /v1/clusters/{id} answers and the database change stamps that keep them exact (cluster_reads).
    cluster_reads: ClusterReads = field(default_factory=lambda: ClusterReads(0))
    change_stamps: ChangeStamps | None = None


def app_state(request: Request) -> AppState:
    """The AppState of the app serving `request`."""
    state: AppState = request.app.state.gpucloud
    return state


Result = TypeVar("Result")


async def run_read(request: Request, work: Callable[[], Result]) -> Result:
    """Run a hot read route's blocking database work: on SQLite right here on the event loop, elsewhere
    in a thread of the small read pool (see read_threads).

    A SQLite read is about a millisecond of Python over a local file, and in WAL mode a reader never
    waits for a writer's lock (only, when all pooled connections are out, for one to come back), so it
    cannot stall the loop for long; the hop to a thread and back cost more than that and, with the GIL,
    up to a 5 ms switch interval whenever the loop and the thread both want to run (docs/benchmarks.md,
    issue 26). A PostgreSQL read waits on network round trips, which the loop must not do.
    """
    state = app_state(request)
    if state.engine.dialect.name == "sqlite":
        return work()
    return await anyio.to_thread.run_sync(work, limiter=state.read_limiter)
