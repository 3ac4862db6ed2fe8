"""Keyset-paginated listings: page_size/page_token in, `{items, next_page_token}` out."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from backend.domain.pagination import decode_page_token, encode_page_token
from backend.settings import Settings


def page_args(
    settings: Settings, *, kind: str, page_size: int | None, page_token: str | None
) -> tuple[str | None, int]:
    """(after_id, limit) for a listing request."""
    after_id = decode_page_token(page_token, kind=kind) if page_token else None
    return after_id, min(page_size or settings.default_page_size, settings.max_page_size)


def page_body(
    kind: str, rows: Sequence[Any], has_more: bool, to_item: Callable[[Any], Any]
) -> dict[str, Any]:
    """The listing's response: items and the token of the next page."""
    token = encode_page_token(kind=kind, after_id=rows[-1].id) if has_more and rows else None
    return {"items": [to_item(row) for row in rows], "next_page_token": token}
