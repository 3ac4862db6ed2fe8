"""What one app instance holds: settings, database access, catalog, auth and rate limiting."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from backend.api.metrics import Metrics
from backend.domain.catalog import Catalog
from backend.services.auth import Authenticator
from backend.services.rate_limit import RateLimiter
from backend.settings import Settings


@dataclass
class AppState:
    settings: Settings
    engine: Engine
    # Reads use plain transactions; writes take SQLite's write lock at BEGIN (no upgrade deadlocks).
    read_sessions: sessionmaker[Session]
    write_sessions: sessionmaker[Session]
    catalog: Catalog
    authenticator: Authenticator
    rate_limiter: RateLimiter
    metrics: Metrics


def app_state(request: Request) -> AppState:
    """The AppState of the app serving `request`."""
    state: AppState = request.app.state.gpucloud
    return state
