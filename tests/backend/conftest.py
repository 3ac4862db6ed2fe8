"""Backend fixtures: a fresh migrated database per test on SQLite and PostgreSQL, app and clients.

Migrations run once per session into a template (an SQLite file, a PostgreSQL template database);
each test then gets a copy, which is far faster than migrating per test.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from backend.app import create_app
from backend.billing import actions as billing_actions
from backend.billing import settings as billing_settings
from backend.domain.catalog import default_catalog, use_catalog
from backend.provisioning import autoscaler
from backend.provisioning import engine as provisioning_engine
from backend.provisioning import settings as engine_settings
from backend.services import auth, quotas
from backend.settings import Settings
from backend.store.db import make_engine, make_session_factory
from backend.store.migrate import upgrade_to_head

POSTGRES_ENV = "GPUCLOUD_TEST_POSTGRES_URL"


def _postgres_admin_url() -> str:
    url = os.environ.get(POSTGRES_ENV)
    if not url:
        pytest.fail(f"{POSTGRES_ENV} is not set: run the tests under scripts/with-postgres.sh")
    return url


@pytest.fixture(autouse=True)
def process_configuration() -> Iterator[None]:
    """Every test runs wired as a process is (billing acts through the engine, the autoscaler through
    quota admission: what `backend.runtime` installs), and the settings and catalog a runtime built
    during the test installed are put back afterwards, so no test sees another's."""
    billing_actions.use_engine(provisioning_engine)
    autoscaler.use_quota_admission(quotas.admit)
    engine, billing = engine_settings.configured(), billing_settings.configured()
    catalog = default_catalog()
    yield
    engine_settings.use(engine)
    billing_settings.use(billing)
    use_catalog(catalog)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sqlite-template") / "template.db"
    engine = make_engine(Settings(database_url=f"sqlite:///{path}"))
    upgrade_to_head(engine)
    with engine.connect() as connection:
        connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    engine.dispose()
    return path


@pytest.fixture(scope="session")
def postgres_template() -> Iterator[str]:
    admin_url = make_url(_postgres_admin_url())
    name = f"gpucloud_template_{uuid.uuid4().hex[:12]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    engine = create_engine(admin_url.set(database=name))
    upgrade_to_head(engine)
    engine.dispose()
    yield name
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, fully migrated database for this test; SQLite and PostgreSQL in turn."""
    if request.param == "sqlite":
        template: Path = request.getfixturevalue("sqlite_template")
        path = tmp_path / "gpucloud.db"
        shutil.copyfile(template, path)
        yield f"sqlite:///{path}"
        return
    template_name: str = request.getfixturevalue("postgres_template")
    admin_url = make_url(_postgres_admin_url())
    name = f"gpucloud_test_{uuid.uuid4().hex[:16]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{template_name}"'))
    yield admin_url.set(database=name).render_as_string(hide_password=False)
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    """Settings for an app on the test database, without the embedded engine worker and billing meter."""
    return Settings(
        database_url=database_url,
        data_dir=tmp_path / "data",
        embedded_worker=False,
        embedded_billing=False,
        auth_cache_seconds=0,
    )


@dataclass(frozen=True)
class Tenant:
    """A project with an admin and a member key."""

    project_id: str
    admin_key: str
    member_key: str


def make_tenant(settings: Settings, name: str) -> Tenant:
    """Create a project and its keys directly through the services."""
    engine = make_engine(settings)
    sessions = make_session_factory(engine, write=True)
    with sessions.begin() as session:
        project = auth.create_project(session=session, name=name)
        session.flush()
        _, admin_key = auth.create_api_key(session=session, project_name=name, role="admin")
        _, member_key = auth.create_api_key(session=session, project_name=name, role="member")
    engine.dispose()
    return Tenant(project.id, admin_key, member_key)


@pytest.fixture
def app(settings: Settings) -> Iterator[FastAPI]:
    application = create_app(settings)
    yield application
    application.state.gpucloud.engine.dispose()


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    """An unauthenticated client (runs the app's lifespan)."""
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture
def tenant(settings: Settings) -> Tenant:
    return make_tenant(settings, "acme")


@pytest.fixture
def admin(client: TestClient, tenant: Tenant) -> TestClient:
    """A client authenticated with the tenant's admin key."""
    return TestClient(
        client.app, headers={"Authorization": f"Bearer {tenant.admin_key}"}, raise_server_exceptions=False
    )


@pytest.fixture
def member(client: TestClient, tenant: Tenant) -> TestClient:
    """A client authenticated with the tenant's read-only member key."""
    return TestClient(
        client.app, headers={"Authorization": f"Bearer {tenant.member_key}"}, raise_server_exceptions=False
    )
