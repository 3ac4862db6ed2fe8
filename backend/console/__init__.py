"""The web console's files: one HTML shell, plain ES modules and CSS under `static/` (no build step).

`backend.api.console` serves them at `/console`; the modules call the same `/v1` API as every other
client, with the API key the user typed, kept in the browser's session storage.
"""

from __future__ import annotations

from pathlib import Path

STATIC_DIR = Path(__file__).with_name("static")
SHELL = STATIC_DIR / "index.html"
