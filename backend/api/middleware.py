"""The outermost ASGI layer: request ids, body framing and limits, the unauthenticated rate limit, one
log line and metrics per request.

Pure ASGI (not BaseHTTPMiddleware) to keep the per-request cost small.
"""

from __future__ import annotations

import itertools
import re
import secrets
import time
from typing import Any
from urllib.parse import parse_qsl

import structlog
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from backend.api.metrics import Metrics
from backend.api.problems import PROBLEM_MEDIA_TYPE, problem_body
from backend.domain.errors import ApiError, BadRequest, PayloadTooLarge
from backend.services.rate_limit import AddressRateLimiter

_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
_log = structlog.get_logger("gpucloud.api")
# Request ids: a random per-process prefix and a counter (unique without a urandom call per request).
_ID_PREFIX = secrets.token_hex(8)
_id_counter = itertools.count()


def new_request_id() -> str:
    """A fresh request id (the server's own, when the client sent none)."""
    return f"req_{_ID_PREFIX}{next(_id_counter):016x}"


class UnsupportedMediaType(ApiError):
    status, code, title = 415, "unsupported_media_type", "Unsupported Media Type"


class BodyTooLarge(StarletteHTTPException):
    """Raised while reading a body past the limit (an HTTPException so FastAPI passes it through)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body exceeds the limit of {limit} bytes")


def is_json_media_type(content_type: bytes) -> bool:
    """True for `application/json` and `application/<anything>+json`, parameters allowed."""
    media_type = content_type.split(b";", 1)[0].strip().lower()
    return media_type == b"application/json" or (
        media_type.startswith(b"application/") and media_type.endswith(b"+json")
    )


def _repeated_query_parameter(query_string: bytes) -> ApiError | None:
    """No query parameter of this API is a list: one given twice is refused, not silently "last wins"."""
    seen: set[str] = set()
    for name, _ in parse_qsl(query_string.decode("latin-1"), keep_blank_values=True):
        if name in seen:
            return BadRequest(f"query parameter {name} is given more than once: give it once",
                              field=name, code="repeated_query_parameter")
        seen.add(name)
    return None


class RequestMiddleware:
    """Assigns X-Request-Id, checks body framing, size and type, rate limits requests without a valid
    key per client address, logs one JSON line and records metrics."""

    def __init__(
        self, app: ASGIApp, *, max_body_bytes: int, metrics: Metrics, address_limiter: AddressRateLimiter
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.metrics = metrics
        self.address_limiter = address_limiter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        request_id = None
        content_length = transfer_encoding = content_type = None
        has_credentials = False
        for name, value in scope["headers"]:
            if name == b"x-request-id":
                candidate = value.decode("latin-1")
                request_id = candidate if _REQUEST_ID.match(candidate) else None
            elif name == b"content-length":
                content_length = value
            elif name == b"transfer-encoding":
                transfer_encoding = value
            elif name == b"content-type":
                content_type = value
            elif name == b"authorization":
                has_credentials = True
        request_id = request_id or new_request_id()
        state: dict[str, Any] = scope.setdefault("state", {})
        state["request_id"] = request_id
        status = {"code": 500, "started": False}
        id_header = (b"x-request-id", request_id.encode())
        address = str((scope.get("client") or ["unknown"])[0])
        # An address past its budget is still served when it authenticates (a valid key has its own
        # limit); whatever else it asked is answered 429 in place of the route's unauthenticated answer.
        over_budget = self.address_limiter.limited(address)
        replaced = False

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"], status["started"] = message["status"], True
                message["headers"] = [*message.get("headers", []), id_header]
            await send(message)

        async def send_unless_over_budget(message: Message) -> None:
            nonlocal replaced
            if replaced:
                return  # the rest of the response the 429 replaced
            if (
                message["type"] == "http.response.start"
                and over_budget is not None
                and "principal" not in state
            ):
                replaced = True
                await self._send_error(send_with_id, over_budget, request_id)
                return
            await send_with_id(message)

        try:
            problem = self._framing_problem(content_length, transfer_encoding, content_type)
            problem = problem or _repeated_query_parameter(scope.get("query_string", b""))
            if problem is None and over_budget is not None and not has_credentials:
                problem = over_budget
            if problem is not None:
                await self._send_error(send_with_id, problem, request_id)
            else:
                await self.app(scope, self._limited(receive), send_unless_over_budget)
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
            if state.get("principal") is None:
                self.address_limiter.count(address)
            self._observe(scope, state, status["code"], time.perf_counter() - started, request_id)

    def _framing_problem(
        self, content_length: bytes | None, transfer_encoding: bytes | None, content_type: bytes | None
    ) -> ApiError | None:
        """What is wrong with how the body is framed, sized or typed, before any of it is read."""
        if content_length is not None and transfer_encoding is not None:
            # RFC 9112 6.1: both at once is how requests are smuggled past proxies; refuse, then close.
            return BadRequest(
                "send either Content-Length or Transfer-Encoding, not both",
                field="Transfer-Encoding",
                code="ambiguous_framing",
            )
        if content_length is not None and (
            not content_length.isdigit() or int(content_length) > self.max_body_bytes
        ):
            return PayloadTooLarge(
                f"the request body exceeds the limit of {self.max_body_bytes} bytes", field="body"
            )
        has_body = transfer_encoding is not None or (content_length is not None and int(content_length) > 0)
        if has_body and (content_type is None or not is_json_media_type(content_type)):
            return UnsupportedMediaType(
                "request bodies must be JSON: send `Content-Type: application/json`", field="Content-Type"
            )
        return None

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

    @classmethod
    async def _send_error(cls, send: Send, error: ApiError, request_id: str) -> None:
        await cls._send_problem(
            send, error.status, error.code, error.detail, request_id, error.field, error.headers
        )

    @staticmethod
    async def _send_problem(
        send: Send,
        status: int,
        code: str,
        detail: str,
        request_id: str,
        field: str | None = None,
        headers: dict[str, str] | None = None,
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
                    *((name.lower().encode(), value.encode()) for name, value in (headers or {}).items()),
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
