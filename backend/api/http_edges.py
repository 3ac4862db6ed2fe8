"""HTTP semantics the routes should not each repeat: HEAD, and paths that name nothing.

- HEAD is answered on every path that serves GET (RFC 9110 9.3.2): the GET route runs and its status
  and headers go out without the body. A streamed answer (no Content-Length) ends after its headers.
- A path with a control character (`%00`) or with bytes that are not UTF-8 names no resource: 404 here,
  before a route hands it to the filesystem or the database (where it used to end in a 500).

Pure ASGI, registered inside RequestMiddleware (which gives the request its id and logs it); the 405's
`Allow` is written by the problem handler (`backend.api.route_methods`).
"""

from __future__ import annotations

import re
from urllib.parse import unquote_to_bytes

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from backend.api.problems import PROBLEM_MEDIA_TYPE, problem_body

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class _HeadAnswered(Exception):
    """Raised into a streaming GET run for a HEAD once its headers went out, to stop it."""


def undecodable(scope: Scope) -> bool:
    """True when the request path holds a control character or percent-escapes that are not UTF-8."""
    path: str = scope["path"]
    if _CONTROL.search(path):
        return True
    # Servers decode the path with errors="replace"; only then is a U+FFFD worth the strict check.
    raw = scope.get("raw_path")
    if "\ufffd" not in path or raw is None:
        return False
    try:
        unquote_to_bytes(raw.split(b"?", 1)[0]).decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


class HttpEdges:
    """HEAD on GET routes and 404 for undecodable paths (nothing else is wrapped: the common request
    costs one regular expression)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if undecodable(scope):
            await self._not_found(scope, send)
            return
        if scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return
        # The scope is shared with the outer middleware (its log reads the method and the route), so
        # the method is switched in place and put back.
        scope["method"] = "GET"
        try:
            await self.app(scope, receive, _without_body(send))
        except _HeadAnswered:
            pass
        finally:
            scope["method"] = "HEAD"

    @staticmethod
    async def _not_found(scope: Scope, send: Send) -> None:
        request_id = scope.get("state", {}).get("request_id")
        body = problem_body(
            status=404,
            code="not_found",
            detail="no resource has this path: it holds a control character or bytes that are not UTF-8",
            field="path",
            request_id=None if request_id is None else str(request_id),
        )
        headers = [
            (b"content-type", PROBLEM_MEDIA_TYPE.encode()),
            (b"content-length", str(len(body)).encode()),
        ]
        await send({"type": "http.response.start", "status": 404, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body})


def _without_body(send: Send) -> Send:
    """`send` for a GET run on behalf of a HEAD: the start message as is, then one empty body."""
    finished = streaming = False

    async def send_head(message: Message) -> None:
        nonlocal finished, streaming
        if finished:
            if streaming:
                raise _HeadAnswered
            return  # the rest of a body already answered empty
        if message["type"] == "http.response.start":
            await send(message)
            streaming = not any(k.lower() == b"content-length" for k, _ in message.get("headers", []))
            if streaming:
                await send({"type": "http.response.body", "body": b""})
                finished = True
            return
        last = message["type"] == "http.response.pathsend" or not message.get("more_body", False)
        if last:
            await send({"type": "http.response.body", "body": b""})
            finished = True

    return send_head
