"""The web console at `/console`: the HTML shell and its static modules, with strict security headers.

The console is files only: every page is drawn in the browser from the `/v1` API with the user's key,
so it can do nothing the key cannot. The Content-Security-Policy allows scripts, styles and requests
from this origin only (no inline script or style, no eval, no framing); data is only ever put into the
page as text.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from fastapi import APIRouter, Request
from starlette.responses import Response

from backend.console import SHELL, STATIC_DIR
from backend.domain.errors import NotFound

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    # Revalidated on every load (cheap: 304 by ETag), so an upgraded backend never serves stale modules.
    "Cache-Control": "no-cache",
}
MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
}

router = APIRouter(include_in_schema=False)


def _file_response(request: Request, path: Path) -> Response:
    content = path.read_bytes()
    etag = '"' + hashlib.sha256(content).hexdigest()[:32] + '"'
    headers = {**SECURITY_HEADERS, "ETag": etag}
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers=headers)
    return Response(content, media_type=MEDIA_TYPES[path.suffix], headers=headers)


@router.api_route("/console", methods=["GET", "HEAD"])
@router.api_route("/console/", methods=["GET", "HEAD"])
def console_shell(request: Request) -> Response:
    """The console's single HTML page; the hash route (#/clusters, ...) picks what it shows."""
    return _file_response(request, SHELL)


@router.api_route("/console/static/{file_path:path}", methods=["GET", "HEAD"])
def console_static(file_path: str, request: Request) -> Response:
    """One of the console's modules, stylesheets or images (only files under static/, known types)."""
    root = STATIC_DIR.resolve()
    path = (root / file_path).resolve()
    if not path.is_relative_to(root) or not path.is_file() or path.suffix not in MEDIA_TYPES:
        raise NotFound(f"the console has no file {file_path!r}", field="path", code="no_such_file")
    return _file_response(request, path)
