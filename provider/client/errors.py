"""Typed errors of the backend API client, built from RFC 9457 problem documents.

Every failure of a call is an `ApiError` (transport failures included, as `TransportError`), so a caller
turning errors into user-facing messages needs one `except`. Waiter outcomes are `WaitError`s.
"""

from __future__ import annotations

from typing import Any


class ClientError(Exception):
    """Base of everything the client raises."""


class ApiError(ClientError):
    """The API refused or failed a request.

    `status` is the HTTP status (0 when no response arrived), `code` the API's stable machine code,
    `field` the offending field's path when one field is to blame, `errors` every field error of a 422,
    `extra` any further members of the problem document (e.g. the capacity that is available).
    """

    default_code = "api_error"

    def __init__(
        self,
        *,
        status: int,
        code: str | None = None,
        title: str = "",
        detail: str = "",
        field: str | None = None,
        errors: list[dict[str, Any]] | None = None,
        request_id: str | None = None,
        retry_after: float | None = None,
        extra: dict[str, Any] | None = None,
        method: str = "",
        path: str = "",
    ) -> None:
        self.status = status
        self.code = code or self.default_code
        self.title = title
        self.detail = detail
        self.field = field
        self.errors = errors or []
        self.request_id = request_id
        self.retry_after = retry_after
        self.extra = extra or {}
        self.method = method
        self.path = path
        super().__init__(self._summary())

    def _summary(self) -> str:
        where = f"{self.method} {self.path}: " if self.method else ""
        status = f"{self.status} " if self.status else ""
        text = self.detail or self.title or "request failed"
        field = f" (field {self.field})" if self.field else ""
        return f"{where}{status}{self.code}: {text}{field}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={self.status}, code={self.code!r}, detail={self.detail!r})"


class BadRequest(ApiError):
    default_code = "bad_request"


class Unauthorized(ApiError):
    default_code = "unauthorized"


class Forbidden(ApiError):
    default_code = "forbidden"


class NotFound(ApiError):
    default_code = "not_found"


class Conflict(ApiError):
    default_code = "conflict"


class InsufficientCapacity(Conflict):
    """The region cannot place the requested nodes now; `extra` says what is available."""

    default_code = "insufficient_capacity"


class PreconditionFailed(ApiError):
    """`If-Match` did not match: someone changed the object since it was read."""

    default_code = "precondition_failed"


class ValidationFailed(ApiError):
    """422: the request names something invalid; `field`/`errors` say what."""

    default_code = "validation_failed"


class RateLimited(ApiError):
    default_code = "rate_limited"


class ServerError(ApiError):
    default_code = "server_error"


# TransportError's code when the API's TLS certificate did not verify: retrying cannot help.
TLS_VERIFICATION_FAILED = "tls_verification_failed"


class TransportError(ApiError):
    """No usable response: connection refused, timeout, broken connection (after retries).
    `may_have_arrived` is False when no attempt left this process (every one failed to connect): the
    request then certainly did nothing."""

    default_code = "transport_error"

    def __init__(self, *, may_have_arrived: bool = True, **fields: Any) -> None:
        super().__init__(**fields)
        self.may_have_arrived = may_have_arrived


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    412: PreconditionFailed,
    422: ValidationFailed,
    429: RateLimited,
}
_BY_CODE: dict[str, type[ApiError]] = {"insufficient_capacity": InsufficientCapacity}


def error_class_for(status: int, code: str | None) -> type[ApiError]:
    """The most specific error class for a status and problem code."""
    if code and code in _BY_CODE:
        return _BY_CODE[code]
    if status >= 500:
        return ServerError
    return _BY_STATUS.get(status, ApiError)


class WaitError(ClientError):
    """A wait ended without the resource reaching the wanted state; `last` is what was seen last."""

    def __init__(self, message: str, last: Any = None) -> None:
        super().__init__(message)
        self.last = last


class WaitTimeout(WaitError):
    pass


class WaitCancelled(WaitError):
    pass


class WaitFailed(WaitError):
    """The resource reached a terminal failure state (e.g. a cluster in FAILED)."""
