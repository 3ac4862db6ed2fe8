"""Cross-field rules of a cluster spec, checked before anything is stored (422 naming every field).

`validate_cluster_spec` returns every violation at once so a user fixes them in one round; the API and
the provider's plan-time checks read the same rules (the catalog publishes them per instance type).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from backend.domain.catalog import Catalog
from backend.domain.errors import FieldError

ORCHESTRATORS = ("slurm", "kubernetes", "none")
INTERCONNECTS = ("infiniband", "efa", "ethernet")
CONTAINERS = ("base", "pytorch")
BILLING_TYPES = ("on_demand", "reserved")
ON_EXPIRY = ("decommission", "convert_to_on_demand")
RESERVED_MIN_DAYS = 1
RESERVED_MAX_DAYS = 90
# Node hostnames are `{name}-{index}` and `{name}-jumphost`: the name must be a DNS label prefix.
__all__ = ["FieldError", "apply_cluster_defaults", "rules_for", "validate_cluster_spec"]
NAME_PATTERN = re.compile(r"^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$")


def apply_cluster_defaults(spec: Mapping[str, Any], catalog: Catalog) -> dict[str, Any]:
    """A copy of `spec` with derived defaults: interconnect from the type, orchestrator from the size."""
    out = dict(spec)
    itype = catalog.instance_type(str(out.get("instance_type")))
    if out.get("interconnect") is None and itype is not None:
        out["interconnect"] = itype.default_interconnect
    if out.get("orchestrator") is None:
        node_count = out.get("node_count")
        out["orchestrator"] = "slurm" if isinstance(node_count, int) and node_count > 1 else "none"
    out.setdefault("container", None)
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
    errors += _check_name(full.get("name"))
    region = catalog.region(str(full.get("region")))
    if region is None:
        known = ", ".join(r.name for r in catalog.regions)
        errors.append(FieldError("region", "unknown_region", f"unknown region {full.get('region')!r}; "
                                 f"choose one of {known}"))
    itype = catalog.instance_type(str(full.get("instance_type")))
    if itype is None:
        known = ", ".join(t.name for t in catalog.instance_types)
        errors.append(FieldError("instance_type", "unknown_instance_type",
                                 f"unknown instance type {full.get('instance_type')!r}; "
                                 f"choose one of {known}"))
    node_count = full.get("node_count")
    if not isinstance(node_count, int) or isinstance(node_count, bool) or node_count < 1:
        errors.append(FieldError("node_count", "out_of_range", "node_count must be an integer >= 1"))
        node_count = None
    elif node_count > 1 and itype is not None and not itype.fabric_capable:
        errors.append(FieldError(
            "node_count", "requires_fabric_capable_type",
            f"{itype.name} is not fabric-capable: clusters of more than one node need an 8-GPU type "
            "with InfiniBand or EFA",
        ))
    errors += _check_interconnect(full.get("interconnect"), region.name if region else None,
                                  itype.name if itype else None, catalog)
    errors += _check_orchestrator(full.get("orchestrator"), node_count)
    errors += _check_container(full.get("container"), node_count)
    errors += _check_billing(full.get("billing") or {})
    return errors


def _check_name(name: object) -> list[FieldError]:
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        return [FieldError("name", "invalid_name", "name must be 1-40 lowercase letters, digits or hyphens, "
                           "starting with a letter and not ending with a hyphen (it prefixes hostnames)")]
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
                           f"{itype} supports {', '.join(shape.interconnects)}, not {value}")]
    if region is not None and not catalog.pools_for(region, itype, str(value)):
        offered = [t.name for t in catalog.instance_types if any(
            f.pools.get(t.name) for f in catalog.fabrics_in(region))]
        return [FieldError("interconnect", "not_offered_in_region",
                           f"{region} has no {value} fabric with {itype} nodes; "
                           f"it offers {', '.join(offered) or 'no instance types'}")]
    return []


def _check_orchestrator(value: object, node_count: int | None) -> list[FieldError]:
    if value not in ORCHESTRATORS:
        return [FieldError("orchestrator", "invalid_choice",
                           f"orchestrator must be one of {', '.join(ORCHESTRATORS)}")]
    if value == "none" and node_count is not None and node_count > 1:
        return [FieldError("orchestrator", "orchestrator_required",
                           "a cluster of more than one node needs orchestrator slurm or kubernetes")]
    return []


def _check_container(value: object, node_count: int | None) -> list[FieldError]:
    if value is None:
        return []
    if value not in CONTAINERS:
        return [FieldError("container", "invalid_choice",
                           f"container must be one of {', '.join(CONTAINERS)}")]
    if node_count is not None and node_count > 1:
        return [FieldError("container", "container_requires_single_node",
                           "container is only available on single-node clusters")]
    return []


def _check_billing(billing: Mapping[str, Any]) -> list[FieldError]:
    errors: list[FieldError] = []
    kind, days = billing.get("type"), billing.get("duration_days")
    if kind not in BILLING_TYPES:
        errors.append(FieldError("billing.type", "invalid_choice",
                                 f"billing.type must be one of {', '.join(BILLING_TYPES)}"))
    elif kind == "reserved":
        if days is None:
            errors.append(FieldError("billing.duration_days", "required",
                                     "reserved billing needs duration_days (1-90)"))
        elif not isinstance(days, int) or isinstance(days, bool) or not (
                RESERVED_MIN_DAYS <= days <= RESERVED_MAX_DAYS):
            errors.append(FieldError("billing.duration_days", "out_of_range",
                                     f"duration_days must be between {RESERVED_MIN_DAYS} and "
                                     f"{RESERVED_MAX_DAYS}"))
    elif days is not None:
        errors.append(FieldError("billing.duration_days", "not_allowed",
                                 "duration_days is only allowed with billing.type = reserved"))
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
        "containers_single_node_only": list(CONTAINERS),
        "reserved_duration_days": {"min": RESERVED_MIN_DAYS, "max": RESERVED_MAX_DAYS},
    }
