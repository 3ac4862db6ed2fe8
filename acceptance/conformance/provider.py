"""The conformance provider definition."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from acceptance.conformance.actions import NoteAction
from acceptance.conformance.data import ConformanceData
from acceptance.conformance.everything import EverythingLister, EverythingResource
from acceptance.conformance.extras import EchoDataSource, JoinFunction, TokenEphemeral
from acceptance.conformance.resources import (
    FailingResource,
    RenamedResource,
    SimpleResource,
    SlowResource,
    VersionedResource,
)
from acceptance.conformance.store import Store
from provider.cty import is_unknown
from provider.framework import (
    Action,
    Context,
    DataSource,
    EphemeralResource,
    Function,
    ListResource,
    Provider,
    Resource,
    Schema,
    StringAttribute,
)


class ConformanceProvider(Provider):
    type_name = "conformance"
    version = "0.1.0"
    schema = Schema(
        description="Test-only provider exercising the framework through real Terraform.",
        attributes={
            "store": StringAttribute(
                optional=True, description="Path of the JSON file holding remote objects."
            ),
            "token": StringAttribute(
                optional=True, sensitive=True, description="A credential (may be ephemeral)."
            ),
        },
    )

    def configure(self, ctx: Context, config: dict[str, Any]) -> ConformanceData:
        store = config.get("store")
        if store is None or is_unknown(store):
            store = os.environ.get("CONFORMANCE_STORE", "conformance-store.json")
        token = config.get("token")
        return ConformanceData(store=Store(Path(store)), token=None if is_unknown(token) else token)

    def resources(self) -> Sequence[Resource]:
        return [
            SimpleResource(),
            EverythingResource(),
            VersionedResource(),
            SlowResource(),
            FailingResource(),
            RenamedResource(),
        ]

    def data_sources(self) -> Sequence[DataSource]:
        return [EchoDataSource()]

    def ephemeral_resources(self) -> Sequence[EphemeralResource]:
        return [TokenEphemeral()]

    def functions(self) -> Sequence[Function]:
        return [JoinFunction()]

    def list_resources(self) -> Sequence[ListResource]:
        return [EverythingLister()]

    def actions(self) -> Sequence[Action]:
        return [NoteAction()]
