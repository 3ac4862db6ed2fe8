"""`gpucloud_quota`: the project's quotas (set by the cloud's operator) and what the project holds now."""

from __future__ import annotations

from typing import Any

from provider.client import ApiError
from provider.framework import Context, DataSource, Int64Attribute, NumberAttribute, Schema, State
from provider.resources._common import api_error, client_of, number

_NO_LIMIT = "Null when the project has no such quota."
_HELD = "every cluster of the project whose deletion has not been requested"


class QuotaDataSource(DataSource):
    type_name = "gpucloud_quota"
    schema = Schema(
        description="The project's quotas and current use (`GET /v1/quotas`). Quotas apply to the whole "
        "project, whatever the API key's team scope; a cluster create or scale-up past one fails at "
        "`terraform plan` (and the API refuses it with 403 `quota_exceeded`). The cloud's operator sets "
        "them with `gpucloud-backend set-quota`.",
        attributes={
            "max_clusters": Int64Attribute(
                computed=True, description=f"Most clusters the project may hold. {_NO_LIMIT}"
            ),
            "clusters_in_use": Int64Attribute(computed=True, description=f"Clusters held: {_HELD}."),
            "max_gpus": Int64Attribute(
                computed=True, description=f"Most GPUs the project's clusters may hold. {_NO_LIMIT}"
            ),
            "gpus_in_use": Int64Attribute(
                computed=True, description=f"GPUs held (`node_count` x GPUs per node) by {_HELD}."
            ),
            "max_hourly_usd": NumberAttribute(
                computed=True, description=f"Most USD per hour the project's clusters may cost. {_NO_LIMIT}"
            ),
            "hourly_usd_in_use": NumberAttribute(
                computed=True,
                description=f"USD per hour of {_HELD}: the sum of their `estimated_hourly_cost_usd`.",
            ),
        },
    )

    def read(self, ctx: Context, config: State) -> State | None:
        try:
            body = client_of(ctx).get_quotas()
        except ApiError as error:
            api_error(ctx, "Error Reading Quotas", error, subject="quotas")
            return None
        return state_of(body)


def state_of(body: dict[str, Any]) -> State:
    """The data source's state from a `GET /v1/quotas` body."""
    limit = body.get("max_hourly_usd")
    return {
        "max_clusters": body.get("max_clusters"),
        "clusters_in_use": body["clusters_in_use"],
        "max_gpus": body.get("max_gpus"),
        "gpus_in_use": body["gpus_in_use"],
        "max_hourly_usd": None if limit is None else number(limit),
        "hourly_usd_in_use": number(body["hourly_usd_in_use"]),
    }
