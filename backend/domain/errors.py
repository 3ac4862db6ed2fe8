"""API errors every backend layer raises; the API renders them as RFC 9457 problem documents."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FieldError:
    """One problem with one input field; `path` is dotted, e.g. "billing.duration_days"."""

    path: str
    code: str
    message: str


class ApiError(Exception):
    """An error with an HTTP status, a stable machine `code` and, when one field is to blame, its path."""

    status: int = 500
    code: str = "internal_error"
    title: str = "Internal Server Error"

    def __init__(
        self,
        detail: str,
        field: str | None = None,
        errors: list[FieldError] | None = None,
        *,
        code: str | None = None,
        headers: dict[str, str] | None = None,
        extra: dict[str, object] | None = None,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.field = field
        self.errors = list(errors or [])
        if code is not None:
            self.code = code
        self.headers = dict(headers or {})
        # Additional members of the problem document (e.g. the computed cost, what capacity is free).
        self.extra = dict(extra or {})


class BadRequest(ApiError):
    status, code, title = 400, "bad_request", "Bad Request"


class Unauthorized(ApiError):
    status, code, title = 401, "unauthorized", "Unauthorized"


class Forbidden(ApiError):
    status, code, title = 403, "forbidden", "Forbidden"


class NotFound(ApiError):
    status, code, title = 404, "not_found", "Not Found"


class Conflict(ApiError):
    status, code, title = 409, "conflict", "Conflict"


class PreconditionFailed(ApiError):
    status, code, title = 412, "precondition_failed", "Precondition Failed"


class PayloadTooLarge(ApiError):
    status, code, title = 413, "payload_too_large", "Content Too Large"


class Unprocessable(ApiError):
    status, code, title = 422, "validation_failed", "Unprocessable Content"


class RateLimited(ApiError):
    status, code, title = 429, "rate_limited", "Too Many Requests"


class Unavailable(ApiError):
    status, code, title = 503, "unavailable", "Service Unavailable"


def more_errors(count: int) -> str:
    """The tail of a 422's detail that says how many other field errors `errors` lists."""
    return f"and {count} more error{'s' if count > 1 else ''}, listed in errors"


def validation_failed(errors: list[FieldError]) -> Unprocessable:
    """A 422 naming every offending field; `field` and `code` come from the first one."""
    first = errors[0]
    detail = first.message if len(errors) == 1 else f"{first.message} ({more_errors(len(errors) - 1)})"
    return Unprocessable(detail, field=first.path, errors=errors, code=first.code)
