"""The methods served at a path, for the `Allow` of a 405 (RFC 9110 15.5.6).

Starlette's router lists only the methods of the first route whose path matched, and a path such as
`/v1/clusters` has a GET route and a POST route: this asks every route.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from fastapi.routing import iter_route_contexts
from starlette.routing import BaseRoute, Match, Mount, compile_path
from starlette.types import Scope

# What a Mount serves (static files, say) is not declared; StaticFiles serves these.
_MOUNT_METHODS = frozenset({"GET", "HEAD"})


def allowed_methods(routes: Sequence[BaseRoute], scope: Scope) -> list[str]:
    """Every method some route serves at this request's path (HEAD wherever GET is), sorted."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    path = path[len(root):] if root and path.startswith(root) else path
    methods: set[str] = set()
    # FastAPI nests included routers: iter_route_contexts flattens them into the routes as served.
    for route in iter_route_contexts(routes):
        if isinstance(route.original_route, Mount):
            if route.original_route.matches(scope)[0] is not Match.NONE:
                methods |= _MOUNT_METHODS
        elif route.path is not None and _pattern(route.path).match(path):
            methods |= route.methods or set()
    if "GET" in methods:
        methods.add("HEAD")
    return sorted(methods)


@functools.cache
def _pattern(path: str) -> re.Pattern[str]:
    return compile_path(path)[0]
