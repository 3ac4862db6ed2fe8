"""The OpenAPI document: errors as problem+json; committed as proto/openapi.json (written by
`backend.openapi_export`, which builds the app: this module takes the app and never imports it)."""

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
            _document_precondition(operation)
            for status, response in operation.get("responses", {}).items():
                if status.isdigit() and int(status) >= 400:
                    response["content"] = {"application/problem+json": {"schema": PROBLEM_REF}}
                    if status == "422":
                        response["description"] = "Invalid input; `field` names the offending field"
    schemas = document.get("components", {}).get("schemas", {})
    for schema in schemas.values():
        _as_strict_as_the_server(schema)
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    for name, rules in contract().items():
        schemas[name]["x-gpucloud-rules"] = rules  # what JSON Schema cannot say; see domain.input_rules
    return document


def _as_strict_as_the_server(schema: Any) -> None:
    """Say in JSON Schema what pydantic's document leaves out but the server checks: every key of a map
    with key rules follows them (pydantic states the rule in `patternProperties` only, which leaves
    other keys open)."""
    if isinstance(schema, list):
        for item in schema:
            _as_strict_as_the_server(item)
        return
    if not isinstance(schema, dict):
        return
    keys = schema.get("patternProperties")
    if isinstance(keys, dict) and len(keys) == 1:  # pydantic's dict with constrained keys
        schema.setdefault("propertyNames", {}).setdefault("pattern", next(iter(keys)))
    for value in schema.values():
        _as_strict_as_the_server(value)


def _document_precondition(operation: dict[str, Any]) -> None:
    """412 is answered exactly where an `If-Match` is taken: documented there, and only there."""
    responses = operation["responses"]
    if any(p.get("in") == "header" and p.get("name") == "If-Match" for p in operation.get("parameters", [])):
        responses.setdefault("412", {"description": "If-Match does not match the current ETag"})
    else:
        responses.pop("412", None)


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
