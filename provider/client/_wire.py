"""Wire helpers: JSON bodies with exact decimals, problem documents, Retry-After, Server-Sent Events."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from provider.client.errors import ApiError, error_class_for

if TYPE_CHECKING:  # httpx is imported only once a client is built (see http.py)
    import httpx

PROBLEM_MEDIA_TYPE = "application/problem+json"
_PROBLEM_MEMBERS = frozenset(
    {"type", "title", "status", "code", "detail", "field", "errors", "request_id", "instance"}
)


def dumps(value: Any) -> bytes:
    """JSON bytes; Decimals are written as exact number text (money must not pass through float)."""
    return _encode(value).encode()


def _encode(value: Any) -> str:
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError(f"{value} cannot be sent as JSON")
        return format(value, "f")
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{json.dumps(str(k))}:{_encode(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple | set | frozenset):
        return "[" + ",".join(_encode(v) for v in value) + "]"
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{value} cannot be sent as JSON")
    return json.dumps(value)


def loads(content: bytes) -> Any:
    """Parse a JSON body; non-integral numbers become Decimal so they stay exact."""
    if not content:
        return None
    return json.loads(content, parse_float=Decimal)


def retry_after_seconds(response: httpx.Response, *, now: datetime | None = None) -> float | None:
    """Retry-After as seconds from now: delta-seconds or an HTTP date; None when absent or unreadable."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    # Imported here: email.utils costs ~5 ms at every provider launch, and dates in Retry-After are rare.
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def error_from_response(response: httpx.Response, *, method: str, path: str) -> ApiError:
    """The typed error for a non-2xx response, from its problem document when it has one."""
    document: Any = None
    content_type = response.headers.get("content-type", "")
    if "json" in content_type:
        try:
            document = loads(response.content)
        except ValueError:
            document = None
    status = response.status_code
    request_id = response.headers.get("x-request-id")
    if not isinstance(document, dict):
        text = response.text.strip()
        return error_class_for(status, None)(
            status=status,
            title=response.reason_phrase,
            detail=text[:300] if text else response.reason_phrase,
            request_id=request_id,
            retry_after=retry_after_seconds(response),
            method=method,
            path=path,
        )
    code = document.get("code") if isinstance(document.get("code"), str) else None
    errors = document.get("errors")
    return error_class_for(status, code)(
        status=status,
        code=code,
        title=str(document.get("title") or response.reason_phrase),
        detail=str(document.get("detail") or ""),
        field=document.get("field") if isinstance(document.get("field"), str) else None,
        errors=[e for e in errors if isinstance(e, dict)] if isinstance(errors, list) else [],
        request_id=document.get("request_id") or request_id,
        retry_after=retry_after_seconds(response),
        extra={k: v for k, v in document.items() if k not in _PROBLEM_MEMBERS},
        method=method,
        path=path,
    )


def event_data(lines: Iterable[str]) -> Iterator[str]:
    """The `data` of each Server-Sent Event in a stream's lines (WHATWG rules: `data:` lines joined by
    newlines, dispatched at a blank line; comments such as keep-alives and other fields ignored; an event
    the stream ends in the middle of is dropped)."""
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
            data = []
            continue
        name, _, value = line.partition(":")
        if name == "data":
            data.append(value[1:] if value.startswith(" ") else value)
