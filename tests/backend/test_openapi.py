"""The committed OpenAPI document (proto/openapi.json) matches the app, and the app honours it.

schemathesis generates requests from the committed document for every operation (a bounded number of
examples each) and checks: no 5xx, only documented status codes, content types and response schemas.
"""

from __future__ import annotations

import json
from pathlib import Path

import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from backend.api.openapi import render_openapi
from tests.backend.conftest import Tenant

COMMITTED = Path(__file__).resolve().parents[2] / "proto" / "openapi.json"
schema = schemathesis.openapi.from_path(str(COMMITTED))


def test_openapi_committed_document_matches_the_app(app: FastAPI) -> None:
    served = json.loads(render_openapi(app))
    committed = json.loads(COMMITTED.read_text())
    assert served == committed, "proto/openapi.json is stale: run `bash scripts/generate.sh openapi`"


def test_openapi_is_served(app: FastAPI) -> None:
    from fastapi.testclient import TestClient

    assert TestClient(app).get("/openapi.json").json() == json.loads(render_openapi(app))


@schema.parametrize()
@settings(
    max_examples=12, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
)
def test_openapi_schemathesis_no_5xx_no_undocumented_responses(case, app: FastAPI, tenant: Tenant) -> None:  # type: ignore[no-untyped-def]
    case.headers = {**(case.headers or {}), "Authorization": f"Bearer {tenant.admin_key}"}
    case.call_and_validate(
        app=app,
        timeout=60,  # schemathesis' default 10 s is a correctness failure on a loaded 2-core machine
        checks=[
            not_a_server_error,
            status_code_conformance,
            content_type_conformance,
            response_schema_conformance,
            negative_data_rejection,
        ],
    )
