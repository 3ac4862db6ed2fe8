"""The OpenAPI document: errors as problem+json; committed as proto/openapi.json."""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from backend.domain.input_rules import contract

PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}


def build_openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document with every 4xx/5xx response described as `application/problem+json`."""
    document = get_openapi(
        title=app.title, version=app.version, description=app.description, routes=app.routes
    )
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            if "requestBody" in operation:  # the middleware answers a non-JSON body 415
                operation["responses"].setdefault(
                    "415", {"description": "The body is not `application/json` (or has no Content-Type)"}
                )
            for status, response in operation.get("responses", {}).items():
                if status.isdigit() and int(status) >= 400:
                    response["content"] = {"application/problem+json": {"schema": PROBLEM_REF}}
                    if status == "422":
                        response["description"] = "Invalid input; `field` names the offending field"
    schemas = document.get("components", {}).get("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    for name, rules in contract().items():
        schemas[name]["x-gpucloud-rules"] = rules  # what JSON Schema cannot say; see domain.input_rules
    return document


def install_openapi(app: FastAPI) -> None:
    """Serve `build_openapi` at /openapi.json (built once)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build_openapi(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def render_openapi(app: FastAPI) -> str:
    """The committed form: sorted keys, two-space indent, trailing newline."""
    return json.dumps(app.openapi(), indent=2, sort_keys=True) + "\n"


def export_openapi(path: str) -> None:
    """Write the committed document (`scripts/generate.sh openapi`); needs no database."""
    from pathlib import Path

    from backend.app import create_app
    from backend.settings import Settings

    app = create_app(Settings(database_url="sqlite://", embedded_worker=False))
    Path(path).write_text(render_openapi(app))
    app.state.gpucloud.engine.dispose()


if __name__ == "__main__":
    import sys

    export_openapi(sys.argv[1] if len(sys.argv) > 1 else "proto/openapi.json")
