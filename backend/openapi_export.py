"""Write the committed OpenAPI document (`scripts/generate.sh openapi`): builds the app, needs no database.

It sits beside `backend.app`, above `backend.api`: the API layer renders the document of an app it is
given and never imports the app.
"""

from __future__ import annotations

import sys
from pathlib import Path

from backend.api.openapi import render_openapi
from backend.app import create_app
from backend.settings import Settings


def export_openapi(path: str) -> None:
    """Render the app's document to `path`."""
    app = create_app(Settings(database_url="sqlite://", embedded_worker=False))
    try:
        Path(path).write_text(render_openapi(app))
    finally:
        app.state.gpucloud.engine.dispose()


if __name__ == "__main__":
    export_openapi(sys.argv[1] if len(sys.argv) > 1 else "proto/openapi.json")
