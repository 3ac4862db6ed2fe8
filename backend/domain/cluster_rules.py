"""Cross-field rules of a cluster spec, checked before anything is stored (422 naming every field).

`validate_cluster_spec` returns every violation at once so a user fixes them in one round; the API and
the provider's plan-time checks read the same rules: the catalog publishes the per-instance-type ones, and
the rules between fields are data in `domain.input_rules`, published in the OpenAPI document.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from backend.domain.catalog import Catalog, InstanceType
from backend.domain.errors import FieldError
from backend.domain.input_rules import broken_rules

ORCHESTRATORS = ("slurm", "kubernetes", "none")
INTERCONNECTS = ("infiniband", "efa", "ethernet")
BILLING_TYPES = ("on_demand", "reserved")
ON_EXPIRY = ("decommission", "convert_to_on_demand")
RESERVED_MIN_DAYS = 1
RESERVED_MAX_DAYS = 90
LIST_ALL_TYPES_UP_TO = 10  # an unknown instance type's error lists every type when there are this few
__all__ = ["FieldError", "apply_cluster_defaults", "rules_for", "validate_cluster_spec"]


def apply_cluster_defaults(spec: Mapping[str, Any], catalog: Catalog) -> dict[str, Any]:
    """A copy of `spec` with derived defaults: interconnect from the type, orchestrator from the size."""
    out = dict(spec)
    autoscaling = out.get("autoscaling")
    if isinstance(autoscaling, Mapping) and out.get("node_count") is None:
        out["node_count"] = autoscaling.get("min_nodes")  # an autoscaling cluster starts at its minimum
    elif out.get("node_count") is None:
        out["node_count"] = 1
    itype = catalog.instance_type(str(out.get("instance_type")))
    own_hosts = out.get("host_pool_id") is not None
    if out.get("interconnect") is None and (own_hosts or itype is not None):
        # A host pool's servers are networked as their owner made them: Ethernet unless the spec says.
        out["interconnect"] = "ethernet" if own_hosts or itype is None else itype.default_interconnect
    if out.get("orchestrator") is None:  # a pool's servers run Slurm, whatever their number
        node_count = out.get("node_count")
        multi_node = isinstance(node_count, int) and node_count > 1
        slurm = multi_node or own_hosts or isinstance(autoscaling, Mapping)
        out["orchestrator"] = "slurm" if slurm else "none"
    out.setdefault("container", None)
    if out.get("capacity_type") is None:
        out["capacity_type"] = "on_demand"
    billing = dict(out.get("billing") or {})
    billing.setdefault("type", "on_demand")
    billing.setdefault("duration_days", None)
    if billing.get("on_expiry") is None:
        billing["on_expiry"] = "decommission"
    out["billing"] = billing
    return out


def validate_cluster_spec(spec: Mapping[str, Any], catalog: Catalog) -> list[FieldError]:
    """Every rule the spec breaks (empty when valid). Defaults are applied first."""
    full = apply_cluster_defaults(spec, catalog)
    errors: list[FieldError] = []
    # A cluster on a host pool is in its pool's region, a name of the project's (services.pool_clusters).
    own_hosts = full.get("host_pool_id") is not None
    region = catalog.region(str(full.get("region")))
    if full.get("region") is None and not own_hosts:
        errors.append(FieldError("region", "required", "region is required (or host_pool_id: the pool's)"))
    elif region is None and not own_hosts:
        known = ", ".join(r.name for r in catalog.regions)
        errors.append(FieldError("region", "unknown_region", f"unknown region {full.get('region')!r}; "
                                 f"choose one of {known}"))
    itype = catalog.instance_type(str(full.get("instance_type")))
    if full.get("instance_type") is None:
        if not own_hosts:  # on a pool not found, its `not_found` says what is wrong
            errors.append(FieldError("instance_type", "required", "instance_type is required"))
    elif itype is None:
        errors.append(_unknown_instance_type(full.get("instance_type"), catalog))
    node_count = full.get("node_count")
    judged = full  # what the rules between fields see
    if not isinstance(node_count, int) or isinstance(node_count, bool) or node_count < 1:
        errors.append(FieldError("node_count", "out_of_range", "node_count must be an integer >= 1"))
    elif node_count > 1 and itype is not None and not itype.fabric_capable:
        capable = ", ".join(t.name for t in catalog.instance_types if t.fabric_capable)
        errors.append(FieldError(
            "node_count", "requires_fabric_capable_type",
            f"{itype.name} is not fabric-capable, so a cluster of it has one node: node_count = "
            f"{node_count} needs an 8-GPU type with InfiniBand or EFA; set node_count = 1, or "
            f"instance_type to one of {capable}",
        ))
        judged = {**full, "node_count": 1}  # the fix: other fields are judged as they would be then
    if own_hosts:
        if full.get("interconnect") not in INTERCONNECTS:
            errors.append(FieldError("interconnect", "invalid_choice",
                                     f"interconnect must be one of {', '.join(INTERCONNECTS)}"))
    elif itype is not None or full.get("interconnect") is not None:
        # An unknown type has no default interconnect: only a value the caller gave is judged.
        errors += _check_interconnect(full.get("interconnect"), region.name if region else None,
                                      itype.name if itype else None, catalog)
    errors += _check_orchestrator(full.get("orchestrator"))
    errors += _check_container(full.get("container"), catalog)
    errors += _check_billing(full.get("billing") or {})
    if full.get("idle_teardown_minutes") is not None and full.get("orchestrator") != "slurm":
        errors.append(FieldError(
            "idle_teardown_minutes", "requires_slurm",
            "idle_teardown_minutes reads the Slurm job queue: it needs orchestrator = slurm "
            f"(this cluster has {full.get('orchestrator')}); use ttl or expires_at instead",
        ))
    errors += _check_autoscaling(full, region.name if region else None, itype, catalog)
    # Name (a hostname prefix), orchestrator and container against node_count, the reserved term.
    errors += broken_rules("ClusterCreate", judged)
    return errors


def _unknown_instance_type(name: object, catalog: Catalog) -> FieldError:
    """`instance_type` names no type: the closest names first, and every type when the list is short."""
    names = [t.name for t in catalog.instance_types]
    close = difflib.get_close_matches(str(name), names, n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    listed = ", ".join(names) if len(names) <= LIST_ALL_TYPES_UP_TO else (
        f"{', '.join(close or names[:LIST_ALL_TYPES_UP_TO])} (`gpucloud instance-types` and the "
        "gpucloud_instance_types data source list all)"
    )
    return FieldError("instance_type", "unknown_instance_type",
                      f"unknown instance type {name!r}; {hint}choose one of {listed}")


def _check_autoscaling(full: Mapping[str, Any], region: str | None, itype: InstanceType | None,
                       catalog: Catalog) -> list[FieldError]:
    """The autoscaling range: min <= max, a Slurm cluster, max within the largest fabric's capacity."""
    autoscaling = full.get("autoscaling")
    if not isinstance(autoscaling, Mapping):
        return []
    low, high = autoscaling.get("min_nodes"), autoscaling.get("max_nodes")
    if not isinstance(low, int) or not isinstance(high, int):
        return []  # the request model's ranges already said so
    if low > high:
        return [FieldError("autoscaling.max_nodes", "below_min_nodes",
                           f"autoscaling.max_nodes ({high}) must be at least autoscaling.min_nodes ({low})")]
    if full.get("orchestrator") != "slurm":
        return [FieldError("autoscaling", "requires_slurm",
                           "autoscaling reads the Slurm job queue: it needs orchestrator = slurm "
                           f"(this cluster has {full.get('orchestrator')}); remove autoscaling or set "
                           "orchestrator = slurm")]
    if itype is None or region is None:
        return []
    if high > 1 and not itype.fabric_capable:
        return [FieldError("autoscaling.max_nodes", "requires_fabric_capable_type",
                           f"{itype.name} is not fabric-capable: more than one node needs an 8-GPU type with "
                           "InfiniBand or EFA")]
    fabrics = catalog.pools_for(region, itype.name, str(full.get("interconnect")))
    most = max((catalog.capacity(region, f.name, itype.name) for f in fabrics), default=0)
    if fabrics and high > most:
        return [FieldError("autoscaling.max_nodes", "exceeds_capacity",
                           f"autoscaling.max_nodes ({high}) is more than one {full.get('interconnect')} "
                           f"fabric of {region} holds ({most} x {itype.name}); lower it to {most} or less")]
    return []


def _check_interconnect(value: object, region: str | None, itype: str | None,
                        catalog: Catalog) -> list[FieldError]:
    if value not in INTERCONNECTS:
        return [FieldError("interconnect", "invalid_choice",
                           f"interconnect must be one of {', '.join(INTERCONNECTS)}")]
    if itype is None:
        return []
    shape = catalog.instance_type(itype)
    if shape is not None and value not in shape.interconnects:
        return [FieldError("interconnect", "unsupported_interconnect",
                           f"{itype} supports {', '.join(shape.interconnects)}, not {value}"
                           + _same_gpus_on(shape, str(value), catalog))]
    if region is not None and not catalog.pools_for(region, itype, str(value)):
        offered = [t.name for t in catalog.instance_types if any(
            f.pools.get(t.name) for f in catalog.fabrics_in(region))]
        # Blame the interconnect only when the region has the type on another fabric kind.
        elsewhere = any(f.pools.get(itype) for f in catalog.fabrics_in(region))
        return [FieldError("interconnect" if elsewhere else "instance_type", "not_offered_in_region",
                           f"{region} has no {value} fabric with {itype} nodes; "
                           f"it offers {', '.join(offered) or 'no instance types'}")]
    return []


FABRIC_LABELS = {"infiniband": "InfiniBand", "efa": "EFA", "ethernet": "Ethernet"}


def _same_gpus_on(shape: InstanceType, interconnect: str, catalog: Catalog) -> str:
    """Where the same GPUs are sold on `interconnect`: `; for EFA use 8xH100-EFA (offered in us-east-1)`."""
    offers = []
    for other in catalog.instance_types:
        if (other.gpu_model, other.gpu_count) != (shape.gpu_model, shape.gpu_count):
            continue
        if interconnect not in other.interconnects:
            continue
        regions = sorted(
            {f.region for f in catalog.fabrics if f.kind == interconnect and f.pools.get(other.name)}
        )
        offers.append(f"{other.name} (offered in {', '.join(regions) or 'no region yet'})")
    label = FABRIC_LABELS.get(interconnect, interconnect)
    return f"; for {label} use instance_type {' or '.join(offers)}" if offers else ""


def _check_orchestrator(value: object) -> list[FieldError]:
    if value not in ORCHESTRATORS:
        return [FieldError("orchestrator", "invalid_choice",
                           f"orchestrator must be one of {', '.join(ORCHESTRATORS)}")]
    return []


def _check_container(value: object, catalog: Catalog) -> list[FieldError]:
    """An alias of the catalog or an image reference (which services.container_images parses)."""
    if value is not None and not (isinstance(value, str) and value.strip()):
        return [FieldError("container", "invalid_choice",
                           f"container must be one of {', '.join(catalog.container_aliases)} or an image "
                           "reference such as registry.internal:5000/team/train:v3")]
    return []


def _check_billing(billing: Mapping[str, Any]) -> list[FieldError]:
    errors: list[FieldError] = []
    kind, days = billing.get("type"), billing.get("duration_days")
    if kind not in BILLING_TYPES:
        errors.append(FieldError("billing.type", "invalid_choice",
                                 f"billing.type must be one of {', '.join(BILLING_TYPES)}"))
    elif kind == "reserved" and days is not None and (
            not isinstance(days, int) or isinstance(days, bool) or not (
                RESERVED_MIN_DAYS <= days <= RESERVED_MAX_DAYS)):
        errors.append(FieldError("billing.duration_days", "out_of_range",
                                 f"duration_days must be between {RESERVED_MIN_DAYS} and "
                                 f"{RESERVED_MAX_DAYS}"))
    if billing.get("on_expiry") not in ON_EXPIRY:
        errors.append(FieldError("billing.on_expiry", "invalid_choice",
                                 f"on_expiry must be one of {', '.join(ON_EXPIRY)}"))
    return errors


def rules_for(itype_name: str, catalog: Catalog, orchestrators: Sequence[str] = ORCHESTRATORS
              ) -> dict[str, Any]:
    """The rules of one instance type in the shape the catalog API publishes for plan-time checks;
    `orchestrators`: those the provisioning driver runs (the local driver has no Kubernetes)."""
    itype = catalog.instance_type(itype_name)
    if itype is None:
        raise KeyError(itype_name)
    return {
        "min_node_count": 1,
        "multi_node": itype.fabric_capable,
        "interconnects": list(itype.interconnects),
        "default_interconnect": itype.default_interconnect,
        "orchestrators_single_node": [o for o in ORCHESTRATORS if o in orchestrators],
        "orchestrators_multi_node": [o for o in ("slurm", "kubernetes") if o in orchestrators]
                                    if itype.fabric_capable else [],
        "default_orchestrator_multi_node": "slurm",
        "containers_single_node_only": list(catalog.container_aliases),
        "reserved_duration_days": {"min": RESERVED_MIN_DAYS, "max": RESERVED_MAX_DAYS},
    }
