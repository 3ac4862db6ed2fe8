"""Opaque page tokens for keyset pagination: base64url of the last id seen and the collection kind."""

from __future__ import annotations

import base64
import binascii
import json

from backend.domain.errors import BadRequest


def encode_page_token(*, kind: str, after_id: str) -> str:
    """A token that resumes a listing of `kind` after `after_id`."""
    raw = json.dumps({"k": kind, "a": after_id}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_page_token(token: str, *, kind: str) -> str:
    """The id to resume after; 400 naming `page_token` when the token is not one of ours for `kind`."""
    try:
        padded = token + "=" * (-len(token) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
        if isinstance(data, dict) and data.get("k") == kind and isinstance(data.get("a"), str):
            return str(data["a"])
    except (ValueError, binascii.Error, UnicodeError):
        pass
    raise BadRequest(
        "page_token is not a token returned by this listing", field="page_token", code="invalid_page_token"
    )
