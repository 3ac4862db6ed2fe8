"""Request dependencies: the authenticated principal (rate limited) and role checks."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from backend.api.state import app_state
from backend.domain.errors import Forbidden, Unauthorized
from backend.services.auth import Principal

bearer = HTTPBearer(auto_error=False, scheme_name="ApiKey", description="An API key: `Bearer gpc_...`")


async def current_principal(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
) -> Principal:
    """The caller, from `Authorization: Bearer <key>`; counts the request against the key's rate limit.

    Async on purpose: a cached key and a locally counted request cost no thread hop; only cache misses
    and rate-limit syncs go to the database, in the threadpool.
    """
    if credentials is None:
        raise Unauthorized(
            "send an API key as `Authorization: Bearer gpc_...`",
            field="Authorization",
            code="missing_api_key",
            headers={"WWW-Authenticate": "Bearer"},
        )
    state = app_state(request)
    token = credentials.credentials
    principal = state.authenticator.authenticate_cached(token)
    if principal is None:
        principal = await run_in_threadpool(state.authenticator.authenticate, token)
    request.scope["state"]["principal"] = principal
    if state.rate_limiter.count(principal.api_key_id):
        await run_in_threadpool(state.rate_limiter.sync, principal.api_key_id)
    state.rate_limiter.check(principal.api_key_id)
    return principal


async def admin_principal(principal: Annotated[Principal, Depends(current_principal)]) -> Principal:
    """The caller, who must hold the admin role (members are read-only)."""
    if not principal.is_admin:
        raise Forbidden(
            "this API key has the member role, which is read-only; use an admin key",
            field="Authorization",
            code="forbidden_role",
        )
    return principal


Reader = Annotated[Principal, Depends(current_principal)]
Writer = Annotated[Principal, Depends(admin_principal)]
