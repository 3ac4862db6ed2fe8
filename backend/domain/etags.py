"""ETags derived from a row's generation (bumped on every write of what the user declared)."""

from __future__ import annotations


def etag_for(generation: int) -> str:
    """The strong ETag of a representation at `generation`."""
    return f'"{generation}"'


def if_match_satisfied(if_match: str | None, current: str) -> bool:
    """RFC 9110 If-Match: absent or `*` passes; otherwise one listed tag must equal `current`.

    Weak tags (W/"n") are compared by their opaque part: our tags only change with the stored spec.
    """
    if if_match is None or if_match.strip() == "*":
        return True
    for candidate in if_match.split(","):
        tag = candidate.strip()
        if tag.startswith("W/"):
            tag = tag[2:]
        if tag == current:
            return True
    return False
