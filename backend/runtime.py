"""The composition root: everything a process runs on, built once at start from one `Settings`.

`serve`, `worker`, `billing-run` and the admin commands each build one `Runtime` (backend/cli.py) and hand
it down; `create_app(settings)` builds one for the settings it is given. Building it is the only time the
configuration is read: the database engine and its session factories, the clock, the catalog (the
built-in one or `GPUCLOUD_CATALOG_FILE`), the provisioning driver (asked of the driver registry, built on
first use) and the billing settings. Code deep in the engine and the credit guards reads the same values
through the holders the runtime fills (`backend.provisioning.settings`, `backend.billing.settings`,
`backend.domain.catalog.use_catalog`), and billing reaches the engine through the one it installs in
`backend.billing.actions` (billing and provisioning are independent layers) and the autoscaler through
the quota admission it installs (a service, above the engine): one runtime per process, the latest
built is in force.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from backend.billing import actions as billing_actions
from backend.billing import settings as billing_settings
from backend.billing.pricing_catalog import price_book_from_catalog
from backend.billing.worker import MeteringLoop
from backend.domain.catalog import Catalog, catalog_from_dict, default_catalog, use_catalog
from backend.domain.clock import SYSTEM_CLOCK, Clock
from backend.provisioning import autoscaler
from backend.provisioning import engine as provisioning_engine
from backend.provisioning import settings as engine_settings
from backend.provisioning.driver import ProvisioningDriver
from backend.provisioning.drivers import make_driver
from backend.provisioning.worker import EngineWorker
from backend.services import quotas
from backend.settings import BillingSettings, Settings
from backend.store.db import make_engine, make_session_factory


@dataclass
class Runtime:
    """One process's configuration and the resources built from it; `close()` releases them."""

    settings: Settings
    db: Engine
    # Reads use plain transactions; writes take SQLite's write lock at BEGIN (no upgrade deadlocks).
    read_sessions: sessionmaker[Session]
    write_sessions: sessionmaker[Session]
    catalog: Catalog
    clock: Clock = field(default=SYSTEM_CLOCK)

    @property
    def billing(self) -> BillingSettings:
        return self.settings.billing

    @cached_property
    def driver(self) -> ProvisioningDriver:
        """The configured provisioning driver, built on first use (a command that provisions nothing,
        such as `create-project`, never builds one; the local driver checks the host when built)."""
        return make_driver(self.settings.engine, data_dir=self.settings.data_dir, clock=self.clock)

    def engine_worker(self) -> EngineWorker:
        """A provisioning engine worker on this runtime (`worker`, and `serve`'s embedded one)."""
        return EngineWorker(self.write_sessions, self.settings.engine, catalog=self.catalog,
                            driver=self.driver, clock=self.clock)

    def metering_loop(self) -> MeteringLoop:
        """The billing metering loop on this runtime (`billing-run`, and `serve`'s embedded one)."""
        return MeteringLoop(sessions=self.write_sessions, settings=self.settings.billing, clock=self.clock,
                            prices=price_book_from_catalog(self.catalog))

    def close(self) -> None:
        """Close the database connections (the process is done with the store)."""
        self.db.dispose()


class CatalogFileError(ValueError):
    """GPUCLOUD_CATALOG_FILE cannot be read or is not a valid catalog (the message says which and why)."""


def load_catalog(path: Path | None) -> Catalog:
    """The catalog in the JSON file `path` (the shape of `catalog_to_dict`); None: the catalog in force
    (the built-in one, unless this process installed another: a test does)."""
    if path is None:
        return default_catalog()
    try:
        return catalog_from_dict(json.loads(path.expanduser().read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError) as error:  # unreadable, not JSON, not a catalog
        raise CatalogFileError(f"GPUCLOUD_CATALOG_FILE {str(path)!r}: {error}") from error


def configure_process(settings: Settings) -> Catalog:
    """Install `settings`' engine and billing sections and catalog as this process's (see the module
    doc), and the engine billing acts through; returns the catalog. No store is opened: commands call it
    before checking the data dir."""
    catalog = load_catalog(settings.catalog_file)
    use_catalog(catalog)
    engine_settings.use(settings.engine)
    billing_settings.use(settings.billing)
    billing_actions.use_engine(provisioning_engine)
    autoscaler.use_quota_admission(quotas.admit)
    return catalog


def build_runtime(settings: Settings, *, clock: Clock = SYSTEM_CLOCK) -> Runtime:
    """The runtime `settings` configure, on `clock`; installs them as this process's
    (`configure_process`)."""
    catalog = configure_process(settings)
    db = make_engine(settings)
    return Runtime(
        settings=settings,
        db=db,
        read_sessions=make_session_factory(db),
        write_sessions=make_session_factory(db, write=True),
        catalog=catalog,
        clock=clock,
    )
