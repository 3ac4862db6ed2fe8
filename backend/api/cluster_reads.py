"""GET /v1/clusters/{id} from memory while the database is unchanged: the hottest read without
FastAPI's per-request work.

Consoles, CLI waiters and Terraform refreshes poll this route. Through FastAPI it costs about 1 ms of
CPU on SQLite (routing, dependency solving, five queries, validation), and a route there that reads
nothing already costs ~390 us, 4x a bare ASGI answer (docs/benchmarks.md, issue 26's fourth and fifth
steps). So the route keeps its answer with the database's change stamp read before it
(backend/store/change_stamps.py), and this layer, in front of the router, answers a repeated GET itself
when the stamp read now is the same: nothing was committed since, so the answer is the one the route
would give. It is never stale; any commit anywhere sends the next GET through the route, which refills
the entry. Everything else goes through as before.

The request is authenticated and counted as the route's dependency does (deps.admit_cached), from the
key cache only (a key the cache does not hold goes through FastAPI); the entry is served only to a key
of the cluster's project whose team scope holds the cluster's labels (the route's 404 otherwise). The
request is logged and measured under the route's template by the outer middleware.
"""

from __future__ import annotations

import re

from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from backend.api.deps import admit_cached
from backend.api.problems import error_response
from backend.api.state import AppState
from backend.domain.access import Permission, allows
from backend.domain.errors import ApiError
from backend.domain.scoping import in_scope

_PATH = re.compile(r"/v1/clusters/(cls_[0-9a-z]{26})")


class CachedClusterReads:
    """Pure ASGI, inside HttpEdges (so HEAD is served too) and RequestMiddleware (ids, logs, metrics)."""

    def __init__(self, app: ASGIApp, *, state: AppState, route: BaseRoute) -> None:
        self.app = app
        self.state = state
        self.route = route

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        is_get = scope["type"] == "http" and scope["method"] == "GET"
        match = _PATH.fullmatch(scope["path"]) if is_get else None
        if match is None or self.state.change_stamps is None:  # the cache is off (or the database in memory)
            await self.app(scope, receive, send)
            return
        try:
            principal = await admit_cached(self.state, scope)
        except ApiError as error:  # past the key's rate limit: the answer the route's dependency gives
            await error_response(error, scope["state"].get("request_id"))(scope, receive, send)
            return
        read = self.state.cluster_reads.get(match.group(1))
        if (
            principal is None
            or read is None
            or read.project_id != principal.project_id
            or not allows(principal.role, Permission.READ)
            or not in_scope(principal.scope, read.labels)
            or await self.state.change_stamps.current() != read.stamp
        ):
            await self.app(scope, receive, send)
            return
        scope["route"] = self.route  # the outer middleware logs and measures the route's template
        headers = [
            (b"content-length", str(len(read.body)).encode()),
            (b"content-type", b"application/json"),
            (b"etag", read.etag.encode()),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": read.body})
