"""Data sources: the catalog (`gpucloud_regions`, `gpucloud_instance_types`) and existing objects looked
up by id or name (`gpucloud_ssh_key`, `gpucloud_shared_volume`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from provider.client import ApiError, NotFound
from provider.cty import STRING
from provider.framework import (
    Attribute,
    BoolAttribute,
    Context,
    DataSource,
    DiagnosticError,
    Int64Attribute,
    ListAttribute,
    ListNestedAttribute,
    NumberAttribute,
    Schema,
    State,
    StringAttribute,
    root,
)
from provider.framework.validators import int_at_least, string_length
from provider.resources._common import api_error, client_of, exactly_one, number, regions_by_name
from provider.resources.shared_volume import SharedVolumeResource
from provider.resources.ssh_key import SshKeyResource


def _computed(description: str, kind: type[Attribute] = StringAttribute) -> Attribute:
    return kind(computed=True, description=description)


def _price(text: Any) -> int | Decimal:
    return number(Decimal(str(text)))


# ---- gpucloud_regions -------------------------------------------------------------------------------

_FABRIC = {
    "name": _computed("Fabric name, e.g. `ib-east-a`."),
    "kind": _computed("`infiniband`, `efa` or `ethernet`."),
    "scalable_units": _computed("Number of scalable units.", Int64Attribute),
    "leaves": _computed("Leaf switches.", Int64Attribute),
    "spines": _computed("Spine switches.", Int64Attribute),
    "nodes_per_scalable_unit": _computed("Nodes in one scalable unit.", Int64Attribute),
}
_REGION = {
    "name": _computed("Region name, e.g. `us-east-1`: the value of a resource's `region`."),
    "display_name": _computed("Human-readable name."),
    "interconnects": ListAttribute(
        element_type=STRING, computed=True, description="Interconnects offered in the region."
    ),
    "storage_usd_per_tib_hour": _computed("Shared volume price in USD per TiB-hour.", NumberAttribute),
    "fabrics": ListNestedAttribute(computed=True, description="Fabrics of the region.", attributes=_FABRIC),
}


class RegionsDataSource(DataSource):
    type_name = "gpucloud_regions"
    schema = Schema(
        description="The regions of the cloud, with their fabrics and storage price.",
        attributes={
            "regions": ListNestedAttribute(
                computed=True, description="Every region, in catalog order.", attributes=_REGION
            ),
        },
    )

    def read(self, ctx: Context, config: State) -> State | None:
        regions = regions_by_name(ctx).values()
        return {"regions": [_region(r) for r in regions]}


def _region(r: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "name": r["name"],
        "display_name": r["display_name"],
        "interconnects": list(r["interconnects"]),
        "storage_usd_per_tib_hour": _price(r["storage_usd_per_tib_hour"]),
        "fabrics": [{k: f[k] for k in _FABRIC} for f in r["fabrics"]],
    }


# ---- gpucloud_instance_types ------------------------------------------------------------------------

_AVAILABILITY = {
    "region": _computed("Region."),
    "fabric": _computed("Fabric in the region."),
    "interconnect": _computed("`infiniband`, `efa` or `ethernet`."),
    "capacity_nodes": _computed("Nodes of this type the fabric has.", Int64Attribute),
    "available_nodes": _computed("Nodes free right now (not held by any cluster).", Int64Attribute),
}
_RESERVED = {
    "min_duration_days": _computed("Shortest reservation term this price applies to.", Int64Attribute),
    "discount": _computed("Fraction off the on-demand price, e.g. `0.25`.", NumberAttribute),
    "usd_per_gpu_hour": _computed("Reserved price in USD per GPU-hour.", NumberAttribute),
}
_INSTANCE_TYPE = {
    "name": _computed("Instance type name, e.g. `8xH100`: the value of a cluster's `instance_type`."),
    "gpu_model": _computed("GPU model, e.g. `H100 SXM 80GB`."),
    "gpu_count": _computed("GPUs per node.", Int64Attribute),
    "gpu_memory_mib": _computed("Memory of one GPU in MiB.", Int64Attribute),
    "vcpu": _computed("vCPUs per node.", Int64Attribute),
    "ram_gib": _computed("RAM per node in GiB.", Int64Attribute),
    "local_nvme": _computed("Local NVMe storage per node."),
    "network": _computed("Node networking."),
    "interconnects": ListAttribute(
        element_type=STRING, computed=True, description="Supported interconnects."
    ),
    "fabric_capable": _computed("Whether multi-node clusters may use this type.", BoolAttribute),
    "on_demand_usd_per_gpu_hour": _computed("On-demand price in USD per GPU-hour.", NumberAttribute),
    "on_demand_usd_per_node_hour": _computed("On-demand price in USD per node-hour.", NumberAttribute),
    "available_nodes": _computed(
        "Nodes free right now, summed over the listed `availability` (the chosen region only when "
        "`region` is set).",
        Int64Attribute,
    ),
    "reserved": ListNestedAttribute(
        computed=True, description="Reserved-term prices, shortest term first.", attributes=_RESERVED
    ),
    "availability": ListNestedAttribute(
        computed=True, description="Capacity per region and fabric.", attributes=_AVAILABILITY
    ),
}


class InstanceTypesDataSource(DataSource):
    type_name = "gpucloud_instance_types"
    schema = Schema(
        description="Instance types with their prices and the capacity available now, optionally filtered "
        "by region, GPU model and minimum GPU count.",
        attributes={
            # Optional
            "region": StringAttribute(
                optional=True,
                description="Only types offered in this region; `availability` then lists this region only.",
            ),
            "gpu": StringAttribute(
                optional=True,
                description="Only types whose GPU model contains this text, case-insensitive "
                "(`h100`, `B200`).",
                validators=[string_length(min=1)],
            ),
            "min_gpus": Int64Attribute(
                optional=True, description="Only types with at least this many GPUs per node.",
                validators=[int_at_least(1)],
            ),
            # Computed
            "instance_types": ListNestedAttribute(
                computed=True, description="The matching instance types, in catalog order.",
                attributes=_INSTANCE_TYPE,
            ),
        },
    )

    def read(self, ctx: Context, config: State) -> State | None:
        region, gpu, min_gpus = config.get("region"), config.get("gpu"), config.get("min_gpus")
        if region is not None and region not in regions_by_name(ctx):
            known = ", ".join(sorted(regions_by_name(ctx)))
            raise DiagnosticError(
                "Unknown Region", f'There is no region "{region}". Choose one of: {known}.', root("region")
            )
        try:
            items = client_of(ctx).list_instance_types()
        except ApiError as error:
            api_error(ctx, "Error Reading Instance Types", error, subject="catalog")
            return None
        chosen = [
            _instance_type(item, region)
            for item in items
            if (gpu is None or str(gpu).lower() in str(item["gpu_model"]).lower())
            and (min_gpus is None or int(item["gpu_count"]) >= int(min_gpus))
            and (region is None or any(a["region"] == region for a in item["availability"]))
        ]
        return {**config, "instance_types": chosen}


def _instance_type(item: Mapping[str, Any], region: str | None) -> dict[str, Any]:
    availability = [
        {k: a[k] for k in _AVAILABILITY} for a in item["availability"] if region in (None, a["region"])
    ]
    return {
        **{k: item[k] for k in ("name", "gpu_model", "gpu_count", "gpu_memory_mib", "vcpu", "ram_gib",
                                "local_nvme", "network", "fabric_capable")},
        "interconnects": list(item["interconnects"]),
        "on_demand_usd_per_gpu_hour": _price(item["on_demand_usd_per_gpu_hour"]),
        "on_demand_usd_per_node_hour": _price(item["on_demand_usd_per_node_hour"]),
        "available_nodes": sum(int(a["available_nodes"]) for a in availability),
        "reserved": [
            {"min_duration_days": r["min_duration_days"], "discount": _price(r["discount"]),
             "usd_per_gpu_hour": _price(r["usd_per_gpu_hour"])}
            for r in item["reserved"]
        ],
        "availability": availability,
    }


# ---- lookups of existing objects ----------------------------------------------------------------------


def _lookup_schema(resource_schema: Schema, noun: str, description: str) -> Schema:
    """The resource's attributes, all computed, with `id` and `name` as the optional lookup keys."""
    attributes: dict[str, Attribute] = {
        "id": StringAttribute(optional=True, computed=True, description=f"Id of the {noun}; set id or name."),
        "name": StringAttribute(
            optional=True, computed=True,
            description=f"Name of the {noun}; set id or name. The name must match exactly one {noun}.",
        ),
    }
    for name, attribute in resource_schema.attributes.items():
        if name not in attributes:
            kind = type(attribute)
            extra = {"element_type": attribute.element_type} if hasattr(attribute, "element_type") else {}
            attributes[name] = kind(computed=True, description=attribute.description, **extra)
    return Schema(description=description, attributes=attributes)


class _LookupDataSource(DataSource):
    """Reads one object by `id`, or by `name` through the listing (which must match exactly one)."""

    noun = ""
    to_state: Callable[[Any], State]

    def get(self, ctx: Context, object_id: str) -> dict[str, Any]:
        raise NotImplementedError

    def list_named(self, ctx: Context, name: str) -> list[dict[str, Any]]:
        raise NotImplementedError

    def validate_config(self, ctx: Context, config: State) -> None:
        exactly_one(ctx, config, ("id", "name"))

    def read(self, ctx: Context, config: State) -> State | None:
        if not exactly_one(ctx, config, ("id", "name")):
            return None
        summary = f"Error Reading {self.noun.title().replace('Ssh', 'SSH')}"
        try:
            if config.get("id") is not None:
                body = self.get(ctx, config["id"])
            else:
                body = self._by_name(ctx, config["name"])
        except NotFound:
            raise DiagnosticError(
                f"{self.noun.title().replace('Ssh', 'SSH')} Not Found",
                f'No {self.noun} with id "{config["id"]}" exists in this project that this API key can see '
                "(a team-scoped key sees its team's only).",
                root("id"),
            ) from None
        except ApiError as error:
            api_error(ctx, summary, error, subject=self.noun)
            return None
        return type(self).to_state(body)

    def _by_name(self, ctx: Context, name: str) -> dict[str, Any]:
        found = self.list_named(ctx, name)
        title = self.noun.title().replace("Ssh", "SSH")
        if not found:
            raise DiagnosticError(
                f"{title} Not Found",
                f'No {self.noun} named "{name}" exists in this project that this API key can see '
                "(a team-scoped key sees its team's only).",
                root("name"),
            )
        if len(found) > 1:
            ids = ", ".join(str(b["id"]) for b in found)
            raise DiagnosticError(
                f"Multiple {title}s Named Alike",
                f'{len(found)} {self.noun}s are named "{name}" ({ids}); look it up by id instead.',
                root("name"),
            )
        return found[0]


class SshKeyDataSource(_LookupDataSource):
    type_name = "gpucloud_ssh_key"
    noun = "SSH key"
    schema = _lookup_schema(
        SshKeyResource.schema, "SSH key", "An SSH key registered with the project, looked up by id or name."
    )
    to_state = staticmethod(SshKeyResource.state_from_api)

    def get(self, ctx: Context, object_id: str) -> dict[str, Any]:
        return client_of(ctx).get_ssh_key(object_id)

    def list_named(self, ctx: Context, name: str) -> list[dict[str, Any]]:
        return client_of(ctx).list_ssh_keys(name=name)


class SharedVolumeDataSource(_LookupDataSource):
    type_name = "gpucloud_shared_volume"
    noun = "shared volume"
    schema = _lookup_schema(
        SharedVolumeResource.schema,
        "shared volume",
        "A shared volume of the project, looked up by id or name.",
    )
    to_state = staticmethod(SharedVolumeResource._state)

    def get(self, ctx: Context, object_id: str) -> dict[str, Any]:
        return client_of(ctx).get_volume(object_id)

    def list_named(self, ctx: Context, name: str) -> list[dict[str, Any]]:
        return client_of(ctx).list_volumes(name=name)
