"""Plan-time knowledge of `gpucloud_gpu_cluster`: the catalog (fetched once per provider process), the
backend's spec rules checked against known values with attribute paths, capacity, and the cost estimate.

Unknown values are never rejected: a check runs only when every value it needs is known.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, TypeGuard

from provider.client import ApiError, GpuCloudClient, NotFound
from provider.cty import is_unknown
from provider.framework import Context, root
from provider.resources.api_rules import check_field_rules

USD_QUANTUM = Decimal("0.000001")
HOURS_PER_DAY = 24
FABRIC_LABELS = {"infiniband": "InfiniBand", "efa": "EFA", "ethernet": "Ethernet"}


def known(value: Any) -> TypeGuard[Any]:
    """Neither null nor unknown (narrows `Any | None` for the type checker)."""
    return value is not None and not is_unknown(value)


@dataclass(frozen=True)
class Catalog:
    """What the API publishes about regions and instance types (prices, rules, capacity now)."""

    regions: Mapping[str, Mapping[str, Any]]
    instance_types: Mapping[str, Mapping[str, Any]]

    def region_names(self) -> str:
        return ", ".join(sorted(self.regions))

    def type_names(self) -> str:
        return ", ".join(sorted(self.instance_types))

    def closest_types(self, name: str) -> str:
        """`did you mean 8xH100? ` for a mistyped instance type, or nothing when no name is close."""
        import difflib  # only on this error path: every provider launch imports this module

        close = difflib.get_close_matches(name, sorted(self.instance_types), n=3, cutoff=0.6)
        return f"did you mean {' or '.join(close)}? " if close else ""

    def availability(self, itype: str, region: str, interconnect: str | None) -> list[Mapping[str, Any]]:
        """Fabrics of `region` carrying `itype` nodes (on `interconnect` when given)."""
        return [
            a
            for a in self.instance_types[itype].get("availability") or []
            if a.get("region") == region and (interconnect is None or a.get("interconnect") == interconnect)
        ]

    def default_interconnect(self, itype: str) -> str | None:
        rules = self.instance_types[itype].get("rules") or {}
        offered = self.instance_types[itype].get("interconnects") or [None]
        value = rules.get("default_interconnect") or offered[0]
        return value if isinstance(value, str) else None

    def same_gpus_on(self, itype: str, interconnect: str) -> str:
        """Where the GPUs of `itype` are sold on `interconnect`, as the API says it:
        `; for EFA use instance_type 8xH100-EFA (offered in us-east-1)`, or "" when nowhere."""
        shape = self.instance_types[itype]
        offers = []
        for name, other in sorted(self.instance_types.items()):
            gpus = (other.get("gpu_model"), other.get("gpu_count"))
            offered = other.get("interconnects") or []
            if gpus != (shape.get("gpu_model"), shape.get("gpu_count")) or interconnect not in offered:
                continue
            regions = sorted({a["region"] for a in other.get("availability") or []
                              if a.get("interconnect") == interconnect})
            offers.append(f"{name} (offered in {', '.join(regions) or 'no region yet'})")
        label = FABRIC_LABELS.get(interconnect, interconnect)
        return f"; for {label} use instance_type {' or '.join(offers)}" if offers else ""


_catalogs: dict[int, Catalog] = {}
_lock = threading.Lock()


def catalog_of(client: GpuCloudClient) -> Catalog:
    """The catalog, fetched once per provider process (per configured client)."""
    with _lock:
        cached = _catalogs.get(client.cache_key)
    if cached is not None:
        return cached
    fetched = Catalog(
        regions={r["name"]: r for r in client.list_regions()},
        instance_types={t["name"]: t for t in client.list_instance_types()},
    )
    with _lock:
        _catalogs[client.cache_key] = fetched
    return fetched


def forget_catalogs() -> None:
    """Drop cached catalogs (tests)."""
    with _lock:
        _catalogs.clear()


# -- cost ---------------------------------------------------------------------------------------------


def _usd(value: Decimal) -> int | Decimal:
    """A USD figure as the API shows it: six decimals at most, trailing zeros dropped."""
    rounded = value.quantize(USD_QUANTUM, rounding=ROUND_HALF_UP).normalize()
    return int(rounded) if rounded == rounded.to_integral_value() else rounded


@dataclass(frozen=True)
class CostEstimate:
    hourly_usd: int | Decimal
    upfront_usd: int | Decimal | None
    # The most the cluster can cost per hour (spot_with_fallback: its on-demand stand-ins); the figure
    # max_hourly_cost_usd is compared with, as the API's admission check does.
    max_hourly_usd: int | Decimal | None = None

    @property
    def ceiling_usd(self) -> int | Decimal:
        return self.hourly_usd if self.max_hourly_usd is None else self.max_hourly_usd


def _rate(value: Any) -> Decimal | None:
    """A listed USD-per-GPU-hour rate (exact decimal strings, as the API writes them)."""
    return None if value is None else Decimal(str(value))


def reserved_gpu_hour(catalog: Catalog, itype: str, days: int) -> Decimal:
    """The reserved rate of a term of `days`: the listed exact rate of the deepest tier it reaches (the
    API charges that rate), or on-demand less that tier's discount from a listing without rates."""
    shape = catalog.instance_types[itype]
    on_demand = Decimal(str(shape["on_demand_usd_per_gpu_hour"]))
    tiers = sorted(shape.get("reserved") or [], key=lambda t: int(t["min_duration_days"]))
    reached = [t for t in tiers if days >= int(t["min_duration_days"])]
    if not reached:
        return on_demand
    listed = _rate(reached[-1].get("usd_per_gpu_hour"))
    return listed if listed is not None else on_demand * (1 - Decimal(str(reached[-1]["discount"])))


def reserved_upfront(rate: Decimal, gpus: int, days: int) -> int | Decimal:
    """A term's one charge: `gpus` GPUs for `days` days at `rate`, rounded once to the micro-dollar
    half-up (as the API's `reserved_upfront_micros`)."""
    return _usd(rate * gpus * days * HOURS_PER_DAY)


def estimate(catalog: Catalog, plan: Mapping[str, Any]) -> CostEstimate | None:
    """Hourly (and reserved up-front) cost from the listed rates, as the API's one price function
    (`cluster_price`) computes it: spot and spot_with_fallback at the spot rate (fallback's ceiling at
    on-demand), a drawn reservation 0, the project's own servers (`host_pool_id`) 0, a reserved term at its
    tier's rate. None when a value it needs is unknown or the catalog has no price."""
    pool = plan.get("host_pool_id")
    if known(pool):  # no compute charge on servers of one's own, whatever their type (the API's choice)
        return CostEstimate(0, None, 0)
    itype, nodes, billing = plan.get("instance_type"), plan.get("node_count"), plan.get("billing")
    if not (known(itype) and known(nodes) and known(billing)) or itype not in catalog.instance_types:
        return None
    if is_unknown(pool):  # 0 on a pool, the price elsewhere
        return None
    shape = catalog.instance_types[itype]
    gpus = int(shape["gpu_count"]) * int(nodes)
    on_demand = Decimal(str(shape["on_demand_usd_per_gpu_hour"]))
    kind, days = billing.get("type"), billing.get("duration_days")
    if not known(kind):
        return None
    if kind != "reserved":
        drawn, capacity = plan.get("reservation_id"), plan.get("capacity_type") or "on_demand"
        if is_unknown(drawn) or is_unknown(capacity):
            return None
        if drawn:  # nodes of a capacity reservation are prepaid
            return CostEstimate(0, None, 0)
        if capacity == "on_demand":
            return CostEstimate(_usd(on_demand * gpus), None, _usd(on_demand * gpus))
        spot = _rate(shape.get("spot_usd_per_gpu_hour"))
        if spot is None:
            return None  # a listing without spot rates: the API prices it at apply
        ceiling = on_demand if capacity == "spot_with_fallback" else spot
        return CostEstimate(_usd(spot * gpus), None, _usd(ceiling * gpus))
    if not known(days):
        return None
    rate = reserved_gpu_hour(catalog, str(itype), int(days))
    hourly = _usd(rate * gpus)
    return CostEstimate(hourly, reserved_upfront(rate, gpus, int(days)), hourly)


# -- rules --------------------------------------------------------------------------------------------


def check_static_rules(ctx: Context, config: Mapping[str, Any], renames: Mapping[str, str]) -> None:
    """The API's rules between fields, from the OpenAPI contract (also run by `terraform validate`)."""
    check_field_rules(ctx, "ClusterCreate", config, renames)


def check_catalog_rules(ctx: Context, catalog: Catalog, plan: Mapping[str, Any]) -> None:
    """The backend's spec rules that need the catalog: region, instance type, fabric, interconnect."""
    region, itype, nodes = plan.get("region"), plan.get("instance_type"), plan.get("node_count")
    # A cluster on a host pool is in its pool's region, a name of the user's, on the servers' own network:
    # the catalog's regions and fabrics do not apply (the pool's region is checked against the pool).
    on_pool = plan.get("host_pool_id") is not None
    if known(region) and region not in catalog.regions and not on_pool:
        ctx.error(
            "Unknown Region",
            f"Region \"{region}\" does not exist; choose one of {catalog.region_names()}.",
            root("region"),
        )
        region = None
    if known(itype) and itype not in catalog.instance_types:
        ctx.error(
            "Unknown Instance Type",
            f"Instance type \"{itype}\" does not exist; {catalog.closest_types(str(itype))}choose one of "
            f"{catalog.type_names()} (see the gpucloud_instance_types data source).",
            root("instance_type"),
        )
        return
    if not known(itype):
        return
    shape = catalog.instance_types[itype]
    if known(nodes) and int(nodes) > 1 and not shape.get("fabric_capable"):
        capable = sorted(n for n, other in catalog.instance_types.items() if other.get("fabric_capable"))
        ctx.error(
            "Instance Type Cannot Form A Cluster",
            f"{itype} is not fabric-capable, so a cluster of it has one node: node_count = {nodes} needs an "
            "8-GPU type with InfiniBand or EFA. Set node_count = 1, or a fabric-capable instance_type"
            + (f" ({', '.join(capable)})." if capable else "."),
            root("node_count"),
        )
    # Which orchestrators run multi-node clusters of a single-node type does not matter, nor what the
    # cloud's driver runs on a host pool's servers (Slurm, whatever the driver: the API skips that check).
    elif plan.get("host_pool_id") is None:
        _check_orchestrator_offered(ctx, itype, shape, nodes, plan.get("orchestrator"))
    interconnect = plan.get("interconnect")
    offered = list(shape.get("interconnects") or [])
    if on_pool:
        return
    if known(interconnect) and interconnect not in offered:
        ctx.error(
            "Unsupported Interconnect",
            f"{itype} supports {', '.join(offered)}, not {interconnect}"
            f"{catalog.same_gpus_on(str(itype), str(interconnect))}.",
            root("interconnect"),
        )
        return
    wanted = interconnect if known(interconnect) else None
    if known(region) and not is_unknown(interconnect) and not catalog.availability(itype, region, wanted):
        regions = sorted({a["region"] for a in shape.get("availability") or []})
        in_region = catalog.availability(itype, region, None)
        fabric = f"{interconnect} fabric" if known(interconnect) else "fabric"
        ctx.error(
            "Instance Type Not Offered In Region",
            f"{region} has no {fabric} with {itype} nodes; {itype} is offered in "
            f"{', '.join(regions) or 'no region'}"
            + (f" ({region} has it on {in_region[0]['interconnect']})." if in_region else "."),
            root("interconnect") if in_region else root("instance_type"),
        )

def _check_orchestrator_offered(ctx: Context, itype: str, shape: Mapping[str, Any], nodes: Any,
                                orchestrator: Any) -> None:
    """The backend publishes which orchestrators its provisioning driver runs (a backend on the local
    driver runs no Kubernetes); a static rule already reports "none" on several nodes."""
    if not (known(nodes) and known(orchestrator)):
        return
    multi = int(nodes) > 1
    rules = shape.get("rules") or {}
    offered = rules.get("orchestrators_multi_node" if multi else "orchestrators_single_node")
    if offered is None or orchestrator in offered or (multi and orchestrator == "none"):
        return
    size = f"clusters of {nodes} nodes" if multi else "single-node clusters"
    ctx.error(
        "Orchestrator Not Offered",
        f"This cloud runs {size} of {itype} with {' or '.join(offered) or 'no orchestrator'}, not "
        f"{orchestrator} (its provisioning driver does not offer it).",
        root("orchestrator"),
    )


def check_reservation(
    ctx: Context, client: GpuCloudClient, plan: Mapping[str, Any], state: Mapping[str, Any] | None
) -> None:
    """A cluster drawing from a capacity reservation must match its region and instance type (errors
    naming the attribute to change); an unknown id is a warning, as for other references."""
    ref = plan.get("reservation_id")
    if not known(ref) or ref is None or (state is not None and state.get("reservation_id") == ref):
        return
    try:
        reservation = client.get_reservation(ref)
    except NotFound:
        ctx.reference_problem("Unknown Reservation", f"No capacity reservation with id \"{ref}\" in this "
                              "project.", root("reservation_id"))
        return
    except ApiError:
        return  # checked again by the API at apply
    for attr in ("region", "instance_type"):
        wanted, held = plan.get(attr), reservation.get(attr)
        if known(wanted) and wanted != held:
            ctx.error(
                "Cluster Does Not Match Its Reservation",
                f"Reservation {ref} holds {reservation.get('instance_type')} nodes in "
                f"{reservation.get('region')}; set {attr} = \"{held}\" or draw from another reservation.",
                root(attr),
            )


def check_capacity(
    ctx: Context, catalog: Catalog, plan: Mapping[str, Any], prior_nodes: int | None
) -> None:
    """A create, or a scale-up by the added nodes, must fit on one fabric of the region right now."""
    region, itype, nodes = plan.get("region"), plan.get("instance_type"), plan.get("node_count")
    interconnect = plan.get("interconnect")
    if not (known(region) and known(itype) and known(nodes) and known(interconnect)):
        return
    if region not in catalog.regions or itype not in catalog.instance_types:
        return
    needed = int(nodes) - (prior_nodes or 0)
    if needed <= 0:
        return
    fabrics = catalog.availability(itype, region, interconnect)
    if not fabrics:
        return
    best = max(int(a.get("available_nodes") or 0) for a in fabrics)
    if needed <= best:
        return
    where = ", ".join(f"{a['fabric']}: {a.get('available_nodes', 0)} of {a.get('capacity_nodes', '?')}"
                      for a in fabrics)
    if prior_nodes:
        ctx.error(
            "Insufficient Capacity",
            f"{region} cannot add {needed} nodes of {itype} to this cluster now: the {interconnect} fabric "
            f"has at most {best} free ({where} nodes free), so node_count can grow to {prior_nodes + best} "
            "at most. Another region would mean a new cluster (changing region replaces this one).",
            root("node_count"),
        )
        return
    ctx.error(
        "Insufficient Capacity",
        f"{region} cannot place {needed} nodes of {itype} on one {interconnect} fabric now: at most {best} "
        f"are available ({where} nodes free). Lower node_count or choose another region.",
        root("node_count"),
    )


def check_cost_ceiling(
    ctx: Context, plan: Mapping[str, Any], cost: CostEstimate | None, state: Mapping[str, Any] | None,
    catalog: Catalog | None = None,
) -> None:
    """max_hourly_cost_usd refuses a create or a change that raises the cost above it. A cost already above
    a lowered limit is a warning (a plan that does not raise it, a destroy included, must go through)."""
    ceiling = plan.get("max_hourly_cost_usd")
    if cost is None or not known(ceiling) or Decimal(cost.ceiling_usd) <= Decimal(ceiling):
        return
    most = cost.ceiling_usd
    fallback = " with on-demand nodes standing in for spot" if most != cost.hourly_usd else ""
    before = _prior_ceiling(catalog, state)
    if state is not None and (before is None or Decimal(most) <= Decimal(before)):
        ctx.warning(
            "Hourly Cost Above Limit",
            f"The cluster costs up to {most} USD per hour{fallback}, above max_hourly_cost_usd = {ceiling}. "
            "The limit refuses only creates and changes that raise the cost; lower node_count to get "
            "under it.",
            root("max_hourly_cost_usd"),
        )
        return
    ctx.error(
        "Hourly Cost Above Limit",
        f"The cluster would cost {most} USD per hour{fallback}, above max_hourly_cost_usd = {ceiling}. "
        "Lower node_count, pick a cheaper instance type or raise the limit.",
        root("max_hourly_cost_usd"),
    )


def _prior_ceiling(catalog: Catalog | None, state: Mapping[str, Any] | None) -> int | Decimal | None:
    """The most the cluster costs as it is now: priced from its state as the API prices the current
    spec, else the estimate recorded in state (None when neither is known)."""
    if state is None:
        return None
    prior = estimate(catalog, state) if catalog is not None else None
    if prior is not None:
        return prior.ceiling_usd
    recorded = state.get("estimated_hourly_cost_usd")
    return recorded if known(recorded) else None


# -- quotas -------------------------------------------------------------------------------------------

_QUOTA_UNITS = {"max_clusters": "clusters", "max_gpus": "GPUs", "max_hourly_usd": "USD per hour"}


def check_quota(
    ctx: Context, quotas: Mapping[str, Any], added: Mapping[str, int | Decimal]
) -> None:
    """A create or scale-up must keep the project within its quotas (`GET /v1/quotas`), as the API
    checks at apply: `added` is what the plan adds to each quota's use (clusters, GPUs, USD per hour)."""
    for name, unit in _QUOTA_UNITS.items():
        limit, more = quotas.get(name), Decimal(added.get(name, 0))
        used = Decimal(str(quotas.get(name.replace("max_", "") + "_in_use", 0)))
        if limit is None or more <= 0 or used + more <= Decimal(str(limit)):
            continue
        ctx.error(
            "Quota Exceeded",
            f"The project's quota {name} is {limit} {unit}: {_usd(used)} in use, and this plan adds "
            f"{_usd(more)} ({_usd(used + more)} in all). Lower node_count, delete another cluster, or ask "
            "the cloud's operator to raise the quota (the gpucloud_quota data source shows quotas and use).",
            None if name == "max_clusters" else root("node_count"),
        )
        return


def check_plan_quota(
    ctx: Context, client: GpuCloudClient, catalog: Catalog, plan: Mapping[str, Any],
    state: Mapping[str, Any] | None, cost: CostEstimate | None,
) -> None:
    """Read the project's quotas when the plan creates the cluster or adds nodes, and check them; a
    backend that cannot say (unreachable, older than quotas) leaves the check to the API at apply. An
    instance type not known yet (a host pool's, the API's choice) leaves the GPUs to the API."""
    itype, nodes = plan.get("instance_type"), plan.get("node_count")
    if not known(nodes) or (known(itype) and itype not in catalog.instance_types):
        return
    prior_nodes = 0 if state is None else int(state.get("node_count") or 0)
    if state is not None and int(nodes) <= prior_nodes:
        return
    try:
        quotas = client.get_quotas()
    except ApiError:
        return
    prior_cost = None if state is None else state.get("estimated_hourly_cost_usd")
    added: dict[str, int | Decimal] = {"max_clusters": 1 if state is None else 0}
    if known(itype):
        added["max_gpus"] = int(catalog.instance_types[itype]["gpu_count"]) * (int(nodes) - prior_nodes)
    if cost is not None and (state is None or known(prior_cost)):
        added["max_hourly_usd"] = Decimal(cost.hourly_usd) - Decimal(str(prior_cost or 0))
    check_quota(ctx, quotas, added)


def check_autoscaling_config(ctx: Context, config: Mapping[str, Any]) -> None:
    """`autoscaling` makes node_count the engine's: not both; and min_nodes <= max_nodes."""
    scaling = config.get("autoscaling")
    if scaling is None or is_unknown(scaling):
        return
    if config.get("node_count") is not None:
        ctx.error(
            "Conflicting Node Count",
            "node_count and autoscaling cannot both be set: with autoscaling the engine sets node_count "
            "between autoscaling.min_nodes and autoscaling.max_nodes. Remove node_count or autoscaling.",
            root("node_count"),
        )
    orchestrator = config.get("orchestrator")
    if known(orchestrator) and orchestrator != "slurm":
        ctx.error(
            "Autoscaling Needs Slurm",
            f"autoscaling reads the Slurm job queue: it needs orchestrator = \"slurm\" (this cluster has "
            f"\"{orchestrator}\"). Remove autoscaling or set orchestrator = \"slurm\".",
            root("autoscaling"),
        )
    low, high = scaling.get("min_nodes"), scaling.get("max_nodes")
    if known(low) and known(high) and int(low) > int(high):
        ctx.error(
            "Invalid Autoscaling Range",
            f"autoscaling.max_nodes ({high}) must be at least autoscaling.min_nodes ({low}).",
            root("autoscaling").attr("max_nodes"),
        )


def check_autoscaling_capacity(
    ctx: Context, catalog: Catalog, plan: Mapping[str, Any], creating: bool
) -> None:
    """max_nodes within what one fabric of the region holds; on create, min_nodes free now."""
    scaling, region, itype = plan.get("autoscaling"), plan.get("region"), plan.get("instance_type")
    interconnect = plan.get("interconnect")
    if scaling is None or not (known(scaling) and known(region) and known(itype) and known(interconnect)):
        return
    fabrics = catalog.availability(itype, region, interconnect)
    low, high = scaling.get("min_nodes"), scaling.get("max_nodes")
    if not fabrics or not (known(low) and known(high)):
        return
    most = max(int(a.get("capacity_nodes") or 0) for a in fabrics)
    if int(high) > most:
        ctx.error(
            "Autoscaling Range Exceeds Capacity",
            f"autoscaling.max_nodes ({high}) is more than one {interconnect} fabric of {region} holds "
            f"({most} x {itype}); lower it to {most} or less.",
            root("autoscaling").attr("max_nodes"),
        )
        return
    free = max(int(a.get("available_nodes") or 0) for a in fabrics)
    if creating and int(low) > free:
        ctx.error(
            "Insufficient Capacity",
            f"{region} cannot place autoscaling.min_nodes = {low} nodes of {itype} on one {interconnect} "
            f"fabric now: at most {free} are available. Lower min_nodes or choose another region.",
            root("autoscaling").attr("min_nodes"),
        )
