"""Request dependencies: the authenticated principal (rate limited) and role checks."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from backend.api.state import app_state
from backend.domain.errors import Forbidden, Unauthorized
from backend.services.auth import Principal

bearer = HTTPBearer(auto_error=False, scheme_name="ApiKey", description="An API key: `Bearer gpc_...`")


def current_principal(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
) -> Principal:
    """The caller, from `Authorization: Bearer <key>`; counts the request against the key's rate limit."""
    if credentials is None:
        raise Unauthorized(
            "send an API key as `Authorization: Bearer gpc_...`",
            field="Authorization",
            code="missing_api_key",
            headers={"WWW-Authenticate": "Bearer"},
        )
    state = app_state(request)
    principal = state.authenticator.authenticate(credentials.credentials)
    request.scope["state"]["principal"] = principal
    state.rate_limiter.hit(principal.api_key_id)
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
