"""Data source `gpucloud_gpu_cluster`: an existing cluster looked up by id or name, read-only."""

from __future__ import annotations

from typing import Any

from provider.framework import Attribute, Context, Schema, State, StringAttribute
from provider.framework.schema import NestedAttribute
from provider.resources._common import client_of
from provider.resources.data_sources import _LookupDataSource
from provider.resources.gpu_cluster_schema import CLUSTER_SCHEMA, cluster_state, reservation_state

# Settings that only steer the resource's apply; a data source has nothing to say about them.
RESOURCE_ONLY = ("wait_for_running",)
# Write-only at the API: a data source reads only the user name of each registry login.
WRITE_ONLY = {"registry_credentials": "password"}


def as_computed(attribute: Attribute, hidden: tuple[str, ...] = ()) -> Attribute:
    """A read-only copy of a resource attribute (nested attributes copied all the way down, but for the
    `hidden` ones)."""
    if isinstance(attribute, NestedAttribute):
        nested = {name: as_computed(a) for name, a in attribute.attributes.items() if name not in hidden}
        return type(attribute)(computed=True, description=attribute.description, attributes=nested)
    extra: dict[str, Any] = {}
    if hasattr(attribute, "element_type"):
        extra["element_type"] = attribute.element_type
    return type(attribute)(computed=True, description=attribute.description, **extra)


def _schema() -> Schema:
    attributes: dict[str, Attribute] = {
        "id": StringAttribute(optional=True, computed=True, description="Id of the cluster; set id or name."),
        "name": StringAttribute(
            optional=True,
            computed=True,
            description="Name of the cluster; set id or name. The name must match exactly one cluster.",
        ),
    }
    for name, attribute in CLUSTER_SCHEMA.attributes.items():
        if name not in attributes and name not in RESOURCE_ONLY:
            attributes[name] = as_computed(attribute, tuple(v for k, v in WRITE_ONLY.items() if k == name))
    return Schema(
        description="An existing GPU cluster of the project, looked up by id or name: its nodes, login, "
        "Slurm or Kubernetes endpoints and NCCL environment.",
        attributes=attributes,
    )


def _to_state(body: dict[str, Any]) -> State:
    state = cluster_state(body, {}, reservation_state(body, None))
    for name in (*RESOURCE_ONLY, "timeouts"):
        state.pop(name, None)
    for name, hidden in WRITE_ONLY.items():
        for login in (state.get(name) or {}).values():
            login.pop(hidden, None)
    return state


class GpuClusterDataSource(_LookupDataSource):
    type_name = "gpucloud_gpu_cluster"
    noun = "GPU cluster"
    schema = _schema()
    to_state = staticmethod(_to_state)

    def get(self, ctx: Context, object_id: str) -> dict[str, Any]:
        return client_of(ctx).get_cluster(object_id)

    def list_named(self, ctx: Context, name: str) -> list[dict[str, Any]]:
        return client_of(ctx).list_clusters(name=name)
