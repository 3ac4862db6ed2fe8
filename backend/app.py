"""The FastAPI application factory: middleware, problem handlers, routers, and the embedded engine."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from anyio import CapacityLimiter
from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute

from backend.api import (
    audit_events,
    billing,
    budgets,
    clusters,
    console,
    engine_routes,
    health,
    host_pools,
    provider_registry,
    quotas,
    reservations,
    reserved_ips,
    security_groups,
    ssh_keys,
    volumes,
)
from backend.api.cluster_reads import CachedClusterReads
from backend.api.http_edges import HttpEdges
from backend.api.metrics import Metrics
from backend.api.middleware import RequestMiddleware
from backend.api.openapi import install_openapi
from backend.api.problems import install_problem_handlers
from backend.api.read_cache import ClusterReads
from backend.api.state import AppState
from backend.billing.worker import MeteringLoop
from backend.logging import configure_logging
from backend.provisioning.worker import EmbeddedWorker, start_embedded
from backend.runtime import Runtime, build_runtime
from backend.services.auth import Authenticator
from backend.services.provider_packages import ProviderPackages
from backend.services.rate_limit import AddressRateLimiter, RateLimiter
from backend.settings import Settings
from backend.store.change_stamps import change_stamps

API_DESCRIPTION = """The gpucloud control plane: SSH keys, shared volumes and GPU clusters of a project.

Authenticate with `Authorization: Bearer gpc_...`. Errors are RFC 9457 `application/problem+json` with a
stable `code` and the offending `field`. POSTs accept `Idempotency-Key`; mutable resources carry an `ETag`
and honour `If-Match`. Lists are keyset-paginated with an opaque `page_token`.
"""


def build_state(runtime: Runtime) -> AppState:
    """Everything an app instance needs: the runtime's API view plus auth, rate limits and metrics."""
    settings = runtime.settings
    read_sessions, write_sessions = runtime.read_sessions, runtime.write_sessions
    return AppState(
        settings=settings,
        engine=runtime.db,
        read_sessions=read_sessions,
        write_sessions=write_sessions,
        catalog=runtime.catalog,
        runtime=runtime,
        authenticator=Authenticator(
            sessions=read_sessions,
            cache_seconds=settings.auth_cache_seconds,
            max_cached_keys=settings.auth_cache_max_keys,
        ),
        rate_limiter=RateLimiter(
            sessions=write_sessions,
            limit=settings.rate_limit_requests,
            window_seconds=settings.rate_limit_window_seconds,
            sync_every=settings.rate_limit_batch,
        ),
        address_limiter=AddressRateLimiter(
            limit=settings.unauthenticated_rate_limit_requests,
            window_seconds=settings.unauthenticated_rate_limit_window_seconds,
            clock=runtime.clock,
        ),
        metrics=Metrics(engine_sessions=read_sessions),
        read_limiter=CapacityLimiter(settings.read_threads),
        provider_packages=ProviderPackages(
            settings.provider_packages_dir, settings.provider_signing_key_file
        ),
        cluster_reads=ClusterReads(settings.cluster_read_cache_entries),
        change_stamps=change_stamps(runtime.db) if settings.cluster_read_cache_entries else None,
    )


def create_app(config: Settings | Runtime) -> FastAPI:
    """The backend's ASGI app on `config` (a runtime, or settings to build one from); the database must
    already be migrated (`serve` and `migrate` do that)."""
    runtime = config if isinstance(config, Runtime) else build_runtime(config)
    settings = runtime.settings
    configure_logging(settings.log_level)
    state = build_state(runtime)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        worker: EmbeddedWorker | None = None
        metering: MeteringLoop | None = None
        # One process runs everything by default: the engine and the billing meter beside the API.
        if settings.embedded_worker:
            worker = start_embedded(runtime.engine_worker())
        if settings.embedded_billing:
            metering = runtime.metering_loop().start()
        try:
            yield
        finally:
            if metering is not None:
                metering.stop()
            if worker is not None:
                worker.stop()
            state.rate_limiter.close()
            if state.change_stamps is not None:
                state.change_stamps.close()
            runtime.close()

    app = FastAPI(
        title="gpucloud API",
        version="1.0.0",
        description=API_DESCRIPTION,
        lifespan=lifespan,
        openapi_url="/openapi.json",
        docs_url="/docs",
        redoc_url=None,
        generate_unique_id_function=lambda route: route.name,
        # We export Prometheus metrics and JSON logs ourselves; FastAPI's OpenTelemetry hooks would only
        # look up (unconfigured) providers on every request.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.gpucloud = state
    install_problem_handlers(app)
    app.include_router(health.router)
    app.include_router(provider_registry.router)
    app.include_router(ssh_keys.router)
    app.include_router(volumes.router)
    app.include_router(security_groups.router)
    app.include_router(clusters.router)
    app.include_router(reserved_ips.router)
    app.include_router(host_pools.router)
    app.include_router(audit_events.router)
    app.include_router(engine_routes.router)
    app.include_router(billing.router)
    app.include_router(budgets.router)
    app.include_router(quotas.router)
    app.include_router(reservations.router)
    app.include_router(console.router)
    install_openapi(app)
    app.add_middleware(CachedClusterReads, state=state, route=_route(clusters.router, clusters.get_cluster))
    app.add_middleware(HttpEdges)  # inside RequestMiddleware
    app.add_middleware(
        RequestMiddleware,
        max_body_bytes=settings.max_body_bytes,
        metrics=state.metrics,
        address_limiter=state.address_limiter,
    )
    return app


def _route(router: APIRouter, endpoint: Callable[..., Any]) -> APIRoute:
    """The route of `router` serving `endpoint`."""
    return next(r for r in router.routes if isinstance(r, APIRoute) and r.endpoint is endpoint)
