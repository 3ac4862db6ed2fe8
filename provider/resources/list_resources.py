"""List resources for `terraform query` (Terraform 1.14+): find the objects of a project, made by hand
or by another tool, and bring them under Terraform (`terraform query -generate-config-out=found.tf`
writes an `import` block and a `resource` block for each).

    list "gpucloud_gpu_cluster" "ml" {
      provider = gpucloud
      config {
        region      = "us-east-1"
        name_prefix = "train-"
        labels      = { team = "ml" }
        status      = "RUNNING"
      }
    }

Each result is named by its identity (the API id). The filters apply to what the API lists (every page);
a filter left unset matches everything. Full states are built only when Terraform asks for them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from operator import attrgetter
from typing import Any

from provider.client import ApiError, GpuCloudClient
from provider.client.collections import Collection
from provider.cty import STRING
from provider.framework import (
    Context,
    ListResource,
    ListResult,
    MapAttribute,
    Schema,
    State,
    StringAttribute,
)
from provider.framework.validators import string_length, string_one_of
from provider.resources._common import api_error, client_of
from provider.resources.gpu_cluster import GpuClusterResource
from provider.resources.reserved_ip import ReservedIpResource
from provider.resources.shared_volume import SharedVolumeResource
from provider.resources.ssh_key import SshKeyResource

CLUSTER_STATUSES = (
    "PENDING", "PROVISIONING", "CONFIGURING", "CONTAINER_CREATING", "RUNNING", "PAUSED", "DESTROYING",
    "FAILED",
)


def _name_prefix(subject: str) -> StringAttribute:
    return StringAttribute(
        optional=True,
        description=f"Only {subject}s whose name starts with this text (case-sensitive).",
        validators=[string_length(min=1)],
    )


def _region(subject: str) -> StringAttribute:
    return StringAttribute(
        optional=True,
        description=f"Only {subject}s in this region, for example `us-east-1`.",
        validators=[string_length(min=1)],
    )


def matches(body: Mapping[str, Any], config: Mapping[str, Any]) -> bool:
    """Whether an API object passes every filter that is set (`labels`: each given label, same value)."""
    if config.get("status") is None and body.get("deletion_requested_at") is not None:
        return False  # being deleted: nothing to adopt (unless asked for by status)
    prefix = config.get("name_prefix")
    if prefix is not None and not str(body.get("name", "")).startswith(prefix):
        return False
    for exact in ("region", "status"):
        if config.get(exact) is not None and body.get(exact) != config[exact]:
            return False
    labels = body.get("labels") or {}
    return all(labels.get(k) == v for k, v in (config.get("labels") or {}).items())


def _listed(
    ctx: Context,
    collection: Callable[[GpuCloudClient], Collection],
    config: State,
    subject: str,
    state_of: Callable[[dict[str, Any]], State],
    *,
    include_state: bool,
) -> Iterator[ListResult]:
    try:
        for body in collection(client_of(ctx)).items():
            if isinstance(body, dict) and matches(body, config):
                yield ListResult(
                    {"id": body["id"]}, str(body.get("name") or body["id"]),
                    state_of(body) if include_state else None,
                )
    except ApiError as error:
        api_error(ctx, f"Error Listing {subject}s", error, subject=subject)


class GpuClusterListResource(ListResource):
    type_name = "gpucloud_gpu_cluster"
    schema = Schema(
        description="Finds the project's GPU clusters for `terraform query`, filtered by region, name "
        "prefix, labels and status (the attributes of the list block's `config` block). Clusters being "
        "deleted are left out unless `status` asks for them.",
        attributes={
            "region": _region("cluster"),
            "name_prefix": _name_prefix("cluster"),
            "labels": MapAttribute(
                element_type=STRING,
                optional=True,
                description="Only clusters that carry every one of these labels with the same value.",
            ),
            "status": StringAttribute(
                optional=True,
                description=f"Only clusters in this status: {', '.join(CLUSTER_STATUSES)}.",
                validators=[string_one_of(*CLUSTER_STATUSES)],
            ),
        },
    )

    def list(self, ctx: Context, config: State, *, include_state: bool) -> Iterator[ListResult]:
        clusters = GpuClusterResource()
        yield from _listed(
            ctx, attrgetter("clusters"), config, "GPU Cluster",
            lambda body: clusters.state_from_api(ctx, body), include_state=include_state,
        )


class SharedVolumeListResource(ListResource):
    type_name = "gpucloud_shared_volume"
    schema = Schema(
        description="Finds the project's shared volumes for `terraform query`, filtered by region and name "
        "prefix (the attributes of the list block's `config` block).",
        attributes={"region": _region("volume"), "name_prefix": _name_prefix("volume")},
    )

    def list(self, ctx: Context, config: State, *, include_state: bool) -> Iterator[ListResult]:
        yield from _listed(
            ctx, attrgetter("volumes"), config, "Shared Volume", SharedVolumeResource.state_from_api,
            include_state=include_state,
        )


class SshKeyListResource(ListResource):
    type_name = "gpucloud_ssh_key"
    schema = Schema(
        description="Finds the project's SSH keys for `terraform query`, filtered by name prefix (the "
        "attribute of the list block's `config` block).",
        attributes={"name_prefix": _name_prefix("SSH key")},
    )

    def list(self, ctx: Context, config: State, *, include_state: bool) -> Iterator[ListResult]:
        yield from _listed(
            ctx, attrgetter("ssh_keys"), config, "SSH Key", SshKeyResource.state_from_api,
            include_state=include_state,
        )


class ReservedIpListResource(ListResource):
    type_name = "gpucloud_reserved_ip"
    schema = Schema(
        description="Finds the project's reserved IPs for `terraform query` (for example one made by "
        "`POST /v1/clusters/{id}/reserve-ip`), filtered by region, name prefix and labels (the attributes "
        "of the list block's `config` block).",
        attributes={
            "region": _region("reserved IP"),
            "name_prefix": _name_prefix("reserved IP"),
            "labels": MapAttribute(
                element_type=STRING,
                optional=True,
                description="Only reserved IPs that carry every one of these labels with the same value.",
            ),
        },
    )

    def list(self, ctx: Context, config: State, *, include_state: bool) -> Iterator[ListResult]:
        yield from _listed(
            ctx, attrgetter("reserved_ips"), config, "Reserved IP", ReservedIpResource.state_from_api,
            include_state=include_state,
        )
