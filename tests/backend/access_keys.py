"""API keys of any role and team scope for access tests, made through the services as the CLI does."""

from __future__ import annotations

from fastapi.testclient import TestClient

from backend.domain.access import Scope
from backend.services import auth
from backend.settings import Settings
from backend.store.db import make_engine, make_session_factory


def make_key(settings: Settings, project: str, role: str, scope: str | None = None) -> str:
    """A new key of `project` with `role`, limited to `scope` (`team=nlp`) when given."""
    engine = make_engine(settings)
    try:
        with make_session_factory(engine, write=True).begin() as session:
            _, key = auth.create_api_key(
                session=session, project_name=project, role=role, scope=Scope.parse(scope) if scope else None
            )
    finally:
        engine.dispose()
    return key


def client_for(client: TestClient, key: str) -> TestClient:
    """A client of the same app sending `key`."""
    return TestClient(client.app, headers={"Authorization": f"Bearer {key}"}, raise_server_exceptions=False)
