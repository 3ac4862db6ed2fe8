"""Rewrite the role matrix of docs/api.md from the app's routes (`scripts/generate.sh roles`).

    .venv/bin/python scripts/role_matrix.py [docs/api.md]

Builds the app here, on top of every layer, and hands it to `backend.api.role_matrix`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from backend.api.role_matrix import rewrite
from backend.app import create_app
from backend.settings import Settings


def main(path: str) -> None:
    app = create_app(Settings(database_url="sqlite://", embedded_worker=False))
    try:
        rewrite(Path(path), app)
    finally:
        app.state.gpucloud.engine.dispose()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "docs/api.md")
