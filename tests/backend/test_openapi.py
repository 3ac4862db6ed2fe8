"""The committed OpenAPI document (proto/openapi.json) matches the app, and the app honours it.

schemathesis generates requests from the committed document for every operation (a bounded number of
examples each) and runs every built-in check on SQLite and PostgreSQL.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, settings
from schemathesis import Case, CheckContext, Response
from schemathesis.python.asgi import shutdown_lifespans

from backend.api.openapi import render_openapi
from tests.backend.conftest import Tenant

COMMITTED = Path(__file__).resolve().parents[2] / "proto" / "openapi.json"


def test_openapi_committed_document_matches_the_app(app: FastAPI) -> None:
    served = json.loads(render_openapi(app))
    committed = json.loads(COMMITTED.read_text())
    assert served == committed, "proto/openapi.json is stale: run `bash scripts/generate.sh openapi`"


def test_openapi_is_served(app: FastAPI) -> None:
    from fastapi.testclient import TestClient

    assert TestClient(app).get("/openapi.json").json() == json.loads(render_openapi(app))


def test_openapi_api_layer_never_imports_the_app() -> None:
    """The document is rendered from an app handed in; only backend.openapi_export builds one."""
    api = Path(__file__).resolve().parents[2] / "backend" / "api"
    importers = [
        path.name
        for path in sorted(api.glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if (isinstance(node, ast.ImportFrom) and node.module == "backend.app")
        or (isinstance(node, ast.Import) and any(alias.name == "backend.app" for alias in node.names))
    ]
    assert importers == []


def test_openapi_412_is_documented_exactly_where_if_match_is_taken() -> None:
    for path, operations in json.loads(COMMITTED.read_text())["paths"].items():
        for method, operation in operations.items():
            takes_if_match = any(p["name"] == "If-Match" for p in operation.get("parameters", []))
            assert ("412" in operation["responses"]) == takes_if_match, (method, path)


# Rejections JSON Schema cannot state (an unknown region, a page token this listing never issued, ttl and
# expires_at together, a date in the past) are 400/422 for schema-valid input: allowed, as long as the
# problem's code is such a rule. A code of the request models' own validation is the spec being looser
# than the server, which `schema_valid_input_passes_validation` still fails.
VALIDATION_CODES = {
    "required", "unknown_field", "malformed_json", "invalid_choice", "invalid_format", "too_short",
    "too_long", "invalid_type",
}


def schema_valid_input_passes_validation(ctx: CheckContext, response: Response, case: Case[Any]) -> None:
    """A request the document says is valid never fails the request models' validation."""
    positive = case.meta is not None and case.meta.generation.mode.is_positive
    if not positive or response.status_code not in (400, 422):
        return
    problem = json.loads(response.content)
    if problem.get("code") == "invalid_type" and _integral_float(case.body, problem.get("field", "")):
        return  # JSON Schema counts 69.0 an integer; the API wants 69 (it cannot be said in the document)
    code = problem.get("code")
    assert code not in VALIDATION_CODES, (
        f"the document is looser than the server: schema-valid input answered {response.status_code} "
        f"{code}: {problem.get('detail')}"
    )


def _integral_float(body: object, field: str) -> bool:
    value = body
    for name, index in re.findall(r"([^.\[\]]+)|\[(\d+)\]", field):
        try:
            value = value[int(index)] if index else value[name]  # type: ignore[index]
        except (KeyError, IndexError, TypeError):
            return False
    return isinstance(value, float) and value.is_integer()


# The committed document, bound in each test to that test's app (the checks send requests of their own).
schema = schemathesis.openapi.from_path(str(COMMITTED))
_acceptance = schema.config.checks.positive_data_acceptance
_acceptance.expected_statuses = [*_acceptance.expected_statuses, "400", "422"]


@pytest.fixture
def ended_lifespan(app: FastAPI) -> Iterator[None]:
    """schemathesis' ASGI client starts the app's lifespan and keeps it for the process: it ends with
    the test (before the app and its database go), as a server's would."""
    yield
    shutdown_lifespans()


@schema.parametrize()
@settings(
    max_examples=3, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
)
def test_openapi_schemathesis_all_checks(
    case: Case[Any], app: FastAPI, tenant: Tenant, ended_lifespan: None
) -> None:
    """Every built-in check (no 5xx, documented statuses, headers, content types and bodies, invalid
    input refused, valid input accepted, 405 with `Allow`, credentials enforced) and ours."""
    if case.headers and "Authorization" in case.headers:  # generated credentials: the tenant's real key
        case.headers["Authorization"] = f"Bearer {tenant.admin_key}"
    case.operation.schema.app = app
    # schemathesis' default 10 s is a correctness failure on a loaded 2-core machine
    case.call_and_validate(
        app=app, base_url="http://testserver", timeout=60,
        additional_checks=[schema_valid_input_passes_validation],
    )
