"""gpucloud_shared_volume: a shared filesystem volume in a region that clusters mount."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from provider.client import ApiError, GpuCloudClient
from provider.client.collections import Collection
from provider.cty import STRING, is_unknown
from provider.framework import (
    Context,
    DiagnosticError,
    Int64Attribute,
    ListAttribute,
    MapAttribute,
    NumberAttribute,
    Schema,
    State,
    StringAttribute,
    requires_replace,
    rfc3339_utc,
    root,
    use_state_for_unknown,
)
from provider.resources._common import api_id_identity, client_of, configured, number, regions_by_name
from provider.resources.api_rules import constraints, field_validators
from provider.resources.host_pool import host_pools
from provider.resources.rest import RestResource, plan_create_key
from provider.resources.ssh_key import NAME_RULE

MAX_SIZE_TIB = int(constraints("VolumeCreate", "size_tib")["maximum"])
RENAMES = {"volume_id": "id"}


def hourly_cost(storage_usd_per_tib_hour: Any, size_tib: int) -> int | Decimal:
    """What the API reports for a volume of `size_tib` (its formula: price x size to 1/100 cent, sent as
    a JSON float), so the planned cost equals the applied one."""
    exact = (Decimal(str(storage_usd_per_tib_hour)) * size_tib).quantize(Decimal("0.0001"))
    return number(Decimal(repr(float(exact))))


class SharedVolumeResource(RestResource):
    type_name = "gpucloud_shared_volume"
    subject = "shared volume"
    title = "Shared Volume"
    renames = RENAMES
    import_id_attribute = "id"
    identity_schema = api_id_identity("shared volume", "vol")
    schema = Schema(
        description="A shared volume: network storage in one region that clusters in that region mount "
        "at `mount_path`. It can be renamed and grown in place; it never shrinks (that would lose data).",
        attributes={
            # Required
            "name": StringAttribute(
                required=True,
                description="Display name of the volume. Renaming is done in place.",
                validators=field_validators("VolumeCreate", "name", text={"pattern": NAME_RULE}),
            ),
            "region": StringAttribute(
                required=True,
                description="Region of the volume, for example `us-east-1` (see the `gpucloud_regions` data "
                "source). Changing it replaces the volume (its data does not move).",
                validators=field_validators(
                    "VolumeCreate", "region", text={"pattern": "must be a region name such as us-east-1"}
                ),
                plan_modifiers=[requires_replace()],
            ),
            "size_tib": Int64Attribute(
                required=True,
                description=f"Size in TiB, 1 to {MAX_SIZE_TIB}. Growing is done in place; a smaller value is "
                "rejected at plan time, because shrinking would lose data.",
                validators=field_validators("VolumeCreate", "size_tib"),
            ),
            # Optional
            "labels": MapAttribute(
                element_type=STRING,
                optional=True,
                description="Free-form key/value tags (up to 64), e.g. `team`; every storage line is charged "
                "under them, so chargeback and budgets by label reach the volume's team. Changes in place.",
                validators=field_validators(
                    "VolumeCreate", "labels",
                    text={"keys": "key must be 1-63 lowercase letters, digits, '.', '_', '/' or '-', "
                          "starting and ending with a letter or digit",
                          "values": "must have no control characters"},
                ),
            ),
            # Computed
            "id": StringAttribute(
                computed=True,
                description="Identifier of the volume (`vol_...`); use it in a cluster's "
                "`shared_volume_ids`.",
                plan_modifiers=[use_state_for_unknown()],
            ),
            "status": StringAttribute(computed=True, description="Status of the volume, e.g. `available`."),
            "mount_path": StringAttribute(
                computed=True,
                description="Where clusters mount the volume; stable for the volume's life.",
                plan_modifiers=[use_state_for_unknown()],
            ),
            "attached_cluster_ids": ListAttribute(
                element_type=STRING,
                computed=True,
                description="Ids of the clusters the volume is attached to (clusters attach volumes through "
                "their `shared_volume_ids`).",
            ),
            "created_at": StringAttribute(
                computed=True,
                description="When the volume was created (RFC 3339, UTC).",
                plan_modifiers=[use_state_for_unknown()],
            ),
            "estimated_hourly_cost_usd": NumberAttribute(
                computed=True,
                description="What the volume costs per hour in USD at the current storage price; known at "
                "plan time, so `terraform plan` shows the cost of a new size.",
            ),
        },
    )

    # ---- plan ------------------------------------------------------------------------------------------

    def modify_plan(
        self, ctx: Context, plan: State | None, state: State | None, config: State | None
    ) -> State | None:
        if plan is None:
            return None
        plan_create_key(ctx, state, plan)
        self._refuse_shrink(ctx, plan, state)
        if not configured(ctx) or ctx.diagnostics.has_errors:
            return plan  # provider block not known yet: plan without the API
        region, size = plan["region"], plan["size_tib"]
        if is_unknown(region) or region is None:
            return plan
        regions = regions_by_name(ctx)
        if region not in regions and region in _pool_regions(ctx):
            # A host pool's region: the volume is a directory on the pool's shared storage, at no charge.
            if is_unknown(plan["estimated_hourly_cost_usd"]) and isinstance(size, int):
                plan = {**plan, "estimated_hourly_cost_usd": hourly_cost(0, size)}
            return plan
        if region not in regions:
            known = ", ".join(sorted(regions))
            ctx.error(
                "Unknown Region",
                f'There is no region "{region}". Choose one of: {known} '
                "(see the gpucloud_regions data source).",
                root("region"),
            )
            return plan
        if is_unknown(plan["estimated_hourly_cost_usd"]) and isinstance(size, int):
            cost = hourly_cost(regions[region]["storage_usd_per_tib_hour"], size)
            plan = {**plan, "estimated_hourly_cost_usd": cost}
        return plan

    @staticmethod
    def _refuse_shrink(ctx: Context, plan: State, state: State | None) -> None:
        if state is None or ctx.requires_replace:
            return  # a new volume may have any size
        old, new = state.get("size_tib"), plan.get("size_tib")
        if isinstance(old, int) and isinstance(new, int) and new < old:
            ctx.error(
                "Shared Volume Cannot Shrink",
                f"size_tib can only grow: the volume has {old} TiB and shrinking it to {new} TiB would lose "
                "data. Keep the size, or create a new, smaller volume and copy the data over.",
                root("size_tib"),
            )

    # ---- CRUD (the create/read/delete policy is RestResource's) ----------------------------------------

    def collection(self, client: GpuCloudClient) -> Collection:
        return client.volumes

    def create_body(self, values: State) -> dict[str, Any]:
        body = {"name": values["name"], "region": values["region"], "size_tib": values["size_tib"]}
        if values.get("labels"):
            body["labels"] = values["labels"]
        return body

    def state_from(self, body: dict[str, Any], prior: State) -> State:
        return self._state(body, prior)

    def update(self, ctx: Context, plan: State, state: State) -> State | None:
        changes = {k: plan[k] for k in ("name", "size_tib") if plan[k] != state[k]}
        if (plan.get("labels") or {}) != (state.get("labels") or {}):
            changes["labels"] = plan.get("labels") or {}
        return self.patch(ctx, plan, state, changes)

    def delete_refused(self, ctx: Context, error: ApiError) -> None:
        if error.code == "volume_attached":
            clusters = ", ".join(error.extra.get("cluster_ids") or []) or "a cluster"
            raise DiagnosticError(
                "Shared Volume Still Attached",
                f"The volume is attached to {clusters}. Remove it from that cluster's shared_volume_ids "
                "(or destroy the cluster) first, then destroy the volume.",
            ) from None
        super().delete_refused(ctx, error)

    @staticmethod
    def state_from_api(body: Any) -> State:
        """The state of an API object (`terraform query` builds states of volumes it finds with it)."""
        return SharedVolumeResource._state(body)

    @staticmethod
    def _state(body: Any, prior: State | None = None) -> State:
        if not isinstance(body, dict):
            raise DiagnosticError("Unexpected API Response", "The API answered without a volume object.")
        labels = dict(body.get("labels") or {})
        return {
            "id": body["id"],
            "name": body["name"],
            "region": body["region"],
            "size_tib": int(body["size_tib"]),
            # An empty map and no map are the same to the API: keep what the configuration wrote.
            "labels": labels if labels or (prior or {}).get("labels") is not None else None,
            "status": body["status"],
            "mount_path": body["mount_path"],
            "attached_cluster_ids": [str(c) for c in body.get("attached_cluster_ids") or []],
            "created_at": rfc3339_utc(body["created_at"]),
            "estimated_hourly_cost_usd": number(body["estimated_hourly_cost_usd"]),
        }


def _pool_regions(ctx: Context) -> set[str]:
    """The regions of the project's host pools (a volume there lives on the pool's shared storage)."""
    try:
        return {str(pool.get("region")) for pool in host_pools(client_of(ctx)).items()}
    except ApiError:
        return set()  # unknown now: the API judges the region at apply
