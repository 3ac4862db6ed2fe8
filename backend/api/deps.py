"""Request dependencies: the authenticated principal (rate limited) and the permission each route needs."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.dependencies.models import Dependant
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.security.utils import get_authorization_scheme_param
from starlette.concurrency import run_in_threadpool
from starlette.types import Scope

from backend.api.state import AppState, app_state
from backend.domain.access import (
    OPERATOR_CLUSTER_FIELDS,
    Permission,
    allows,
    fields_needing_manage,
    roles_with,
)
from backend.domain.errors import ApiError, Forbidden, Unauthorized
from backend.services.auth import Principal


async def _authenticate(request: Request, credentials: HTTPAuthorizationCredentials | None) -> Principal:
    """The caller, from `Authorization: Bearer <key>`; counts the request against the key's rate limit.

    Async on purpose: a cached key and a locally counted request cost no thread hop; only cache misses
    and a rate-limit sync near the budget go to the database, in the threadpool (the periodic syncs run
    in the background).
    """
    admitted: Principal | None = request.scope["state"].get("principal")
    if admitted is not None:  # authenticated and counted in front of the router (cluster_reads)
        return admitted
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
    await _admit(state, request.scope, principal)
    return principal


async def _admit(state: AppState, scope: Scope, principal: Principal) -> None:
    """Mark the request as `principal`'s and count it against the key's rate limit (RateLimited past it)."""
    scope["state"]["principal"] = principal
    if state.rate_limiter.count(principal.api_key_id):
        await run_in_threadpool(state.rate_limiter.sync, principal.api_key_id)
    state.rate_limiter.check(principal.api_key_id)


async def admit_cached(state: AppState, scope: Scope) -> Principal | None:
    """`_authenticate` for a layer in front of the router, from the key cache only: the caller, counted;
    None (nothing counted) when the request has no bearer key or one the cache does not hold, for the
    route's dependency to answer. RateLimited past the key's limit."""
    authorization = next((value for name, value in scope["headers"] if name == b"authorization"), None)
    header = None if authorization is None else authorization.decode("latin-1")
    scheme, token = get_authorization_scheme_param(header)
    if not token or scheme.lower() != "bearer":
        return None
    try:
        principal = state.authenticator.authenticate_cached(token)
    except ApiError:  # a malformed key: the dependency's 401
        return None
    if principal is not None:
        await _admit(state, scope, principal)
    return principal


class _RoleCheck(HTTPBearer):
    """A dependency: the caller, whose role must hold `permission` (403 `forbidden_role` otherwise).

    It carries `permission` so the role matrix (docs/api.md) is read off the routes. It is the bearer
    security scheme itself (OpenAPI's `ApiKey`) and authenticates in the same call: one dependency with
    no sub-dependency, since every route runs it and each level of FastAPI's dependency solving costs
    time on every request.
    """

    def __init__(self, permission: Permission) -> None:
        super().__init__(auto_error=False, scheme_name="ApiKey", description="An API key: `Bearer gpc_...`")
        self.permission = permission

    async def __call__(self, request: Request) -> Principal:  # type: ignore[override]
        principal = await _authenticate(request, await super().__call__(request))
        if not allows(principal.role, self.permission):
            raise Forbidden(
                refusal(principal.role, self.permission), field="Authorization", code="forbidden_role"
            )
        return principal


def _require(permission: Permission) -> Any:
    """The dependency of a route needing `permission`."""
    return _RoleCheck(permission)


def refusal(role: str, permission: Permission) -> str:
    """Why `role` may not do what needs `permission`, and which key to use instead."""
    if allows(role, Permission.OPERATE):
        can = "which may scale, attach and detach volumes, run node actions and change labels, but not "
        can += "create, delete or reconfigure resources"
    else:
        can = "which is read-only"
    holders = [r for r in roles_with(permission) if r != "member"]
    return f"this API key has the {role} role, {can}; use an {' or '.join(holders)} key"


def route_permission(dependant: Dependant) -> Permission | None:
    """The permission a route's dependencies demand (None: a route needing no key)."""
    for dependency in dependant.dependencies:
        permission = getattr(dependency.call, "permission", None)
        if isinstance(permission, Permission):
            return permission
    return None


def check_cluster_fields(principal: Principal, fields: Iterable[str]) -> None:
    """An operator may PATCH only the day-2 fields of a cluster; 403 naming the first other one."""
    if allows(principal.role, Permission.MANAGE):
        return
    denied = fields_needing_manage(fields)
    if denied:
        allowed = ", ".join(sorted(OPERATOR_CLUSTER_FIELDS))
        raise Forbidden(
            f"this API key has the {principal.role} role, which may change only {allowed}; "
            f"changing {', '.join(denied)} needs an admin key",
            field=denied[0],
            code="forbidden_role",
        )


# What a route's `principal` parameter is typed as names the permission it needs (backend/domain/access.py).
Reader = Annotated[Principal, Depends(_require(Permission.READ))]  # every role
Operator = Annotated[Principal, Depends(_require(Permission.OPERATE))]  # day-2 changes: operator, admin
Writer = Annotated[Principal, Depends(_require(Permission.MANAGE))]  # create, delete, the rest: admin
