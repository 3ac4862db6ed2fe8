"""The outermost ASGI layer: request ids, the body size limit, one log line and metrics per request.

Pure ASGI (not BaseHTTPMiddleware) to keep the per-request cost small.
"""

from __future__ import annotations

import itertools
import re
import secrets
import time
from typing import Any

import structlog
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from backend.api.metrics import Metrics
from backend.api.problems import PROBLEM_MEDIA_TYPE, problem_body

_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
_log = structlog.get_logger("gpucloud.api")
# Request ids: a random per-process prefix and a counter (unique without a urandom call per request).
_ID_PREFIX = secrets.token_hex(8)
_id_counter = itertools.count()


class BodyTooLarge(StarletteHTTPException):
    """Raised while reading a body past the limit (an HTTPException so FastAPI passes it through)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body exceeds the limit of {limit} bytes")


class RequestMiddleware:
    """Assigns X-Request-Id, enforces the body limit, logs one JSON line and records metrics."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int, metrics: Metrics) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        request_id, content_length = None, None
        for name, value in scope["headers"]:
            if name == b"x-request-id":
                candidate = value.decode("latin-1")
                request_id = candidate if _REQUEST_ID.match(candidate) else None
            elif name == b"content-length":
                content_length = value
        request_id = request_id or f"req_{_ID_PREFIX}{next(_id_counter):016x}"
        state: dict[str, Any] = scope.setdefault("state", {})
        state["request_id"] = request_id
        status = {"code": 500, "started": False}
        id_header = (b"x-request-id", request_id.encode())

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"], status["started"] = message["status"], True
                message["headers"] = [*message.get("headers", []), id_header]
            await send(message)

        try:
            if content_length is not None and (
                not content_length.isdigit() or int(content_length) > self.max_body_bytes
            ):
                await self._too_large(send_with_id, request_id)
            else:
                await self.app(scope, self._limited(receive), send_with_id)
        except Exception:
            _log.exception("request.unhandled_error", request_id=request_id)
            if not status["started"]:
                await self._send_problem(
                    send_with_id,
                    500,
                    "internal_error",
                    "an internal error occurred; it has been logged",
                    request_id,
                )
        finally:
            self._observe(scope, state, status["code"], time.perf_counter() - started, request_id)

    def _limited(self, receive: Receive) -> Receive:
        received = 0
        limit = self.max_body_bytes

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
            return message

        return limited_receive

    async def _too_large(self, send: Send, request_id: str) -> None:
        await self._send_problem(
            send,
            413,
            "payload_too_large",
            f"the request body exceeds the limit of {self.max_body_bytes} bytes",
            request_id,
            field="body",
        )

    @staticmethod
    async def _send_problem(
        send: Send, status: int, code: str, detail: str, request_id: str, field: str | None = None
    ) -> None:
        body = problem_body(status=status, code=code, detail=detail, field=field, request_id=request_id)
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", PROBLEM_MEDIA_TYPE.encode()),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    def _observe(
        self, scope: Scope, state: dict[str, Any], status: int, seconds: float, request_id: str
    ) -> None:
        route = scope.get("route")
        template = getattr(route, "path", None) or "unmatched"
        method = scope["method"]
        self.metrics.observe(method=method, route=template, status=status, seconds=seconds)
        principal = state.get("principal")
        _log.info(
            "request",
            method=method,
            path=scope["path"],
            route=template,
            status=status,
            duration_ms=round(seconds * 1000, 2),
            request_id=request_id,
            project_id=getattr(principal, "project_id", None),
            api_key=getattr(principal, "key_prefix", None),
            client=(scope.get("client") or [None])[0],
        )
