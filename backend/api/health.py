"""Liveness, readiness and Prometheus metrics (unauthenticated, outside /v1)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from sqlalchemy import text
from starlette.responses import JSONResponse, Response

from backend.api.problems import problem_response, request_id_of
from backend.api.state import app_state

router = APIRouter(tags=["health"], include_in_schema=False)


@router.get("/healthz")
async def healthz() -> JSONResponse:
    """The process is up."""
    return JSONResponse({"status": "ok"})


@router.get("/readyz")
def readyz(request: Request) -> Response:
    """The process can reach its database."""
    try:
        with app_state(request).read_sessions() as session:
            session.execute(text("SELECT 1"))
    except Exception as error:  # any database failure means "not ready", never a crash
        return problem_response(
            status=503,
            code="database_unavailable",
            detail=f"database unreachable: {error}",
            request_id=request_id_of(request),
            headers={"Retry-After": "5"},
        )
    return JSONResponse({"status": "ready"})


@router.get("/metrics")
def metrics(request: Request) -> Response:
    """Prometheus text exposition (in a thread: the engine figures are read from the database)."""
    return Response(app_state(request).metrics.render(), media_type="text/plain; version=0.0.4")
