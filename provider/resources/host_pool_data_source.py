"""Data source `gpucloud_host_pool`: an existing host pool by id or name, with its hosts' status."""

from __future__ import annotations

from typing import Any

from provider.framework import Attribute, Context, Schema, State, StringAttribute
from provider.resources._common import client_of
from provider.resources.cluster_data_source import as_computed
from provider.resources.data_sources import _LookupDataSource
from provider.resources.host_pool import KEY, KEY_WO, KEY_WO_VERSION, HostPoolResource, host_pools

# The private key is write-only at the API: a data source has nothing to show of it.
KEY_ATTRIBUTES = (KEY, KEY_WO, KEY_WO_VERSION)


def _schema() -> Schema:
    attributes: dict[str, Attribute] = {
        "id": StringAttribute(optional=True, computed=True, description="Id of the pool; set id or name."),
        "name": StringAttribute(
            optional=True,
            computed=True,
            description="Name of the pool; set id or name. The name must match exactly one pool.",
        ),
    }
    for name, attribute in HostPoolResource.schema.attributes.items():
        if name not in attributes and name not in KEY_ATTRIBUTES:
            attributes[name] = as_computed(attribute)
    return Schema(
        description="An existing host pool of the project, looked up by id or name: its hosts, the public "
        "key to authorize on them, and what the last check found on each (status, reason, GPUs, CPUs, "
        "memory).",
        attributes=attributes,
    )


def _to_state(body: dict[str, Any]) -> State:
    # As an import reads it: hosts on the pool's port without a port, recorded keys in `host_status`.
    state = HostPoolResource.state_from_api(body)
    for name in KEY_ATTRIBUTES:
        state.pop(name)
    return state


class HostPoolDataSource(_LookupDataSource):
    type_name = "gpucloud_host_pool"
    noun = "host pool"
    schema = _schema()
    to_state = staticmethod(_to_state)

    def get(self, ctx: Context, object_id: str) -> dict[str, Any]:
        body: dict[str, Any] = host_pools(client_of(ctx)).get(object_id).body
        return body

    def list_named(self, ctx: Context, name: str) -> list[dict[str, Any]]:
        return list(host_pools(client_of(ctx)).items(name=name))
