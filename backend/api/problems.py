"""RFC 9457 problem documents: rendering ApiError, validation errors and framework errors alike."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from backend.api.route_methods import allowed_methods
from backend.domain.errors import ApiError, FieldError, more_errors

PROBLEM_MEDIA_TYPE = "application/problem+json"
_log = structlog.get_logger("gpucloud.api")

# pydantic error types -> our stable codes (anything else: "invalid_value").
_CODES = {
    "missing": "required",
    "extra_forbidden": "unknown_field",
    "json_invalid": "malformed_json",
    "literal_error": "invalid_choice",
    "enum": "invalid_choice",
    "string_pattern_mismatch": "invalid_format",
    "string_too_short": "too_short",
    "string_too_long": "too_long",
    "too_short": "too_short",
    "too_long": "too_long",
    "greater_than": "out_of_range",
    "greater_than_equal": "out_of_range",
    "less_than": "out_of_range",
    "less_than_equal": "out_of_range",
    "decimal_max_places": "out_of_range",
    "decimal_max_digits": "out_of_range",
    "int_from_float": "invalid_type",
    "date_time_out_of_range": "out_of_range",
}

# Field names come from the request (unknown keys, label keys): control characters are escaped and
# long names cut, so a problem document never carries terminal escapes or megabytes of key back.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_MAX_NAME = 64

_STATUS_TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    406: "Not Acceptable",
    409: "Conflict",
    412: "Precondition Failed",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    422: "Unprocessable Content",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


def problem_body(
    *,
    status: int,
    code: str,
    detail: str,
    title: str | None = None,
    field: str | None = None,
    errors: Sequence[FieldError] = (),
    request_id: str | None = None,
    extra: dict[str, Any] | None = None,
) -> bytes:
    """The JSON bytes of a problem document (control characters in its texts escaped)."""
    document: dict[str, Any] = {
        "type": "about:blank",
        "title": title or _STATUS_TITLES.get(status, "Error"),
        "status": status,
        "code": code,
        "detail": _escaped(detail),
        "field": _escaped(field) if field is not None else None,
        "errors": [
            {"field": _escaped(e.path), "code": e.code, "message": _escaped(e.message)} for e in errors
        ],
        "request_id": request_id,
    }
    document.update(extra or {})
    return json.dumps(document, separators=(",", ":"), default=str).encode()


def problem_response(
    *,
    status: int,
    code: str,
    detail: str,
    request_id: str | None,
    title: str | None = None,
    field: str | None = None,
    errors: Sequence[FieldError] = (),
    extra: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    """A problem+json response."""
    body = problem_body(
        status=status,
        code=code,
        detail=detail,
        title=title,
        field=field,
        errors=errors,
        request_id=request_id,
        extra=extra,
    )
    return Response(body, status_code=status, media_type=PROBLEM_MEDIA_TYPE, headers=headers)


def request_id_of(request: Request) -> str | None:
    """The id the middleware gave this request."""
    request_id = request.scope.get("state", {}).get("request_id")
    return str(request_id) if request_id is not None else None


def _escaped(text: str) -> str:
    """`text` with control characters written as `\\uXXXX` (details may quote ids or paths as sent)."""
    return _CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _safe_name(part: str) -> str:
    return _escaped(part if len(part) <= _MAX_NAME else part[:_MAX_NAME] + "...")


def _field_path(loc: Sequence[int | str]) -> str:
    parts = list(loc)
    if parts and parts[0] in ("body", "query", "path", "header", "cookie"):
        parts = parts[1:]
    path = ""
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            name = _safe_name(str(part))
            path += f".{name}" if path else name
    return path or "body"


def validation_field_errors(errors: Sequence[Any]) -> list[FieldError]:
    """pydantic/FastAPI error entries as FieldErrors with dotted paths and stable codes."""
    out = []
    for error in errors:
        loc = tuple(error.get("loc", ()))
        kind = str(error.get("type", ""))
        code = _CODES.get(kind, "invalid_type" if kind.endswith(("_type", "_parsing")) else "invalid_value")
        path = _field_path(loc)
        if kind == "extra_forbidden":
            message = f"unknown field {path!r}"
        elif kind == "json_invalid":
            path, message = (
                "body",
                f"the request body is not valid JSON: {error.get('ctx', {}).get('error', '')}",
            )
        else:
            message = f"{path}: {error.get('msg', 'invalid value')}"
        out.append(FieldError(path=path, code=code, message=message))
    return out


def error_response(exc: ApiError, request_id: str | None) -> Response:
    """The problem+json answer to `exc`."""
    return problem_response(
        status=exc.status,
        code=exc.code,
        detail=exc.detail,
        title=exc.title,
        field=exc.field,
        errors=exc.errors,
        extra=exc.extra,
        headers=exc.headers,
        request_id=request_id,
    )


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc, request_id_of(request))


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = validation_field_errors(exc.errors())
    malformed = any(e.code == "malformed_json" for e in errors)
    status = 400 if malformed else 422
    first = next((e for e in errors if e.code == "malformed_json"), errors[0]) if errors else None
    detail = first.message if first else "the request is invalid"
    if len(errors) > 1 and not malformed:
        detail = f"{detail} ({more_errors(len(errors) - 1)})"
    return problem_response(
        status=status,
        code=first.code if first else "validation_failed",
        detail=detail,
        field=first.path if first else None,
        errors=errors,
        request_id=request_id_of(request),
    )


def _unparsable_body(exc: StarletteHTTPException) -> str | None:
    """Why FastAPI could not parse the body (its 400 wraps the parser's exception), or None."""
    if exc.status_code != 400 or exc.__cause__ is None:
        return None
    if isinstance(exc.__cause__, UnicodeError):
        return "the request body is not valid JSON: it is not UTF-8 text"
    if isinstance(exc.__cause__, RecursionError):
        return "the request body is not valid JSON: it nests too deeply"
    return "the request body is not valid JSON"


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    unparsable = _unparsable_body(exc)
    if unparsable is not None:
        error = FieldError(path="body", code="malformed_json", message=unparsable)
        return problem_response(
            status=400,
            code=error.code,
            detail=error.message,
            field=error.path,
            errors=[error],
            request_id=request_id_of(request),
        )
    headers = dict(exc.headers or {})
    if exc.status_code == 405:  # the router names only the methods of the first route that matched
        headers["Allow"] = ", ".join(allowed_methods(request.app.routes, request.scope))
    codes = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large", 400: "bad_request"}
    detail = exc.detail if isinstance(exc.detail, str) else _STATUS_TITLES.get(exc.status_code, "Error")
    if exc.status_code == 404 and detail == "Not Found":
        detail = f"no route for {request.method} {request.url.path}"
    return problem_response(
        status=exc.status_code,
        code=codes.get(exc.status_code, "http_error"),
        detail=detail,
        headers=headers,
        request_id=request_id_of(request),
        field="body" if exc.status_code == 413 else None,
    )


def install_problem_handlers(app: FastAPI) -> None:
    """Render every error the app can raise as problem+json."""
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
